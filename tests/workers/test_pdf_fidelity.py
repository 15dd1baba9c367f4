"""PDF fidelity on a Texinfo-like manual: text pages and rendered scans (real tesseract).

The manual is generated here (PyMuPDF): a running head and page number on
every page, numbered headings, a rule-less two-column listing, a header-less
table of numbers, a code block in Courier with nested indentation and
aligned comments.  Two of its pages are turned into image-only scans
(rendered at 200 dpi, rotated 0.6 degrees, blurred), so the same content is
read once from the text layer and once through OCR.
"""

from __future__ import annotations

import pymupdf
import pytest

from freshindex.core.enums import BlockKind
from freshindex.injection.types import Evidence
from freshindex.workers.chunking import Chunker
from freshindex.workers.parsing import Parsers, PdfOptions
from freshindex.workers.parsing.ocr import ocr_available

pytestmark = pytest.mark.skipif(not ocr_available(), reason="tesseract is not installed")

HEAD = "Chapter 3: Objects, their modes and attributes"
LISTING = [("NILSXP", "0", "the NULL object"), ("SYMSXP", "1", "a symbol"), ("LISTSXP", "2", "a pairlist"),
           ("CLOSXP", "3", "a closure"), ("ENVSXP", "4", "an environment"), ("PROMSXP", "5", "a promise")]
NUMBERS = [("1998", "4.61", "120"), ("2004", "5.02", "176"), ("2011", "5.87", "240"), ("2019", "6.35", "312")]
CODE = [
    ("struct sxpinfo {", 0, None),
    ("SEXPTYPE type : 5;", 4, "/* the type */"),
    ("unsigned int obj : 1;", 4, "/* has a class */"),
    ("if (debug) {", 4, None),
    ("trace(x);", 8, "/* print it */"),
    ("}", 4, None),
    ("};", 0, None),
]
PROSE = ("The reader should consult the different help files to become familiar with the objects. "
         "Every object has a mode and a length, and most have further attributes.")


def _page(doc: pymupdf.Document, number: int, body: list[tuple]) -> None:
    page = doc.new_page(width=612, height=792)
    page.insert_text((72, 40), HEAD, fontsize=10, fontname="helv")
    page.insert_text((530, 40), str(number + 14), fontsize=10, fontname="helv")
    y = 90.0
    for kind, *rest in body:
        if kind == "h":
            page.insert_text((72, y), rest[0], fontsize=14, fontname="hebo")
            y += 26
        elif kind == "p":
            words, line = rest[0].split(), ""
            for w in words:
                if pymupdf.get_text_length(f"{line} {w}", fontname="helv", fontsize=10) > 460:
                    page.insert_text((72, y), line.strip(), fontsize=10, fontname="helv")
                    y, line = y + 14, ""
                line += " " + w
            page.insert_text((72, y), line.strip(), fontsize=10, fontname="helv")
            y += 22
        elif kind == "rows":
            for row in rest[0]:
                for x, cell in zip((100, 220, 300), row, strict=False):
                    page.insert_text((x, y), cell, fontsize=10, fontname="cour" if x == 100 and row[0].isupper()
                                     else "helv")
                y += 14
            y += 10
        elif kind == "code":
            for text, indent, comment in CODE:
                page.insert_text((100 + indent * 6.0, y), text, fontsize=10, fontname="cour")
                if comment:
                    page.insert_text((300, y), comment, fontsize=10, fontname="cour")
                y += 13
            y += 12


def _manual() -> bytes:
    doc = pymupdf.open()
    _page(doc, 1, [("h", "3 Objects, their modes and attributes"), ("p", PROSE),
                   ("h", "3.1 Intrinsic attributes"), ("p", "The types an object can have are these:"),
                   ("rows", LISTING), ("p", PROSE)])
    _page(doc, 2, [("h", "3.2 Internal types"), ("p", "The types an object can have are these:"), ("rows", LISTING),
                   ("p", "The header is defined as a C structure by"), ("code",), ("p", PROSE)])
    _page(doc, 3, [("h", "3.3 Growth"), ("p", "Sizes grew steadily over the years, as measured:"), ("rows", NUMBERS),
                   ("p", PROSE), ("code",)])
    _page(doc, 4, [("h", "3.4 Measured growth"), ("p", "Sizes grew steadily over the years, as measured:"),
                   ("rows", NUMBERS), ("p", PROSE)])
    doc.set_toc([[1, "3 Objects, their modes and attributes", 1], [2, "Intrinsic attributes", 1],
                 [2, "Internal types", 2], [2, "Growth", 3], [2, "Measured growth", 4]])
    return doc.tobytes()


