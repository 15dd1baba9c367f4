"""Decompression-bomb guards for PDF files, checked before MuPDF reads a page.

A PDF stores its page contents, fonts and images as compressed streams.
Deflate expands up to about 1032:1, so a 1 MB stream can hold 1 GB of
whitespace that MuPDF would inflate and interpret page by page (minutes of
CPU for no text), and an image can declare 20000 x 20000 pixels in a few
bytes.  :func:`check_pdf_streams` walks every object of the file once:

* an image (``/Subtype /Image``, including soft masks and images no page
  uses) whose declared ``/Width`` x ``/Height`` is over
  :attr:`~workers.parsing.limits.Limits.max_image_pixels` fails the document
  as ``too_large`` before anything decodes it;
* a ``/FlateDecode`` stream is inflated here in bounded steps, counting and
  discarding the output, and fails the document as ``too_large`` as soon as
  it (or all non-image streams together) passes
  :attr:`~workers.parsing.limits.Limits.max_decompressed_bytes`.  Memory
  stays at one step (8 MB) whatever the stream holds.  A file too small to
  reach the limit even at deflate's best ratio is not inflated at all.

Not guaranteed: only deflate is measured.  ``/LZWDecode`` and
``/RunLengthDecode`` streams (rare in PDFs written since 2000) are not, and
an inline image inside a content stream is bounded only by the size of that
content stream; the per-document time limit is the backstop for those.
"""

from __future__ import annotations

import zlib
from typing import Any

from freshindex.core.errors import DocumentError
from freshindex.workers.parsing import limits

#: Deflate's best case: a 258-byte match in about two bits.
FLATE_MAX_RATIO = 1032
_STEP = 8 * 1024 * 1024


def inflated_size(raw: bytes, cap: int) -> int:
    """Bytes ``raw`` (a zlib stream) inflates to, counting no further than just past ``cap``.

    A damaged stream counts what inflated before the damage (MuPDF reads as
    much of it as it can, too).
    """
    d = zlib.decompressobj()
    if raw[:1] and (raw[0] & 0x0F) != 8:  # no zlib header: a raw deflate stream, as some writers emit
        d = zlib.decompressobj(-15)
    total = 0
    data = raw
    try:
        while True:
            out = d.decompress(data, _STEP)
            total += len(out)
            if total > cap or d.eof:
                return total
            data = d.unconsumed_tail
            if not out and not data:
                return total
    except zlib.error:
        return total


def _first_filter(value: tuple[str, str]) -> str:
    kind, text = value
    if kind == "name":
        return text
    if kind == "array":
        parts = text.strip("[] ").split()
        return parts[0] if parts else ""
    return ""


def _int(value: tuple[str, str]) -> int:
    try:
        return int(float(value[1]))
    except (TypeError, ValueError, IndexError):
        return 0


def check_pdf_streams(doc: Any, file_size: int) -> None:
    """Refuse ``doc`` (an open ``pymupdf.Document``) if a stream or image is a bomb; see the module doc."""
    lim = limits.current()
    budget = lim.max_decompressed_bytes
    measure = file_size * FLATE_MAX_RATIO > budget
    content_total = 0
    for xref in range(1, doc.xref_length()):
        if xref % 256 == 0:
            limits.check_time("checking the PDF's streams")
        try:
            if not doc.xref_is_stream(xref):
                continue
            is_image = doc.xref_get_key(xref, "Subtype") == ("name", "/Image")
            if is_image:
                width, height = _int(doc.xref_get_key(xref, "Width")), _int(doc.xref_get_key(xref, "Height"))
            flate = _first_filter(doc.xref_get_key(xref, "Filter")) == "/FlateDecode"
        except Exception:  # a damaged object (MuPDF's errors have no common base): decided if a page uses it
            continue
        if is_image:
            limits.check_image(width, height, f"PDF object {xref}")
        if not (measure and flate):
            continue
        try:
            raw = doc.xref_stream_raw(xref)
        except Exception:  # as above: a stream MuPDF cannot read is not one it will inflate
            continue
        room = budget if is_image else budget - content_total
        size = inflated_size(raw or b"", room)
        if size > room:
            what = "an image stream" if is_image else "its compressed streams"
            raise DocumentError(
                DocumentError.TOO_LARGE,
                f"{what} inflate to more than {budget} bytes (PDF object {xref}: {len(raw)} bytes compressed); "
                "a decompression bomb or a document too big to index",
            )
        if not is_image:
            content_total += size
