"""Parsers on the bundled sample files and on bad input."""

from __future__ import annotations

import pymupdf
import pytest

from freshindex.core.errors import DocumentError
from freshindex.workers.parsing import Parsers
from freshindex.workers.parsing.decode import decode_text
from tests.conftest import EXAMPLES

KB = EXAMPLES / "kb"


def parse(key: str):
    return Parsers().parse((KB / key).read_bytes(), key)


def test_markdown_keeps_heading_paths_code_and_front_matter() -> None:
    doc = parse("guides/release.md")
    assert doc.title == "Release procedure"
    migration = [b for b in doc.blocks if b.heading_path == ("Release procedure", "Rollback", "Database migration")]
    assert any("only if the migration has not" in b.text for b in migration)
    code = [b for b in doc.blocks if b.kind == "code"]
    assert code and code[0].meta["language"] == "bash"
    assert doc.meta["owner"] == "platform-team"


def test_html_drops_navigation_scripts_and_footer() -> None:
    doc = parse("guides/onboarding.html")
    text = "\n".join(b.text for b in doc.blocks)
    assert "Request a laptop" in text
    assert "Never share production credentials" in text
    for furniture in ("Home |", "analytics", "Privacy", "Last updated", "Home > Guides"):
        assert furniture not in text
    assert doc.title == "Onboarding checklist"
    assert any(b.kind == "admonition" for b in doc.blocks)


def test_csv_rows_keep_their_cells_and_the_header_is_recorded() -> None:
    doc = parse("reference/pricing.csv")
    assert doc.meta["columns"][0] == "plan"
    team = next(b for b in doc.blocks if b.meta["cells"][0] == "Team")
    assert team.meta["cells"][2] == "200,000"


def test_python_and_typescript_are_split_by_symbol() -> None:
    py = parse("code/retry.py")
    symbols = {b.meta["symbol"] for b in py.blocks}
    assert {"RetryError", "backoff_delay", "retry", "<module>"} <= symbols
    retry = next(b for b in py.blocks if b.meta["symbol"] == "retry")
    assert retry.meta["language"] == "python" and retry.meta["signature"].startswith("def retry(")
    assert "retry_on" in retry.meta["docstring"]
    ts = parse("code/ratelimit.ts")
    assert {"BucketOptions", "TokenBucket", "rejectStatus"} <= {b.meta["symbol"] for b in ts.blocks}
    bucket = next(b for b in ts.blocks if b.meta["symbol"] == "TokenBucket")
    assert bucket.text.startswith("// A bucket refills")  # the comment above stays with it


def test_text_pdf_keeps_pages_and_headings() -> None:
    doc = parse("pdf/architecture.pdf")
    retention = [b for b in doc.blocks if "13 months" in b.text]
    assert retention and retention[0].page == 2
    assert retention[0].heading_path[-1] == "Data retention"


def test_scanned_pdf_is_read_by_ocr_and_marked() -> None:
    doc = parse("pdf/scanned-policy.pdf")
    assert doc.meta["ocr_pages"] == [1]
    text = " ".join(b.text for b in doc.blocks)
    assert "180 USD per night" in text
    assert all(b.meta.get("ocr") for b in doc.blocks)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"hello\x00\x01\x02 world" * 20, DocumentError.BINARY),
        ("caf\u00e9".encode("latin-1") + b" menu", DocumentError.ENCODING),
    ],
)
def test_decode_refuses_binary_and_invalid_utf8(data: bytes, reason: str) -> None:
    with pytest.raises(DocumentError) as err:
        decode_text(data)
    assert err.value.reason == reason


def test_decode_accepts_bom_and_utf16() -> None:
    assert decode_text(b"\xef\xbb\xbfhi\r\nthere") == "hi\nthere"
    assert decode_text("hé".encode("utf-16")) == "hé"


def test_corrupt_and_encrypted_pdfs_are_document_errors(tmp_path) -> None:
    with pytest.raises(DocumentError) as err:
        Parsers().parse(b"%PDF-1.7 this is not really a pdf", "x.pdf")
    assert err.value.reason == DocumentError.PARSE_FAILED
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret")
    path = tmp_path / "locked.pdf"
    doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="pw")
    with pytest.raises(DocumentError) as err:
        Parsers().parse(path.read_bytes(), "locked.pdf")
    assert err.value.reason == DocumentError.ENCRYPTED


def test_unknown_extension_is_unsupported() -> None:
    with pytest.raises(DocumentError) as err:
        Parsers().parse(b"\x89PNG...", "image.png")
    assert err.value.reason == DocumentError.UNSUPPORTED