def _scan(data: bytes, pages: tuple[int, ...], angle: float = 0.6) -> bytes:
    src = pymupdf.open(stream=data, filetype="pdf")
    out = pymupdf.open()
    for pno in range(src.page_count):
        if pno + 1 not in pages:
            out.insert_pdf(src, from_page=pno, to_page=pno)
            continue
        r = src[pno].rect
        tmp = pymupdf.open()
        pg = tmp.new_page(width=r.width, height=r.height)
        pg.show_pdf_page(pg.rect, src, pno, rotate=angle, keep_proportion=True)
        pix = pg.get_pixmap(dpi=200, colorspace=pymupdf.csGRAY, alpha=False)
        small = pymupdf.Pixmap(pix, int(pix.width * 0.7), int(pix.height * 0.7))
        pix = pymupdf.Pixmap(small, pix.width, pix.height)
        page = out.new_page(width=r.width, height=r.height)
        page.insert_image(page.rect, stream=pix.tobytes("png"))
    out.set_toc(src.get_toc())
    return out.tobytes()


@pytest.fixture(scope="module")
def parsed():
    text = Parsers().parse(_manual(), "manual.pdf")
    mixed = Parsers().parse(_scan(_manual(), (2, 4)), "manual.pdf")
    return text, mixed


def _tables(doc, page: int) -> list:
    return [b for b in doc.blocks if b.kind == BlockKind.TABLE and b.page == page]


def test_an_aligned_listing_comes_back_as_rows_with_the_right_columns(parsed) -> None:
    text, mixed = parsed
    assert mixed.meta["ocr_pages"] == [2, 4]
    for doc, page in ((text, 1), (mixed, 2)):
        [table] = _tables(doc, page)
        rows = table.meta["rows"]
        assert len(table.meta["columns"]) == 3, table.meta
        assert ["SYMSXP", "1", "a symbol"] in rows and ["ENVSXP", "4", "an environment"] in rows, rows
        # The listing has no header row: its first row stays data, columns are named by position.
        assert ["NILSXP", "0", "the NULL object"] in rows and table.meta["columns"][0] == "column 1"
        # The sentence introducing the table goes with it.
        assert table.meta["caption"] == "The types an object can have are these:"


def test_a_header_less_table_of_numbers_is_not_given_a_data_row_as_header(parsed) -> None:
    text, mixed = parsed
    for doc, page in ((text, 3), (mixed, 4)):
        [table] = _tables(doc, page)
        assert table.meta["header_rows"] == [] and table.meta.get("headerless") is True
        assert table.meta["rows"][0] == ["1998", "4.61", "120"], table.meta["rows"]
        assert len(table.meta["rows"]) == 4


def test_a_code_block_keeps_its_indentation_and_aligned_comments(parsed) -> None:
    text, mixed = parsed
    for doc, page in ((text, 3), (mixed, 2)):
        [code] = [b for b in doc.blocks if b.kind == BlockKind.CODE and b.page == page]
        lines = code.text.splitlines()
        assert len(lines) == len(CODE), code.text
        assert lines[0] == "struct sxpinfo {"
        indents = [len(ln) - len(ln.lstrip(" ")) for ln in lines]
        assert indents == [i for _, i, _ in CODE], lines  # nested twice, the first line at the margin
        assert lines[4].lstrip().startswith("trace") and lines[1].lstrip().startswith("SEXPTYPE type")
        # The comment stays on its code line, aligned with the other comments.
        assert "/* the type */" in lines[1] and "/* has a class */" in lines[2]
        columns = {lines[k].index("/*") for k in (1, 2, 4)}
        assert max(columns) - min(columns) <= (0 if doc is text else 1), lines  # OCR: within one column


