"""Parsers: bytes of one source object to a :class:`core.types.ParsedDocument`.

:class:`Parsers` picks a parser by file extension; an unknown extension is a
per-document ``unsupported_type`` error, never a guess.  It applies the
per-document :class:`~workers.parsing.limits.Limits` (time, nesting depth,
rows, rendered pixels) while the parser runs, and turns any unexpected
exception into ``parse_failed`` for that document only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from freshindex.core.errors import DocumentError
from freshindex.core.types import ParsedDocument
from freshindex.workers.parsing import limits as _limits
from freshindex.workers.parsing.code import LANGUAGES, parse_code
from freshindex.workers.parsing.html import parse_html, shape_html
from freshindex.workers.parsing.limits import Limits
from freshindex.workers.parsing.markdown import parse_markdown
from freshindex.workers.parsing.office import parse_docx, parse_pptx, parse_xlsx
from freshindex.workers.parsing.pdf import OcrDeferred, PdfOptions, parse_pdf
from freshindex.workers.parsing.plain import parse_plain
from freshindex.workers.parsing.table import parse_table

ParserFn = Callable[[bytes, str], ParsedDocument]

#: Bumped whenever any parser's output may change; it enters the pipeline
#: version recorded per document, so a parser upgrade re-chunks deliberately.
PARSER_SET_VERSION = "p7"  # p7: HTML on lxml (html-5: a block opened inside <p> closes it); p6: code-5
# p5: code parser code-4 (Python signatures end at their colon)

__all__ = ["MEDIA_TYPES", "PARSER_SET_VERSION", "Limits", "OcrDeferred", "Parsers", "PdfOptions", "extension_for"]

#: Media types (as an HTTP source or an object store's Content-Type names them) to the extension whose
#: parser reads them, for a key that carries no extension of its own (see :meth:`Parsers.for_key`).
MEDIA_TYPES = {
    "text/markdown": ".md", "text/x-markdown": ".md",
    "text/html": ".html", "application/xhtml+xml": ".xhtml",
    "text/plain": ".txt", "text/x-rst": ".rst",
    "text/csv": ".csv", "text/tab-separated-values": ".tsv",
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": ".xlsx",
}
_OFFICE = {".docx": parse_docx, ".pptx": parse_pptx, ".xlsx": parse_xlsx}


def extension_for(media_type: str | None) -> str | None:
    """The extension parsed for ``media_type`` (parameters such as ``; charset=utf-8`` ignored), or None."""
    if not media_type:
        return None
    return MEDIA_TYPES.get(media_type.split(";", 1)[0].strip().lower())


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

    def for_key(self, key: str, media_type: str | None = None) -> ParserFn:
        """The parser for ``key`` by its extension; a key without one is read by its ``media_type``."""
        ext = key[key.rfind(".") :].lower() if "." in key.rsplit("/", 1)[-1] else ""
        if not ext:
            ext = extension_for(media_type) or ""
        if ext in (".md", ".markdown", ".mdx"):
            return parse_markdown
        if ext in (".html", ".htm", ".xhtml"):
            return parse_html
        if ext in (".txt", ".text", ".rst", ".log", ""):
            return parse_plain
        if ext in (".csv", ".tsv"):
            return parse_table
        if ext in _OFFICE:
            return _OFFICE[ext]
        if ext == ".pdf":
            return lambda data, key: parse_pdf(data, key, self.pdf)
        if ext in LANGUAGES:
            return parse_code
        raise DocumentError(DocumentError.UNSUPPORTED, f"no parser for {ext or 'files without an extension'}")

    def supports(self, key: str, media_type: str | None = None) -> bool:
        try:
            self.for_key(key, media_type)
        except DocumentError:
            return False
        return True

    def shape(self, data: bytes, key: str, media_type: str | None = None) -> str | None:
        """The hash of what parsing ``data`` would read (``ParsedDocument.meta["shape_hash"]``), for
        less than a parse; None for a format without one, or when the bytes cannot be read (the
        parse then says why).  Equal hashes mean equal parses; see :func:`parse_html`'s ``shape_html``."""
        try:
            if self.for_key(key, media_type) is not parse_html:
                return None
            with _limits.applied(self.limits):
                return shape_html(data)
        except Exception:  # a refused or broken page: parsing it records the reason
            return None

    def parse(self, data: bytes, key: str, media_type: str | None = None) -> ParsedDocument:
        parser = self.for_key(key, media_type)
        with _limits.applied(self.limits):
            try:
                parsed = parser(data, key)
                _limits.check_time("end of parsing")
                return parsed
            except (DocumentError, OcrDeferred):
                raise
            except RecursionError as exc:
                raise DocumentError(DocumentError.TOO_COMPLEX, "document nesting too deep") from exc
            except MemoryError as exc:
                raise DocumentError(DocumentError.TOO_LARGE, "the document needs too much memory to parse") from exc
            except Exception as exc:  # a parser bug or a pathological file: fail this document only
                raise DocumentError(DocumentError.PARSE_FAILED, f"{type(exc).__name__}: {exc}") from exc
