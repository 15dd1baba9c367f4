"""Rendered PDF pages: code with comments in the body face, a table going on onto a scanned page,
per-source OCR options, and the low-confidence page count of a sync (real tesseract, real pipeline).

What the Texinfo manuals of ``bench.pdf`` showed and these pages reproduce:
a C struct whose comments are set in the roman face after a ``/*`` in the
typewriter face lines up in columns and was read as a two-column table; a
table that starts on a text page and goes on on a scanned one came back as
two tables, the second with no header and no caption.
"""

from __future__ import annotations

import json
from pathlib import Path

import pymupdf
import pytest
from click.testing import CliRunner

from freshindex.cli import cli
from freshindex.cli import ocr as ocr_commands
from freshindex.core.enums import BlockKind
from freshindex.core.errors import DocumentError
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.chunking import Chunker
from freshindex.workers.parsing import Parsers, PdfOptions
from freshindex.workers.parsing.ocr import ocr_available
from freshindex.workers.runner import sync_inline

needs_tesseract = pytest.mark.skipif(not ocr_available(), reason="tesseract is not installed")

STRUCT = [("typedef struct RCNTXT {", 0, None),
          ("RCNTXT *next;", 4, "The next context up the chain"),
          ("int callflag;", 4, "The context type"),
          ("JMP_BUF cjmpbuf;", 4, "C stack and register information"),
          ("int cstacktop;", 4, "Top of the pointer protection stack"),
          ("int evaldepth;", 4, "Evaluation depth at inception"),
          ("SEXP promargs;", 4, "Promises supplied to closure"),
          ("SEXP callfun;", 4, "The closure called"),
          ("SEXP sysparent;", 4, "Environment the closure was called from"),
          ("SEXP call;", 4, "The call that effected this context"),
          ("SEXP cloenv;", 4, "The environment"),
          ("SEXP conexit;", 4, "Interpreted on.exit code"),
          ("void *cenddata;", 4, "Data for C on.exit thunk"),
          ("char *vmax;", 4, "Top of the R_alloc stack"),
          ("int intsusp;", 4, "Interrupts are suspended"),
          ("SEXP handlerstack;", 4, "Condition handler stack"),
          ("SEXP restartstack;", 4, "Stack of available restarts"),
          ("} RCNTXT, *context;", 0, None)]
ENUM = [("CTXT_RETURN", 12, "return from a closure"), ("CTXT_BROWSER", 16, "return target on exit from browser"),
        ("CTXT_GENERIC", 20, "rather, running an S3 method"), ("CTXT_RESTART", 32, "a call to restart was made")]
TYPES = [("0", "NILSXP", "NULL"), ("1", "SYMSXP", "symbols"), ("2", "LISTSXP", "pairlists"),
         ("3", "CLOSXP", "closures"), ("4", "ENVSXP", "environments"), ("5", "PROMSXP", "promises"),
         ("6", "LANGSXP", "language objects"), ("7", "SPECIALSXP", "special functions")]
MORE = [("19", "VECSXP", "list (generic vector)"), ("20", "EXPRSXP", "expression vector"),
        ("21", "BCODESXP", "byte code"), ("22", "EXTPTRSXP", "external pointer"),
        ("23", "WEAKREFSXP", "weak reference"), ("24", "RAWSXP", "raw vector")]


def _prose(page: pymupdf.Page, y: float, text: str) -> float:
    line = ""
    for w in text.split():
        if pymupdf.get_text_length(f"{line} {w}", fontname="helv", fontsize=10) > 460:
            page.insert_text((72, y), line.strip(), fontsize=10, fontname="helv")
            y, line = y + 14, ""
        line += " " + w
    page.insert_text((72, y), line.strip(), fontsize=10, fontname="helv")
    return y + 22