# -- structure and furniture -----------------------------------------------------------

FIXTURES = EXAMPLES / "fixtures"


@pytest.fixture(scope="module")
def small_manual(tmp_path_factory):
    from examples.fixtures import manual as m

    root = tmp_path_factory.mktemp("manual")
    chapters = m.manual(30)
    m.write_html_site(root / "html", chapters)
    pages = m.write_pdf(root / "manual.pdf", chapters)
    return chapters, root, pages


def _source_paragraphs(chapters) -> list[str]:
    return [b[1].replace("`", "") for ch in chapters for s in ch.sections for b in s.blocks if b[0] == "p"]


def test_html_drops_site_furniture_and_keeps_structure(small_manual) -> None:
    chapters, root, _ = small_manual
    doc = Parsers().parse((root / "html" / "page-005.html").read_bytes(), "page-005.html")
    text = "\n".join(b.text for b in doc.blocks)
    for furniture in ("Skip to content", "Acme Docs", "You are viewing", "Switch version", "¶", "Previous:",
                      "Next:", "Last updated", "Page 5 of", "docsVersion", "sidebar", "Version 4.2.0",
                      chapters[6].title):  # the sidebar lists every chapter
        assert furniture not in text, furniture
    assert doc.title == chapters[4].title
    headings = [b.heading_path for b in doc.blocks if b.kind == "heading"]
    assert headings[:3] == [(chapters[4].title,), (chapters[4].title, "Overview"), (chapters[4].title, "Procedure")]
    table = next(b for b in doc.blocks if b.kind == "table")
    assert table.meta["caption"].startswith("Table 4:")
    assert table.meta["units"] == {"Quota (requests)": "requests", "Latency (ms)": "ms"}
    steps = next(b for b in doc.blocks if b.kind == "list")
    assert steps.text.startswith("1. ") and len(steps.meta["items"]) == 4
    assert "fictl revert" in steps.text  # inline <code> kept as text


def test_html_links_admonitions_and_code_languages() -> None:
    page = b"""<html><body><main><h1>Deploy</h1>
    <p>See <a href="https://example.com/runbook">the runbook</a> and <a href="#step-2">step 2</a>.</p>
    <aside class="admonition caution"><p>Deploys freeze on Fridays.</p></aside>
    <pre><code class="language-yaml">replicas: 3</code></pre>
    <nav class="pagination"><a href="/a">Previous</a></nav>
    <p><a href="/guides/a.html">&laquo; Previous: Setup</a> | <a href="/guides/c.html">Next: Rollback &raquo;</a></p>
    </main></body></html>"""
    doc = Parsers().parse(page, "deploy.html")
    para = next(b for b in doc.blocks if b.kind == "paragraph")
    assert para.meta["links"] == [{"text": "the runbook", "href": "https://example.com/runbook"}]
    note = next(b for b in doc.blocks if b.kind == "admonition")
    assert note.meta["admonition"] == "caution" and note.text == "Deploys freeze on Fridays."
    code = next(b for b in doc.blocks if b.kind == "code")
    assert code.meta["language"] == "yaml"
    assert not any("Previous" in b.text or "Next" in b.text for b in doc.blocks)


def test_markdown_admonitions_tables_and_heading_anchors() -> None:
    src = b"""# Guide {#guide}

> [!WARNING]
> Never run this on the primary.

:::note
Containers are admonitions too.
:::

Table 7: Limits per plan

| plan | calls | price (USD) |
|---|---|---|
| Team | 200,000 | 199 |

See [the docs](https://example.com/docs).
"""
    doc = Parsers().parse(src, "guide.md")
    assert doc.blocks[0].text == "Guide"
    kinds = [(b.kind, b.meta.get("admonition")) for b in doc.blocks if b.kind == "admonition"]
    assert kinds == [("admonition", "warning"), ("admonition", "note")]
    table = next(b for b in doc.blocks if b.kind == "table")
    assert table.meta["caption"] == "Table 7: Limits per plan"
    assert table.meta["rows"] == [["Team", "200,000", "199"]] and table.meta["units"] == {"price (USD)": "USD"}
    assert doc.blocks[-1].meta["links"] == [{"text": "the docs", "href": "https://example.com/docs"}]


