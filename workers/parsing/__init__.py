"""Parsers: bytes of one source object to a :class:`core.types.ParsedDocument`.

:class:`Parsers` picks a parser through the parser registry
(:mod:`workers.parsing.registry`: by extension, else by the media type the
source gave, else the plain-text parser for a key without an extension);
a key no spec reads is a per-document ``unsupported_type`` error, never a
guess.  It applies the per-document :class:`~workers.parsing.limits.Limits`
(time, nesting depth, rows, rendered pixels) while the parser runs, and
turns any unexpected exception into ``parse_failed`` for that document only.
:data:`BUILTIN` declares the built-in formats, one spec a line.

What it does not do: decide whether a document needs parsing (the pipeline
compares the version :meth:`Parsers.version_for` gives with the one the
document recorded), nor sniff a format from the bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from freshindex.core.errors import DocumentError
from freshindex.core.types import ParsedDocument
from freshindex.workers.parsing import code, html, markdown, office, pdf, plain, table
from freshindex.workers.parsing import limits as _limits
from freshindex.workers.parsing.code import LANGUAGES, parse_code
from freshindex.workers.parsing.html import parse_html, shape_html
from freshindex.workers.parsing.limits import Limits
from freshindex.workers.parsing.markdown import parse_markdown
from freshindex.workers.parsing.office import parse_docx, parse_pptx, parse_xlsx
from freshindex.workers.parsing.pdf import OcrDeferred, PdfOptions, parse_pdf
from freshindex.workers.parsing.plain import parse_plain
from freshindex.workers.parsing.registry import MediaTypes, ParserSpec, extension_of, spec_for
from freshindex.workers.parsing.table import parse_table

ParserFn = Callable[[bytes, str], ParsedDocument]

__all__ = ["BUILTIN", "MEDIA_TYPES", "Limits", "OcrDeferred", "ParserSpec", "Parsers", "PdfOptions", "extension_for"]

_OFFICE = "application/vnd.openxmlformats-officedocument."
#: The built-in formats: a spec a line (name = the ``parser`` label its documents record; the version is the
#: parser module's own, recorded per document: bumping it re-parses that format's documents only).
BUILTIN: tuple[ParserSpec, ...] = (
    ParserSpec("markdown", markdown.VERSION, parse_markdown, (".md", ".markdown", ".mdx"),
               ("text/markdown", "text/x-markdown")),
    ParserSpec("html", html.VERSION, parse_html, (".html", ".htm", ".xhtml"), ("text/html", "application/xhtml+xml"),
               shape=shape_html),
    ParserSpec("text", plain.VERSION, parse_plain, (".txt", ".text", ".rst", ".log"), ("text/plain", "text/x-rst"),
               bare=True),
    ParserSpec("table", table.VERSION, parse_table, (".csv", ".tsv"), ("text/csv", "text/tab-separated-values")),
    ParserSpec("pdf", pdf.VERSION, parse_pdf, (".pdf",), ("application/pdf",), options="pdf"),
    ParserSpec("docx", office.VERSION, parse_docx, (".docx",), (_OFFICE + "wordprocessingml.document",)),
    ParserSpec("pptx", office.VERSION, parse_pptx, (".pptx",), (_OFFICE + "presentationml.presentation",)),
    ParserSpec("xlsx", office.VERSION, parse_xlsx, (".xlsx",), (_OFFICE + "spreadsheetml.sheet",)),
    ParserSpec("code", code.VERSION, parse_code, tuple(LANGUAGES)),
)

#: Media types (as an HTTP source or an object store's Content-Type names them) to the extension whose
#: parser reads them, for a key that carries no extension it has a parser for (a live view of the registry).
MEDIA_TYPES: Mapping[str, str] = MediaTypes()


def extension_for(media_type: str | None) -> str | None:
    """The extension parsed for ``media_type`` (parameters such as ``; charset=utf-8`` ignored), or None."""
    if not media_type:
        return None
    return MEDIA_TYPES.get(media_type.split(";", 1)[0].strip().lower())


def _bound(fn: Callable[..., ParsedDocument], options: Any) -> ParserFn:
    """``fn`` with its options as third argument, named as ``fn`` (the formats table names parsers)."""
    def parse(data: bytes, key: str) -> ParsedDocument:
        return fn(data, key, options)
    parse.__name__ = fn.__name__
    return parse


@dataclass(frozen=True)
class Parsers:
    pdf: PdfOptions = field(default_factory=PdfOptions)
    limits: Limits = field(default_factory=Limits)

    def for_source(self, options: Mapping[str, Any] | None) -> Parsers:
        """These parsers with a source's own options applied (OCR: :meth:`PdfOptions.with_source`)."""
        pdf = self.pdf.with_source(options or {})
        return self if pdf is self.pdf else replace(self, pdf=pdf)

    def deferring_ocr(self) -> Parsers:
        """These parsers, raising :class:`OcrDeferred` where a PDF page would be OCR'd."""
        return replace(self, pdf=replace(self.pdf, defer_ocr=True))

    def spec_for(self, key: str, media_type: str | None = None) -> ParserSpec:
        """The registry's spec for ``key`` (:func:`workers.parsing.registry.spec_for`); none is ``unsupported_type``."""
        spec = spec_for(key, media_type)
        if spec is None:
            ext = extension_of(key)
            raise DocumentError(DocumentError.UNSUPPORTED, f"no parser for {ext or 'files without an extension'}"
                                + (f" ({media_type})" if media_type else ""))
        return spec

    def version_for(self, key: str, media_type: str | None = None) -> str | None:
        """The version of the parser that reads ``key`` (None when none does): what its document records."""
        spec = spec_for(key, media_type)
        return spec.version if spec is not None else None

    def for_key(self, key: str, media_type: str | None = None) -> ParserFn:
        """The parser for ``key`` by its extension; a key without one it has a parser for is read by ``media_type``."""
        return self._function(self.spec_for(key, media_type))

    def _function(self, spec: ParserSpec) -> ParserFn:
        return _bound(spec.parse, getattr(self, spec.options)) if spec.options else spec.parse

    def supports(self, key: str, media_type: str | None = None) -> bool:
        return spec_for(key, media_type) is not None

    def shape(self, data: bytes, key: str, media_type: str | None = None) -> str | None:
        """The hash of what parsing ``data`` would read (``ParsedDocument.meta["shape_hash"]``), for
        less than a parse; None for a format without one, or when the bytes cannot be read (the
        parse then says why).  Equal hashes mean equal parses; see :func:`parse_html`'s ``shape_html``."""
        spec = spec_for(key, media_type)
        if spec is None or spec.shape is None:
            return None
        try:
            with _limits.applied(self.limits):
                return spec.shape(data)
        except Exception:  # a refused or broken page: parsing it records the reason
            return None

    def parse(self, data: bytes, key: str, media_type: str | None = None) -> ParsedDocument:
        """Parse with the spec that reads ``key``; the result is labelled with that spec's name and version
        (what the document records), whatever the parse function wrote."""
        spec = self.spec_for(key, media_type)
        parser = self._function(spec)
        with _limits.applied(self.limits):
            try:
                parsed = parser(data, key)
                _limits.check_time("end of parsing")
                if (parsed.parser, parsed.parser_version) != (spec.name, spec.version):
                    parsed = replace(parsed, parser=spec.name, parser_version=spec.version)
                return parsed
            except (DocumentError, OcrDeferred):
                raise
            except RecursionError as exc:
                raise DocumentError(DocumentError.TOO_COMPLEX, "document nesting too deep") from exc
            except MemoryError as exc:
                raise DocumentError(DocumentError.TOO_LARGE, "the document needs too much memory to parse") from exc
            except Exception as exc:  # a parser bug or a pathological file: fail this document only
                raise DocumentError(DocumentError.PARSE_FAILED, f"{type(exc).__name__}: {exc}") from exc