def _struct_page() -> bytes:
    """Code in Courier, each comment's ``/*`` and ``*/`` in Courier and its words in Helvetica, aligned at x=260."""
    doc = pymupdf.open()
    page = doc.new_page(width=612, height=792)
    y = _prose(page, 90, "Execution contexts are a stack of C structs:")
    for text, indent, comment in STRUCT:
        page.insert_text((100 + indent * 6.0, y), text, fontsize=10, fontname="cour")
        if comment:  # placed where PyMuPDF's table finder takes code and comments for two columns
            page.insert_text((260, y), "/*", fontsize=10, fontname="cour")
            x = 278 + pymupdf.get_text_length(comment, fontname="helv", fontsize=10)
            page.insert_text((276, y), comment, fontsize=10, fontname="helv")
            page.insert_text((x + 4, y), "*/", fontsize=10, fontname="cour")
        y += 13
    y = _prose(page, y + 12, "plus additional fields for the byte-code compiler. The types are from")
    # An enum whose values and comments follow each name: "= 16, /*" in Courier, the comment's words not.
    page.insert_text((100, y), "enum {", fontsize=10, fontname="cour")
    for name, value, comment in ENUM:
        y += 13
        page.insert_text((124, y), name, fontsize=10, fontname="cour")
        page.insert_text((220, y), f"= {value}, /*", fontsize=10, fontname="cour")
        x = 220 + pymupdf.get_text_length(f"= {value}, /* ", fontname="cour", fontsize=10)
        page.insert_text((x, y), comment, fontsize=10, fontname="helv")
        page.insert_text((x + 4 + pymupdf.get_text_length(comment, fontname="helv", fontsize=10), y), "*/",
                         fontsize=10, fontname="cour")
    page.insert_text((100, y + 13), "};", fontsize=10, fontname="cour")
    return doc.tobytes()


def test_code_whose_comments_are_set_in_the_body_face_is_one_code_block_not_a_table() -> None:
    # Given a struct whose aligned comments are in the body face (as Texinfo sets them)
    doc = Parsers().parse(_struct_page(), "ints.pdf")
    # Then it is one code block with its comments on their lines, and no table
    assert not [b for b in doc.blocks if b.kind == BlockKind.TABLE], [b.text for b in doc.blocks]
    [code, enum] = [b for b in doc.blocks if b.kind == BlockKind.CODE]
    # The enum's names, values and comments stay on their lines (no paragraph of "= 16, /* ... */" between)
    assert not [b for b in doc.blocks if b.text.startswith("=")], [b.text for b in doc.blocks]
    assert "CTXT_BROWSER = 16, /* return target on exit from browser */" in " ".join(enum.text.split()), enum.text
    lines = code.text.split("\n")
    assert lines[0] == "typedef struct RCNTXT {" and lines[-1] == "} RCNTXT, *context;"
    callfun = next(ln for ln in lines if "callfun" in ln)
    assert callfun.startswith("    SEXP callfun;") and callfun.endswith("/* The closure called */"), callfun
    # the comments stay aligned: each starts in the same column
    columns = {ln.index("/*") for ln in lines if "/*" in ln}
    assert len(columns) == 1, lines


def _table_page(doc: pymupdf.Document, rows: list[tuple[str, str, str]], *, header: bool, intro: str | None) -> None:
    page = doc.new_page(width=612, height=792)
    page.insert_text((72, 40), "Chapter 1: R Internal Structures", fontsize=10, fontname="helv")
    y = _prose(page, 90, intro) if intro else 90.0
    if header:
        for x, cell in zip((100, 160, 300), ("no", "SEXPTYPE", "Description"), strict=True):
            page.insert_text((x, y), cell, fontsize=10, fontname="hebo")
        y += 16
    for row in rows:
        for x, cell in zip((100, 160, 300), row, strict=True):
            page.insert_text((x, y), cell, fontsize=10, fontname="cour" if x == 160 else "helv")
        y += 14
    if not intro:
        _prose(page, y + 14, "Many of these will be familiar from R level: the atomic vector types are the ones "
                             "users see, and lists are generic vectors of any of them.")


