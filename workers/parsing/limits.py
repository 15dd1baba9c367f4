"""Guards against input that is too big, too deep or too slow to parse.

A parser checks the limits of the document it is reading with
:func:`current` (set by :meth:`workers.parsing.Parsers.parse` for the
duration of one document) and raises :class:`core.errors.DocumentError`
when one is exceeded, so one hostile or broken file fails alone with a
reason code and the sync carries on.

The time limit is cooperative: parsers call :func:`check_time` between
pages, rows and blocks, and the OCR subprocess gets the remaining time as
its timeout.  One call into a C library (MuPDF laying out a single page) is
not interrupted; the Celery task time limit is the backstop for that.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from freshindex.core.errors import DocumentError
from freshindex.settings.sections.ingest import SourcesSettings

#: The defaults of the limits ``sources`` settings hold, read from there (their one home).
_SETTINGS = SourcesSettings()


@dataclass(frozen=True)
class Limits:
    """The bounds of one document; defaults are the ``sources`` settings' (``parse_time_limit_s``, ``max_*``)."""

    #: Seconds one document may spend in parsing (0 = no limit).
    time_limit_s: float = _SETTINGS.parse_time_limit_s
    #: Element nesting depth of HTML and Markdown (real pages stay under 60).
    max_nesting_depth: int = _SETTINGS.max_nesting_depth
    #: Rows of one CSV/TSV file or one table.
    max_table_rows: int = _SETTINGS.max_table_rows
    #: Blocks of one parsed document (paragraphs, rows, list items...).
    max_blocks: int = 500_000
    #: Pixels of one page rendered for OCR; the DPI is lowered to fit, and a
    #: page that does not fit even at 72 DPI is refused.
    max_render_pixels: int = int(_SETTINGS.max_render_megapixels * 1_000_000)
    #: Declared pixels of one image, checked before anything decodes it (a
    #: decompression bomb declares absurd dimensions in a few bytes).  An
    #: image at the limit passes; one pixel more is refused.  The default,
    #: 100 megapixels (an A3 scan at 600 DPI is 70), decodes to at most
    #: 300 MB in RGB, so one image cannot take a worker past 1 GB.
    max_image_pixels: int = int(_SETTINGS.max_image_megapixels * 1_000_000)
    #: Bytes the compressed streams of one document may inflate to: each
    #: stream, and all streams other than images together (images are bounded
    #: by ``max_image_pixels`` and decoded one page at a time).
    max_decompressed_bytes: int = _SETTINGS.max_decompressed_bytes
    #: Parts one zip package (an Office file) may list.
    max_archive_members: int = _SETTINGS.max_archive_members
    #: XML elements all parts of one zip package may hold together.
    max_xml_elements: int = _SETTINGS.max_xml_elements

    @classmethod
    def from_settings(cls, src: SourcesSettings) -> Limits:
        """The limits a ``sources`` settings section sets (megapixels as pixels)."""
        return cls(time_limit_s=src.parse_time_limit_s, max_nesting_depth=src.max_nesting_depth,
                   max_table_rows=src.max_table_rows, max_render_pixels=int(src.max_render_megapixels * 1_000_000),
                   max_image_pixels=int(src.max_image_megapixels * 1_000_000),
                   max_decompressed_bytes=src.max_decompressed_bytes, max_archive_members=src.max_archive_members,
                   max_xml_elements=src.max_xml_elements)


@dataclass
class _Budget:
    limits: Limits
    started: float = field(default_factory=time.monotonic)

    @property
    def deadline(self) -> float | None:
        return self.started + self.limits.time_limit_s if self.limits.time_limit_s > 0 else None


_current: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("freshindex_parse_budget", default=None)
_DEFAULT = Limits(time_limit_s=0)


@contextmanager
def applied(limits: Limits) -> Iterator[Limits]:
    """Make ``limits`` the ones :func:`current` returns, with the clock starting now."""
    token = _current.set(_Budget(limits))
    try:
        yield limits
    finally:
        _current.reset(token)


def current() -> Limits:
    budget = _current.get()
    return budget.limits if budget else _DEFAULT


def remaining() -> float | None:
    """Seconds left for the current document, or None without a time limit."""
    budget = _current.get()
    if budget is None or budget.deadline is None:
        return None
    return budget.deadline - time.monotonic()


def check_time(where: str = "") -> None:
    left = remaining()
    if left is not None and left <= 0:
        budget = _current.get()
        assert budget is not None
        spent = time.monotonic() - budget.started
        at = f" (at {where})" if where else ""
        raise DocumentError(
            DocumentError.TIMED_OUT,
            f"parsing took {spent:.1f}s, over the per-document limit of {budget.limits.time_limit_s:g}s{at}",
        )


def check_depth(depth: int, what: str) -> None:
    limit = current().max_nesting_depth
    if depth > limit:
        raise DocumentError(DocumentError.TOO_COMPLEX, f"{what} nested {depth} levels deep, limit {limit}")


def check_rows(rows: int, what: str = "table") -> None:
    limit = current().max_table_rows
    if rows > limit:
        raise DocumentError(DocumentError.TOO_LARGE, f"{what} has more than {limit} rows")


def check_blocks(blocks: int) -> None:
    limit = current().max_blocks
    if blocks > limit:
        raise DocumentError(DocumentError.TOO_LARGE, f"more than {limit} blocks in one document")


def check_image(width: int, height: int, what: str) -> None:
    """Refuse an image whose declared size is over ``max_image_pixels``, before it is decoded."""
    limit = current().max_image_pixels
    if width < 0 or height < 0 or width * height > limit:
        raise DocumentError(
            DocumentError.TOO_LARGE,
            f"{what} is a {width}x{height} image ({width * height / 1e6:.0f} megapixels), "
            f"limit {limit / 1e6:g} megapixels",
        )