def test_pdf_drops_running_heads_and_footers_and_rebuilds_every_paragraph(small_manual) -> None:
    """Page breaks cut paragraphs and list items; each comes back whole, and
    the running head (version, date) and footer (page n of N) are gone."""
    chapters, root, pages = small_manual
    doc = Parsers().parse((root / "manual.pdf").read_bytes(), "manual.pdf")
    assert doc.meta["pages"] == pages and doc.title == "Acme Platform Manual"
    text = "\n".join(b.text for b in doc.blocks)
    assert "Page 3 of" not in text and "Version 4.2.0" not in text and "Generated" not in text
    paragraphs = {b.text for b in doc.blocks if b.kind in ("paragraph", "admonition")}
    source = _source_paragraphs(chapters)
    missing = [p for p in source if p not in paragraphs]
    # A page break right after a sentence end, with the last line not filled to
    # the margin, reads as a paragraph end: the one ambiguous case.
    assert len(missing) <= len(source) // 100, missing
    joined = [b for b in doc.blocks if len(b.meta.get("pages", [])) == 2]
    assert len(joined) >= 5 and all(b.text in source for b in joined if b.kind == "paragraph")
    first = chapters[0]
    overview = next(b for b in doc.blocks if b.text == first.sections[0].blocks[0][1])
    assert overview.heading_path == (first.title, "Overview") and overview.page == 1
    code = next(b for b in doc.blocks if b.kind == "code")
    assert code.text.startswith("fictl status --")


def test_pdf_tables_are_found_joined_across_pages_and_keep_exact_numbers(small_manual) -> None:
    chapters, root, _ = small_manual
    doc = Parsers().parse((root / "manual.pdf").read_bytes(), "manual.pdf")
    source = {b[1]: b for ch in chapters for s in ch.sections for b in s.blocks if b[0] == "table"}
    tables = [b for b in doc.blocks if b.kind == "table"]
    assert len(tables) == len(source)
    for t in tables:
        _, _, header, rows = source[t.meta["caption"]]
        assert t.meta["columns"] == header and t.meta["rows"] == rows  # "9,258" stays "9,258"
        assert t.meta["units"] == {"Quota (requests)": "requests", "Latency (ms)": "ms"}
    assert any(len(t.meta.get("pages", [])) == 2 for t in tables)  # one long table spans a page break


def test_pdf_unruled_table_and_two_column_reading_order() -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), "Storage pricing", fontsize=14, fontname="hebo")
    page.insert_text((72, 100), "Table 2: Storage prices per region", fontsize=10)
    rows = [("Region", "Storage (USD/GB-month)", "Egress (USD/GB)")] + \
        [(f"region-{i}", f"0.0{i}", f"1,{i}00") for i in range(6)]
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            page.insert_text((72 + c * 160, 125 + r * 16), cell, fontsize=10, fontname="hebo" if r == 0 else "helv")
    two = doc.new_page()
    left = ["Left column first paragraph starts here and", "continues on this line of the left column."]
    right = ["Right column paragraph comes after the left", "column has been read to its very end."]
    for n, (a, b) in enumerate(zip(left * 3, right * 3, strict=True)):
        two.insert_text((72, 100 + n * 14), a, fontsize=10)
        two.insert_text((320, 100 + n * 14), b, fontsize=10)
    parsed = Parsers().parse(doc.tobytes(), "two.pdf")
    table = next(b for b in parsed.blocks if b.kind == "table")
    assert table.meta["caption"] == "Table 2: Storage prices per region"
    assert table.meta["rows"][1] == ["region-1", "0.01", "1,100"]
    assert table.meta["units"]["Egress (USD/GB)"] == "USD/GB"
    page2 = " ".join(b.text for b in parsed.blocks if b.page == 2)
    assert page2.index("Left column") < page2.index("Right column")
    assert page2.rindex("Left column") < page2.index("Right column")


# -- limits and hostile input ------------------------------------------------------------


def test_pathologically_nested_html_and_markdown_are_too_complex() -> None:
    from freshindex.workers.parsing import Limits

    html = b"<html><body>" + b"<div>" * 5000 + b"deep" + b"</div>" * 5000 + b"</body></html>"
    with pytest.raises(DocumentError) as err:
        Parsers().parse(html, "deep.html")
    assert err.value.reason == DocumentError.TOO_COMPLEX
    md = "\n".join("  " * i + "- item" for i in range(200)).encode()
    with pytest.raises(DocumentError) as err:
        Parsers(limits=Limits(max_nesting_depth=32)).parse(md, "deep.md")
    assert err.value.reason == DocumentError.TOO_COMPLEX