def _scanned(data: bytes, pno: int) -> bytes:
    src = pymupdf.open(stream=data, filetype="pdf")
    out = pymupdf.open()
    for n in range(src.page_count):  # the outline is kept, as a real scanned manual's would be
        if n != pno:
            out.insert_pdf(src, from_page=n, to_page=n)
            continue
        tmp = pymupdf.open()
        pg = tmp.new_page(width=src[n].rect.width, height=src[n].rect.height)
        pg.show_pdf_page(pg.rect, src, n, rotate=0.5, keep_proportion=True)
        pix = pg.get_pixmap(dpi=200, colorspace=pymupdf.csGRAY, alpha=False)
        page = out.new_page(width=pg.rect.width, height=pg.rect.height)
        page.insert_image(page.rect, stream=pix.tobytes("png"))
    out.set_toc(src.get_toc())
    return out.tobytes()


def _two_page_table() -> bytes:
    doc = pymupdf.open()
    _table_page(doc, TYPES, header=True, intro="Currently the following SEXPTYPEs are in use:")
    _table_page(doc, MORE, header=False, intro=None)
    doc.set_toc([[1, "1 R Internal Structures", 1], [2, "1.1 SEXPTYPEs", 1]])
    return doc.tobytes()


@needs_tesseract
def test_a_table_going_on_onto_a_scanned_page_is_one_table_with_its_header_and_pages() -> None:
    # Given a table with a header on a text page that goes on, header-less, on a scanned page
    doc = Parsers().parse(_scanned(_two_page_table(), 1), "ints.pdf")
    # Then it is one table: the continuation rows are data under the first page's column names
    [table] = [b for b in doc.blocks if b.kind == BlockKind.TABLE]
    assert table.meta["columns"] == ["no", "SEXPTYPE", "Description"]
    assert table.meta["pages"] == [1, 2] and table.meta["ocr"] is True
    assert table.meta["caption"] == "Currently the following SEXPTYPEs are in use:"
    rows = table.meta["rows"]
    assert rows[0] == ["0", "NILSXP", "NULL"]
    assert ["22", "EXTPTRSXP", "external pointer"] in rows, rows
    # each row knows the page it is printed on
    pages = dict(zip((r[1] for r in rows), table.meta["row_pages"], strict=True))
    assert pages["NILSXP"] == 1 and pages["EXTPTRSXP"] == 2
    # And a chunk of it carries the header and the caption and cites the pages of its own rows
    [chunk] = [c for c in Chunker().chunk("d", doc) if "EXTPTRSXP" in c.text]
    assert "| no | SEXPTYPE | Description |" in chunk.text and "SEXPTYPEs are in use" in chunk.text
    first, last = chunk.meta["rows"]
    own = sorted(set(table.meta["row_pages"][first - 1 : last]))
    assert chunk.page == own[0] and chunk.meta.get("pages", [chunk.page]) == own
    # The running head of the scanned page reached no block
    assert not [b for b in doc.blocks if "Chapter 1" in b.text]


def test_source_ocr_options_override_the_settings_and_bad_values_name_the_option() -> None:
    base = PdfOptions()
    # Given a source's options as the CLI stores them (strings)
    opts = base.with_source({"ocr_psm": "6, 3", "ocr_retry_confidence": "0.9", "ocr_page_floor": "0.85",
                             "ocr_low_confidence": "70", "ocr_language": "eng", "endpoint_url": "http://x"})
    assert (opts.ocr_psm, opts.ocr_retry_confidence, opts.ocr_page_floor) == ((6, 3), 0.9, 0.85)
    assert opts.ocr_low_confidence == 70.0 and opts.ocr_language == "eng"
    assert base.ocr_psm == (3, 6)  # the settings' options are not changed
    # A source without OCR options parses with the settings' options, the same object
    assert base.with_source({"acl_sources": "sidecar"}) is base
    parsers = Parsers()
    assert parsers.for_source(None) is parsers
    assert parsers.for_source({"ocr_psm": [4]}).pdf.ocr_psm == (4,)
    for bad in ({"ocr_psm": "0"}, {"ocr_psm": "3,x"}, {"ocr_psm": ","}, {"ocr_page_floor": "1.5"},
                {"ocr_language": "eng; rm -rf"}):
        with pytest.raises(DocumentError) as err:
            base.with_source(bad)
        assert err.value.reason == DocumentError.PARSE_FAILED and next(iter(bad)) in err.value.detail


