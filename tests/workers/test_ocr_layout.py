"""OCR layout from word boxes, page segmentation retries, and OCR confidence end to end.

Unit tests build tesseract words by hand (boxes in points); the others
render pages with PyMuPDF and read them with the real tesseract, and one
syncs a scanned PDF through the real pipeline (hashing embedder) to the
query response and ``freshindex ocr report``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pymupdf
import pytest
from click.testing import CliRunner

from freshindex.cli import cli
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.parsing import ocr_layout
from freshindex.workers.parsing.ocr import OcrWord, fragmentation, ocr_available, ocr_page
from freshindex.workers.runner import sync_inline

needs_tesseract = pytest.mark.skipif(not ocr_available(), reason="tesseract is not installed")


def _words(rows: list[list[tuple[float, str]]], *, y0: float = 100.0, slope: float = 0.0, block_per_column=False,
           char: float = 6.0) -> list[OcrWord]:
    """Words at (x, text) per row, 14 pt apart, optionally skewed; one tesseract block, or one per column."""
    out = []
    for n, row in enumerate(rows):
        for k, (x, text) in enumerate(row):
            top = y0 + n * 14 + slope * x
            out.append(OcrWord(text, 95.0, x, top, len(text) * char, 8.0, k + 1 if block_per_column else 1, 1, n + 1))
    return out


def test_fragmentation_tells_a_listing_read_by_columns_from_one_read_by_rows() -> None:
    rows = [[(72, "CTXT_NEXT"), (300, "1"), (360, "target")], [(72, "CTXT_BREAK"), (300, "2"), (360, "target")]]
    assert fragmentation(_words(rows)) == 0.0
    assert fragmentation(_words(rows, block_per_column=True)) == 1.0


def test_skewed_rows_are_levelled_and_an_aligned_listing_is_a_table() -> None:
    # Given a page 1.2 degrees off: over 300 pt a row drifts by 6 pt, nearly half a row pitch
    listing = [[(72, name), (250, str(i)), (320, desc)] for i, (name, desc) in enumerate(
        [("NILSXP", "NULL"), ("SYMSXP", "symbols"), ("LISTSXP", "pairlists"), ("CLOSXP", "closures")])]
    prose, x = [[]], 72.0
    for w in "The types listed above are the ones in use".split():
        prose[0].append((x, w))
        x += len(w) * 5.0 + 3.0  # one space
    words = _words(prose + listing + prose, slope=0.021, char=5.0)
    # When the layout is rebuilt from the boxes
    items = ocr_layout.layout(words)
    # Then the rows stay rows and the listing comes back with its three columns
    kinds = [it.kind for it in items]
    assert kinds == ["text", "table", "text"], kinds
    assert items[1].cells == [[n, i, d] for (_, n), (_, i), (_, d) in listing]
    assert not ocr_layout.has_header(items[1].cells)  # first row is data: no header


def test_header_evidence() -> None:
    assert ocr_layout.has_header([["Year", "Size (MB)"], ["1998", "4.61"], ["2004", "5.02"], ["2011", "5.87"]])
    assert not ocr_layout.has_header([["1998", "4.61"], ["2004", "5.02"], ["2011", "5.87"], ["2019", "6.35"]])
    assert not ocr_layout.has_header([["NILSXP", "the NULL object"], ["SYMSXP", "a symbol"],
                                      ["LISTSXP", "a pairlist"]])


def _listing_scan() -> pymupdf.Document:
    doc = pymupdf.open()
    page = doc.new_page()
    names = ["TOPLEVEL", "NEXT", "BREAK", "LOOP", "FUNCTION", "CCODE", "RETURN", "BROWSER", "GENERIC", "RESTART"]
    for i, name in enumerate(names):
        y = 80 + 16 * i
        page.insert_text((72, y), f"CTXT_{name}", fontsize=11, fontname="cour")
        page.insert_text((330, y), f"{i * 4}", fontsize=11, fontname="helv")
        page.insert_text((400, y), f"target for {name.lower()}", fontsize=11, fontname="helv")
    pix = page.get_pixmap(dpi=200, colorspace=pymupdf.csGRAY)
    out = pymupdf.open()
    scan = out.new_page()
    scan.insert_image(scan.rect, stream=pix.tobytes("png"))
    return out


@needs_tesseract
def test_a_listing_psm_3_reads_by_columns_is_read_again_with_psm_6_and_kept() -> None:
    doc = _listing_scan()
    first = ocr_page(doc[0], language="eng", dpi=300, psms=(3,))
    assert first.tried[0]["fragmentation"] > 0.5  # what psm 3 does to an aligned listing
    page = ocr_page(doc[0], language="eng", dpi=300, psms=(3, 6))
    assert [t["psm"] for t in page.tried] == [3, 6] and page.psm == 6
    [table] = [it for it in ocr_layout.layout(page.words) if it.kind == "table"]
    assert ["CTXT_BROWSER", "28", "target for browser"] in table.cells, table.cells
    # A clean prose page needs one mode only.
    prose = pymupdf.open()
    p = prose.new_page()
    p.insert_text((72, 90), "Contexts are the internal mechanism used to keep track of a computation.", fontsize=11)
    img = pymupdf.open()
    s = img.new_page()
    s.insert_image(s.rect, stream=p.get_pixmap(dpi=200, colorspace=pymupdf.csGRAY).tobytes("png"))
    assert len(ocr_page(img[0], language="eng", dpi=300, psms=(3, 6)).tried) == 1


@needs_tesseract
def test_ocr_confidence_reaches_the_query_response_and_the_ocr_report(tmp_path: Path) -> None:
    # Given a folder with a scanned listing, synced through the real pipeline
    root = tmp_path / "docs"
    root.mkdir()
    (root / "contexts.pdf").write_bytes(_listing_scan().tobytes())
    data = tmp_path / "data"
    svc = Services(load_settings(data_dir=data, embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("scans", kind="folder", location=str(root), owner="t", kb="kb1")
        assert sync_inline(svc, "scans").build_status == "built"
        # When the listing is asked about
        packet = svc.client.retrieve("which context is the target for browser", kb="kb1", limit=3)
    finally:
        svc.close()
    # Then each evidence item says it was OCR'd and how confidently, and cites its page
    [e] = [e for e in packet.evidence if "CTXT_BROWSER" in e.text]
    assert e.ocr and 0.5 < e.ocr_confidence <= 1.0 and e.page == 1
    assert e.as_dict()["ocr_confidence"] == e.ocr_confidence
    # And the report lists the page with its confidence; a high floor turns it into a warning
    env = {"FRESHINDEX_DATA_DIR": str(data), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    result = CliRunner().invoke(cli, ["ocr", "report", "--kb", "kb1", "--json", "--floor", "0.999"], env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{"):])
    [page] = report["pages"]
    assert page["key"] == "contexts.pdf" and page["page"] == 1 and page["below_floor"] is True
    assert page["confidence"] == pytest.approx(e.ocr_confidence)
    text = CliRunner().invoke(cli, ["ocr", "report", "--kb", "kb1", "--floor", "0.5"], env=env)
    assert text.exit_code == 0 and "contexts.pdf page 1: confidence" in text.output
    assert "1 scanned page(s), 0 under the floor" in text.output