def test_huge_tables_and_slow_documents_fail_with_a_reason(small_manual) -> None:
    from freshindex.workers.parsing import Limits

    csv = b"a,b\n" + b"1,2\n" * 2000
    with pytest.raises(DocumentError) as err:
        Parsers(limits=Limits(max_table_rows=1000)).parse(csv, "big.csv")
    assert err.value.reason == DocumentError.TOO_LARGE
    _, root, _ = small_manual
    with pytest.raises(DocumentError) as err:
        Parsers(limits=Limits(time_limit_s=1e-9)).parse((root / "manual.pdf").read_bytes(), "manual.pdf")
    assert err.value.reason == DocumentError.TIMED_OUT and "limit" in err.value.detail


def test_an_image_declaring_absurd_dimensions_is_refused() -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_image(pymupdf.Rect(72, 72, 172, 172), pixmap=pymupdf.Pixmap(pymupdf.csGRAY, 4, 4, b"\x80" * 16, False))
    xref = page.get_images()[0][0]
    doc.xref_set_key(xref, "Width", "200000")
    doc.xref_set_key(xref, "Height", "200000")
    with pytest.raises(DocumentError) as err:
        Parsers().parse(doc.tobytes(), "bomb.pdf")
    assert err.value.reason == DocumentError.TOO_LARGE and "200000x200000" in err.value.detail


def test_a_binary_with_a_text_extension_and_a_pdf_that_is_not_one() -> None:
    with pytest.raises(DocumentError) as err:
        Parsers().parse(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 40, "diagram.md")
    assert err.value.reason == DocumentError.BINARY
    with pytest.raises(DocumentError) as err:
        Parsers().parse(b"<html>not a pdf</html>", "report.pdf")
    assert err.value.reason == DocumentError.PARSE_FAILED


@pytest.mark.parametrize(
    ("line", "volatile"),
    [
        ("Page 3 of 200", True), ("Last updated 2026-11-01", True), ("© 2026 Acme Corp", True),
        ("You are viewing the documentation for version 4.2.0, released 2026-11-01.", True),
        ("Acme Platform Manual · Version 4.2.0 · 2026-11-01", True), ("« Previous: Setup", True),
        ("Next: Rollback »", True), ("Edit this page", True), ("第 3 页", True),
        ("Next, restart the worker.", False), ("Copyright transfers are handled by legal.", False),
        ("The ledger was last updated by the nightly job.", False),
        ("Version 4.2 removed the legacy exporter, so migrate first.", False),
    ],
)
def test_volatile_furniture_is_told_from_content(line: str, volatile: bool) -> None:
    from freshindex.workers.parsing.boilerplate import is_volatile

    assert is_volatile(line) is volatile


def test_html_table_cells_spanning_rows_and_columns_fill_every_row() -> None:
    html = b"""<html><body><h1>Limits</h1><table><caption>API limits</caption>
    <thead><tr><th>plan</th><th>region</th><th>requests/s</th></tr></thead>
    <tbody><tr><td rowspan="2">Team</td><td>eu</td><td>100</td></tr>
    <tr><td>us</td><td>120</td></tr>
    <tr><td colspan="2">Enterprise (all regions)</td><td>1,000</td></tr></tbody></table></body></html>"""
    doc = Parsers().parse(html, "limits.html")
    table = next(b for b in doc.blocks if b.kind == "table")
    assert "| Team | us | 120 |" in table.text
    assert "| Enterprise (all regions) | Enterprise (all regions) | 1,000 |" in table.text


def test_html_with_nested_footnote_asides_parses(tmp_path) -> None:
    # Given a page laid out as Sphinx 5+ lays out footnotes (CPython 3.11's library/json.html, 63 of the
    # 499 pages of python3.11-doc): a footnote-list <aside> holding footnote <aside role="note">s, and a
    # <header> inside a dropped <aside>
    page = """<html><head><title>json — JSON encoder and decoder</title></head><body>
    <div role="main"><section id="module-json"><h1>json — JSON encoder and decoder</h1>
    <p>The json module exposes an API familiar to users of the standard library marshal module.</p>
    <aside class="sidebar"><header><p>aside header</p></header><p>side</p></aside>
    <p>As noted in the errata for RFC 7159, JSON permits literal U+2028 in strings.<a href="#rfc-errata">1</a></p>
    <aside class="footnote-list brackets">
      <aside class="footnote brackets" id="rfc-errata" role="note"><span class="label">1</span>
      <p>As noted in the errata for RFC 7159.</p></aside>
      <aside class="footnote brackets" id="other" role="note"><p>Another footnote.</p></aside>
    </aside></section></div></body></html>"""
    # When it is parsed
    doc = Parsers().parse(page.encode(), "library/json.html")
    # Then it is not a parse failure, and the body text is kept
    text = "\n".join(b.text for b in doc.blocks)
    assert "familiar to users of the standard library marshal module" in text
    assert "JSON permits literal U+2028" in text
