"""The parser contract: what the pipeline and the planner rely on from a registered :class:`ParserSpec`.

A subclass names the parser (:attr:`ParserContract.parser`, the spec's
``name``), gives a small valid document (:meth:`ParserContract.sample`, with
a phrase it must yield, :attr:`ParserContract.sample_text`) and bytes it
must refuse (:meth:`ParserContract.bad_input`).  The suite checks:

- the registry finds the spec by every extension and media type it declares;
- its version is one the document records can hold, and the parse is labelled
  with the spec's name and version;
- the sample parses into blocks of text that hold the phrase, and parsing it
  twice gives the same blocks (chunk ids derive from them);
- the bad input raises :class:`DocumentError` from the parse function itself
  (not only through :meth:`Parsers.parse`'s catch-all), so its reason is the
  parser's own and nothing else escapes.

What it does not check: the quality of the structure (headings, tables,
reading order), limits, OCR, or which reason the bad input gets; each
format's own tests cover those.
"""

from __future__ import annotations

import re

import pytest

from freshindex.core.errors import DocumentError
from freshindex.core.types import ParsedDocument
from freshindex.workers.parsing import Parsers, limits
from freshindex.workers.parsing.registry import ParserSpec, spec_for, spec_named

_VERSION = re.compile(r"[A-Za-z0-9_+-]{1,48}")


class ParserContract:
    """Subclass as ``TestMyParser(ParserContract)``: set :attr:`parser` and :attr:`sample_text`, implement
    :meth:`sample` and :meth:`bad_input`."""

    #: The spec's name (``ParsedDocument.parser``, the ``parser`` label of every point).
    parser = ""
    #: A phrase the sample's blocks must hold.
    sample_text = ""

    def sample(self) -> bytes:
        """A small valid document of this format."""
        raise NotImplementedError

    def bad_input(self) -> bytes:
        """Bytes with this format's name that the parser must refuse."""
        raise NotImplementedError

    def key(self) -> str:
        """The key the sample and the bad input are parsed under (default: ``sample`` + the first extension)."""
        spec = self.spec()
        return "sample" + (spec.extensions[0] if spec.extensions else "")

    def spec(self) -> ParserSpec:
        spec = spec_named(self.parser)
        assert spec is not None, f"no parser named {self.parser!r} is registered"
        return spec

    def parse_raw(self, data: bytes) -> ParsedDocument:
        """The spec's own parse function (with its options and the default limits), without the catch-all."""
        spec, parsers = self.spec(), Parsers()
        with limits.applied(parsers.limits):
            if spec.options:
                return spec.parse(data, self.key(), getattr(parsers, spec.options))
            return spec.parse(data, self.key())

    def test_the_registry_finds_it_by_every_name_it_declares(self) -> None:
        spec = self.spec()
        assert spec.extensions or spec.media_types, "a parser nothing selects"
        for ext in spec.extensions:
            assert spec_for(f"docs/file{ext}") is spec, ext
            assert spec_for(f"docs/FILE{ext.upper()}") is spec, ext.upper()
        for media_type in spec.media_types:
            assert spec_for("docs/page", media_type) is spec, media_type
            assert spec_for("docs/page", f"{media_type.upper()}; charset=utf-8") is spec, media_type

    def test_its_version_is_recorded_with_every_parse(self) -> None:
        spec = self.spec()
        assert _VERSION.fullmatch(spec.version), spec.version
        parsed = Parsers().parse(self.sample(), self.key())
        assert (parsed.parser, parsed.parser_version) == (spec.name, spec.version)

    def test_a_small_sample_parses_into_blocks_of_text(self) -> None:
        parsed = self.parse_raw(self.sample())
        assert isinstance(parsed.title, str)
        assert parsed.blocks, "no blocks"
        assert all(isinstance(b.text, str) for b in parsed.blocks)
        text = " ".join(b.text for b in parsed.blocks)
        assert self.sample_text and self.sample_text in text, text[:500]
        assert self.parse_raw(self.sample()).blocks == parsed.blocks  # the same bytes, the same blocks

    def test_bad_input_is_a_document_error_and_nothing_else(self) -> None:
        with pytest.raises(DocumentError) as err:
            self.parse_raw(self.bad_input())
        assert err.value.reason, "a DocumentError without a reason"


__all__ = ["ParserContract"]
