"""What a PDF is read with: :class:`PdfOptions`, and a source's own OCR options over them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from freshindex.core.errors import DocumentError


class OcrDeferred(Exception):
    """A page needs OCR and :attr:`PdfOptions.defer_ocr` asked for none here: read the PDF where OCR runs.

    Not a :class:`DocumentError`: nothing is wrong with the document.  The
    stage router (:mod:`workers.handoff`) sends it on to the ocr queue.
    """

    def __init__(self, page: int) -> None:
        super().__init__(f"page {page} is scanned")
        self.page = page


@dataclass(frozen=True)
class PdfOptions:
    max_pages: int = 2000
    max_ocr_pages: int = 50
    ocr_language: str = "eng"
    ocr_dpi: int = 300
    #: Word confidence (0-100) under which OCR'd numbers, amounts and commands are flagged.
    ocr_low_confidence: float = 80.0
    find_tables: bool = True
    #: Page segmentation modes tried in turn on a scanned page while its reading looks poor.
    ocr_psm: tuple[int, ...] = (3, 6)
    #: A reading whose rows tesseract split between blocks more than this tries the next mode.
    ocr_retry_fragmentation: float = 0.15
    #: A reading less confident than this (0-1) tries the next mode.
    ocr_retry_confidence: float = 0.85
    #: A scanned page read with less confidence than this (0-1) is a per-document warning.
    ocr_page_floor: float = 0.8
    #: Raise :class:`OcrDeferred` at the first page that would be OCR'd instead of reading it.
    defer_ocr: bool = False

    def with_source(self, options: Mapping[str, Any]) -> PdfOptions:
        """These options with a source's own OCR options (``sources add --option ocr_psm=6,3``).

        Keys (strings, as the CLI stores them, or typed values): ``ocr_psm``
        (comma-separated modes, tried in order), ``ocr_retry_confidence``
        (0-1: a reading under it tries the next mode), ``ocr_low_confidence``
        (0-100: words under it are flagged), ``ocr_page_floor`` (0-1: pages
        under it are warnings), ``ocr_language``.  Other keys are the
        connector's and ignored here.  A bad value fails the document as
        ``parse_failed`` naming the option, rather than parsing with a
        setting nobody asked for.
        """
        changes: dict[str, Any] = {}
        for name, (convert, lo, hi) in _SOURCE_OPTIONS.items():
            raw = options.get(name)
            if raw is None or raw == "":
                continue
            try:
                value = convert(raw)
            except (TypeError, ValueError) as exc:
                raise DocumentError(DocumentError.PARSE_FAILED, f"source option {name}={raw!r}: {exc}") from exc
            bad = [v for v in (value if isinstance(value, tuple) else (value,)) if isinstance(v, (int, float))
                   and not lo <= v <= hi]
            if bad or value == ():
                raise DocumentError(DocumentError.PARSE_FAILED,
                                    f"source option {name}={raw!r}: each value must be in [{lo}, {hi}]")
            changes[name] = value
        return replace(self, **changes) if changes else self


def _psm_list(raw: Any) -> tuple[int, ...]:
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    return tuple(int(str(v).strip()) for v in items if str(v).strip())


def _language(raw: Any) -> str:
    text = str(raw).strip()
    if not re.fullmatch(r"[A-Za-z_]+(?:\+[A-Za-z_]+)*", text):
        raise ValueError("expected tesseract language codes joined by '+' (eng, eng+deu)")
    return text


#: Source options that override :class:`PdfOptions`: name -> (conversion, lowest, highest value).
_SOURCE_OPTIONS: dict[str, tuple[Any, float, float]] = {
    "ocr_psm": (_psm_list, 1, 13),  # 0 is layout analysis only: it reads no text
    "ocr_retry_confidence": (float, 0.0, 1.0),
    "ocr_low_confidence": (float, 0.0, 100.0),
    "ocr_page_floor": (float, 0.0, 1.0),
    "ocr_language": (_language, 0, 0),
}
