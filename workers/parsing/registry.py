"""The parser registry: one :class:`ParserSpec` per format, found by extension or media type.

Everything that depends on which parser reads a document reads it from
here: :class:`workers.parsing.Parsers` (which parser reads a key, with its
options and limits), the pipeline and the planner (the version a document
is recorded with, :func:`workers.pipeline.document_version`), and the
formats table in ``docs/architecture.md`` (tested against :func:`specs`).

A spec carries its parser's own :attr:`ParserSpec.version`; a document
records the version of the parser that read it, so bumping one parser's
version re-parses that parser's documents and no other.

A new format is one spec: a line in :data:`workers.parsing.BUILTIN`, or,
from code that is not part of freshindex (a plugin, a test),
``register(ParserSpec(name="rtf", version="rtf-1", parse=..., extensions=(".rtf",)))``.
The built-in specs are registered on first use, never at import of this
module.

What it does not do: guess a format from the bytes (an unknown extension
with no known media type is ``unsupported_type``), nor check that a parser
keeps its version honest: a change to its output without a new
:attr:`ParserSpec.version` is not re-parsed until the document changes.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from freshindex.core.errors import ConfigError
from freshindex.core.types import ParsedDocument

#: A parser's version goes into every document record of its format (``documents.parser_version``,
#: joined to the pipeline's with a dot): no dot of its own, and short enough for the column.
_VERSION = re.compile(r"[A-Za-z0-9_+-]{1,48}")
_NAME = re.compile(r"[a-z0-9_]{1,32}")


@dataclass(frozen=True)
class ParserSpec:
    """A format: the parser that reads it, its version, and the names that select it.

    ``parse(data, key)`` returns the :class:`~core.types.ParsedDocument`
    (with ``options``, ``parse(data, key, getattr(parsers, options))``:
    the PDF parser takes ``Parsers.pdf``).  ``name`` is the ``parser``
    label stored per document and in every point's payload.  ``bare``: the
    spec also reads a key without an extension whose media type names no
    parser.  ``shape(data)``, where given, hashes what a parse would read
    for less than a parse (``ParsedDocument.meta["shape_hash"]``).
    """

    name: str
    version: str
    parse: Callable[..., ParsedDocument]
    extensions: tuple[str, ...] = ()
    media_types: tuple[str, ...] = ()
    bare: bool = False
    options: str | None = None
    shape: Callable[[bytes], str] | None = None


_SPECS: dict[str, ParserSpec] = {}
_BY_EXTENSION: dict[str, str] = {}
_BY_MEDIA: dict[str, str] = {}
_lock = threading.RLock()
_loaded = False


def _check(spec: ParserSpec) -> None:
    if not _NAME.fullmatch(spec.name):
        raise ConfigError(f"parser name {spec.name!r}: lower-case letters, digits and _ only, at most 32")
    if not _VERSION.fullmatch(spec.version):
        raise ConfigError(f"parser {spec.name!r}: version {spec.version!r} must be 1 to 48 letters, digits, "
                          "'-', '_' or '+' (no dot: it is joined to the pipeline's version with one)")
    bad = [e for e in spec.extensions if not re.fullmatch(r"\.[a-z0-9_+-]+", e)]
    if bad:
        raise ConfigError(f"parser {spec.name!r}: extensions are lower-case and start with a dot: {bad}")


def register(spec: ParserSpec, *, replace: bool = False) -> ParserSpec:
    """Add ``spec``; a name, extension or media type another spec holds is an error.

    With ``replace`` a spec of the same name is swapped out (a test bumping
    one parser's version); its extensions and media types go with it.
    """
    _check(spec)
    with _lock:
        if not _loaded and spec.name not in _SPECS:
            _load_builtin()  # a plugin's claims are checked against the built-in ones
        current = _SPECS.get(spec.name)
        if current is not None and current is not spec and not replace:
            raise ConfigError(f"parser {spec.name!r} is already registered")
        if current is not None:
            _drop(current)
        clash = [f"{e} ({_BY_EXTENSION[e]})" for e in spec.extensions if e in _BY_EXTENSION]
        clash += [f"{m} ({_BY_MEDIA[m.lower()]})" for m in spec.media_types if m.lower() in _BY_MEDIA]
        clash += [f"keys without an extension ({s.name})" for s in _SPECS.values() if spec.bare and s.bare]
        if clash:
            if current is not None:
                _add(current)
            raise ConfigError(f"parser {spec.name!r}: already read by another parser: {', '.join(clash)}")
        _add(spec)
    return spec


def _add(spec: ParserSpec) -> None:
    _SPECS[spec.name] = spec
    _BY_EXTENSION.update(dict.fromkeys(spec.extensions, spec.name))
    _BY_MEDIA.update(dict.fromkeys((m.lower() for m in spec.media_types), spec.name))


def _drop(spec: ParserSpec) -> None:
    _SPECS.pop(spec.name, None)
    for table in (_BY_EXTENSION, _BY_MEDIA):
        for k in [k for k, name in table.items() if name == spec.name]:
            del table[k]


def unregister(name: str) -> None:
    """Remove the parser ``name`` (tests that registered a toy format clean up with it)."""
    with _lock:
        if (spec := _SPECS.get(name)) is not None:
            _drop(spec)


def _load_builtin() -> None:
    global _loaded
    with _lock:
        if _loaded:
            return
        _loaded = True
        for spec in importlib.import_module("freshindex.workers.parsing").BUILTIN:
            if spec.name not in _SPECS:
                register(spec)


def specs() -> tuple[ParserSpec, ...]:
    """Every registered spec, by name."""
    _load_builtin()
    return tuple(_SPECS[n] for n in sorted(_SPECS))


def spec_named(name: str) -> ParserSpec | None:
    """The spec whose parser labels its documents ``name`` (``ParsedDocument.parser``), or None."""
    _load_builtin()
    return _SPECS.get(name)


def extension_of(key: str) -> str:
    """``key``'s extension, lower-case with its dot ("" when its last segment has none)."""
    name = key.rsplit("/", 1)[-1]
    return name[name.rfind(".") :].lower() if "." in name else ""


def _media(media_type: str | None) -> str:
    return media_type.split(";", 1)[0].strip().lower() if media_type else ""


def spec_for(key: str, media_type: str | None = None) -> ParserSpec | None:
    """The spec that reads ``key``: by its extension; else by ``media_type`` (parameters such as
    ``; charset=utf-8`` ignored); else, for a key without an extension, the ``bare`` spec; else None."""
    _load_builtin()
    ext = extension_of(key)
    name = _BY_EXTENSION.get(ext) if ext else None
    if name is None:
        name = _BY_MEDIA.get(_media(media_type))
    if name is None and not ext:
        name = next((s.name for s in _SPECS.values() if s.bare), None)
    return _SPECS.get(name) if name is not None else None


class MediaTypes(Mapping[str, str]):
    """A live view: media type -> the first extension of the spec that reads it."""

    def __getitem__(self, media_type: str) -> str:
        _load_builtin()
        spec = _SPECS[_BY_MEDIA[media_type]]
        return spec.extensions[0] if spec.extensions else ""

    def __iter__(self) -> Iterator[str]:
        _load_builtin()
        return iter(sorted(_BY_MEDIA))

    def __len__(self) -> int:
        _load_builtin()
        return len(_BY_MEDIA)


__all__ = ["MediaTypes", "ParserSpec", "extension_of", "register", "spec_for", "spec_named", "specs", "unregister"]
