"""Scanned pages: real tesseract OCR, page numbers, confidence, flagged numbers.

The scans are generated (``examples/fixtures/scans.py``): text rendered to
a greyscale image with no text layer, one word optionally pixelated and
noised so tesseract reads it with low confidence.  Three OCR'd pages in all.
"""

from __future__ import annotations

import pymupdf
import pytest

from examples.fixtures.scans import RECEIPT, scanned_pdf
from freshindex.core.errors import DocumentError
from freshindex.workers.chunking import Chunker
from freshindex.workers.parsing import Limits, Parsers, PdfOptions
from freshindex.workers.parsing.ocr import fix_cjk_spaces, token_kind


def _with_text_page_first(scan: bytes) -> bytes:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "Cover page: travel expense claims, quarter one.", fontsize=11)
    doc.insert_pdf(pymupdf.open(stream=scan, filetype="pdf"))
    return doc.tobytes()


def test_a_degraded_amount_is_flagged_and_clean_numbers_are_not() -> None:
    data = _with_text_page_first(scanned_pdf(degrade="1,250", block=3, noise=40))
    doc = Parsers().parse(data, "claims.pdf")

    assert doc.meta["ocr_pages"] == [2]
    assert 0.8 < doc.meta["ocr_confidence"][2] <= 1.0
    scanned = [b for b in doc.blocks if b.page == 2]
    assert scanned and all(b.meta["ocr"] and b.meta["ocr_confidence"] == doc.meta["ocr_confidence"][2]
                           for b in scanned)
    assert not any(b.meta.get("ocr") for b in doc.blocks if b.page == 1)
    text = " ".join(b.text for b in scanned)
    assert "180 USD per night" in text and "20417" in text and "14 days" in text

    flagged = [t for b in scanned for t in b.meta.get("low_confidence_tokens", [])]
    assert len(flagged) == 1, flagged
    token = flagged[0]
    assert token["kind"] == "amount" and token["page"] == 2 and token["confidence"] < 0.8
    assert token["text"].startswith("1,2")  # what tesseract made of "1,250"

    chunks = Chunker().chunk("claims", doc)
    total = next(c for c in chunks if "approved total" in c.text)
    assert total.page == 2 and total.meta["ocr"] is True
    assert total.meta["low_confidence_tokens"] == flagged
    assert total.meta["ocr_confidence"] == doc.meta["ocr_confidence"][2]


def test_the_threshold_is_configurable() -> None:
    data = scanned_pdf(degrade="1,250", block=3, noise=40)
    strict = Parsers(PdfOptions(ocr_low_confidence=0.0)).parse(data, "claims.pdf")
    assert not any(b.meta.get("low_confidence_tokens") for b in strict.blocks)


def test_chinese_ocr_has_no_stray_spaces_between_characters() -> None:
    lines = [("报销政策", 18), ("仅当出差获得批准时才适用。", 12), ("酒店住宿按照公司标准报销。", 12)]
    data = scanned_pdf(lines, fontname="china-s")
    doc = Parsers(PdfOptions(ocr_language="chi_sim+eng")).parse(data, "zh.pdf")
    text = "\n".join(b.text for b in doc.blocks)
    assert "仅当出差获得批准时才适用" in text
    assert doc.blocks[0].kind == "heading" and doc.blocks[0].text == "报销政策"


def test_a_missing_ocr_language_is_ocr_unavailable_not_silent_garbage() -> None:
    # tesseract exits 0 when one of several languages has no data and reads
    # the page with the others; the parser must refuse instead.
    data = scanned_pdf(degrade=None)
    with pytest.raises(DocumentError) as err:
        Parsers(PdfOptions(ocr_language="eng+zzz_nonexistent")).parse(data, "claims.pdf")
    assert err.value.reason == DocumentError.OCR_UNAVAILABLE
    assert "zzz_nonexistent" in err.value.detail and "eng" in err.value.detail


def test_cjk_space_removal_and_token_kinds() -> None:
    assert fix_cjk_spaces("仅 当 迁 移 未 提 交 , run migrate down") == "仅当迁移未提交 , run migrate down"
    assert token_kind("1,250", ("USD",)) == "amount"
    assert token_kind("$40") == "amount"
    assert token_kind("20417") == "number"
    assert token_kind("--dry-run") == "command"
    assert token_kind("deployctl/rollback") == "command"
    assert token_kind("night.") is None


def test_a_page_too_large_to_render_is_refused_before_rendering() -> None:
    doc = pymupdf.open()
    page = doc.new_page(width=14000, height=14000)  # a 194-inch square page, scanned
    page.insert_image(pymupdf.Rect(0, 0, 100, 100), pixmap=pymupdf.Pixmap(pymupdf.csGRAY, 8, 8, b"\x80" * 64, False))
    with pytest.raises(DocumentError) as err:
        Parsers(limits=Limits(max_render_pixels=1_000_000)).parse(doc.tobytes(), "huge.pdf")
    assert err.value.reason == DocumentError.TOO_LARGE and "pixels" in err.value.detail


def test_ocr_pages_beyond_the_limit_are_listed_as_skipped() -> None:
    scan = pymupdf.open(stream=scanned_pdf(RECEIPT[:2]), filetype="pdf")
    doc = pymupdf.open()
    for _ in range(3):
        doc.insert_pdf(scan)
    parsed = Parsers(PdfOptions(max_ocr_pages=1)).parse(doc.tobytes(), "three-scans.pdf")
    assert parsed.meta["ocr_pages"] == [1] and parsed.meta["ocr_skipped_pages"] == [2, 3]