def _scan_folder(root: Path) -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    for i, name in enumerate(("TOPLEVEL", "NEXT", "BREAK", "LOOP", "FUNCTION", "CCODE", "RETURN", "BROWSER")):
        page.insert_text((72, 80 + 16 * i), f"CTXT_{name}", fontsize=11, fontname="cour")
        page.insert_text((330, 80 + 16 * i), str(i * 4), fontsize=11, fontname="helv")
        page.insert_text((400, 80 + 16 * i), f"target for {name.lower()}", fontsize=11, fontname="helv")
    out = pymupdf.open()
    scan = out.new_page()
    scan.insert_image(scan.rect, stream=page.get_pixmap(dpi=200, colorspace=pymupdf.csGRAY).tobytes("png"))
    root.mkdir()
    (root / "contexts.pdf").write_bytes(out.tobytes())


@needs_tesseract
def test_sync_counts_the_pages_under_a_sources_own_floor_and_a_bad_option_fails_its_documents(tmp_path: Path) -> None:
    # Given a scanned page in a source whose own floor no reading reaches, and one whose psm is invalid
    _scan_folder(tmp_path / "docs")
    data = tmp_path / "data"
    env = {"FRESHINDEX_DATA_DIR": str(data), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    svc = Services(load_settings(data_dir=data, embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("scans", kind="folder", location=str(tmp_path / "docs"), owner="t", kb="kb1",
                                setup=SourceSetup(options={"ocr_page_floor": "0.999", "ocr_psm": "6"}))
        svc.registry.add_source("broken", kind="folder", location=str(tmp_path / "docs"), owner="t", kb="kb2",
                                setup=SourceSetup(options={"ocr_psm": "0"}))
    finally:
        svc.close()
    runner = CliRunner()
    # When it is synced
    result = runner.invoke(cli, ["sync", "scans", "--json"], env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # Then the report counts the scanned page and the one under the source's floor, naming it
    assert report["ocr"]["scanned_pages"] == 1 and report["ocr"]["low_confidence_pages"] == 1
    assert report["ocr"]["floor"] == 0.999 and report["ocr"]["low"][0]["key"] == "contexts.pdf"
    # A sync that re-reads nothing counts nothing; the text output says so by leaving the OCR line out
    again = runner.invoke(cli, ["sync", "scans"], env=env)
    assert again.exit_code == 0 and "OCR:" not in again.output, again.output
    # And the source whose option is out of range fails its document as parse_failed, naming the option
    broken = runner.invoke(cli, ["sync", "broken", "--json"], env=env)
    [error] = json.loads(broken.stdout)["errors"]
    assert error["reason"] == "parse_failed" and "ocr_psm" in error["detail"]


@needs_tesseract
def test_the_sync_text_line_names_the_low_confidence_page_and_the_metric_counts_it(tmp_path: Path) -> None:
    # Given a scanned page under its source's own floor, synced through the real pipeline
    _scan_folder(tmp_path / "docs")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("scans", kind="folder", location=str(tmp_path / "docs"), owner="t", kb="kb1",
                                setup=SourceSetup(options={"ocr_page_floor": "0.999"}))
        report = sync_inline(svc, "scans")
        counted = svc.metrics.registry.get_sample_value("freshindex_ocr_low_confidence_pages_total",
                                                        {"source": "scans"})
        floor = ocr_commands.source_floor(svc.registry.get_source("scans"), 0.8)
        line = ocr_commands.sync_line(ocr_commands.sync_counts(svc.registry, report.run, floor))
    finally:
        svc.close()
    # Then the metric counted the page, and the line sync prints names it with the source's floor
    assert counted == 1.0
    assert floor == 0.999
    assert line == "  OCR: 1 scanned page(s), 1 under the confidence floor 0.999: contexts.pdf p1"