def test_a_running_head_appears_in_no_chunk_and_headings_keep_their_levels(parsed) -> None:
    text, mixed = parsed
    for doc in (text, mixed):
        chunks = Chunker().chunk("manual", doc)
        assert chunks
        assert not any("Chapter 3:" in c.text for c in chunks), [c.text[:80] for c in chunks if "Chapter" in c.text]
        assert not any(c.text.strip().startswith(("15 ", "16 ", "17 ")) for c in chunks)
        headings = {b.text: (b.meta.get("level"), b.page) for b in doc.blocks if b.kind == BlockKind.HEADING}
        # A scanned page's heading takes the level a heading numbered alike has on a text page.
        assert headings["3.2 Internal types"][0] == headings["3.1 Intrinsic attributes"][0]
        assert headings["3.4 Measured growth"][0] == headings["3.3 Growth"][0]
    # No table row, code line or listing entry is a heading on the scanned pages.
    ocr_headings = [b.text for b in mixed.blocks if b.kind == BlockKind.HEADING and b.meta.get("ocr")]
    assert sorted(ocr_headings) == ["3.2 Internal types", "3.4 Measured growth"]


def test_scanned_blocks_carry_page_and_block_confidence(parsed) -> None:
    _, mixed = parsed
    scanned = [b for b in mixed.blocks if b.page in (2, 4)]
    assert scanned and all(b.meta["ocr"] for b in scanned)
    assert all(0.0 < b.meta["ocr_block_confidence"] <= 1.0 for b in scanned)
    assert set(mixed.meta["ocr_psm"]) == {2, 4} and all(t for t in mixed.meta["ocr_tried"].values())


def test_a_page_under_the_confidence_floor_is_a_warning_naming_it() -> None:
    data = _scan(_manual(), (2,))
    doc = Parsers(PdfOptions(ocr_page_floor=0.999, ocr_psm=(3,))).parse(data, "manual.pdf")
    assert doc.meta["ocr_low_confidence_pages"] == [2]
    assert any(w.startswith("page 2: OCR confidence") for w in doc.meta["warnings"])


def test_a_chunk_cites_the_pages_its_own_text_is_on() -> None:
    # A paragraph that runs from page 1 onto page 2, long enough to be cut into several chunks.
    doc = pymupdf.open()
    sentences = [f"Sentence number {i} talks about the garbage collector and its generations." for i in range(120)]
    body = " ".join(sentences)
    page, y, line = doc.new_page(), 72.0, ""
    for w in body.split():
        if pymupdf.get_text_length(f"{line} {w}", fontsize=10) > 440:
            page.insert_text((72, y), line.strip(), fontsize=10)
            y, line = y + 13, ""
            if y > 760:
                page, y = doc.new_page(), 72.0
        line += " " + w
    page.insert_text((72, y), line.strip(), fontsize=10)
    parsed = Parsers().parse(doc.tobytes(), "long.pdf")
    chunks = Chunker(max_tokens=128).chunk("long", parsed)
    assert len(chunks) >= 4
    src = pymupdf.open(stream=doc.tobytes(), filetype="pdf")
    page_text = [" ".join(p.get_text().split()) for p in src]
    for c in chunks:
        last_words = " ".join(c.text.split()[-6:])
        first_words = " ".join(c.text.split()[:6])
        pages = c.meta.get("pages") or [c.page]
        # The cited first page holds the chunk's first words, the last cited page its last words.
        assert first_words in page_text[pages[0] - 1], (c.page, c.meta.get("pages"), first_words)
        assert last_words in page_text[pages[-1] - 1], (c.page, c.meta.get("pages"), last_words)
    assert any(c.page == 2 and not c.meta.get("pages") for c in chunks)  # page 2 text is cited as page 2
    e = Evidence(n=1, chunk_id="c", score=1.0, text="t", title="T", key="long.pdf", source_id="s",
                 heading_path=(), anchor="", page=1, doc_version=1, snapshot_id="s1", written_in="s1", page_end=2)
    assert "pages 1-2" in e.citation
    assert Evidence.from_dict(e.as_dict()).page_end == 2
