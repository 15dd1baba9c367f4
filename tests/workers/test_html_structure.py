"""Structure of generated documentation pages (DocBook, Sphinx, MkDocs, Javadoc).

Given small pages written in the shape each generator prints (fixtures in
``tests/workers/fixtures/``), when they are parsed (and chunked), then no
navigation text is left, every definition/variable-list entry carries its
term, section numbers are split from heading text, captions in any
numbering style are kept, group rows label the rows below them, anchors are
ids of the page, and a release that only changes furniture costs no
chunking and no embedding.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from freshindex.core.enums import BlockKind
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.chunking import Chunker
from freshindex.workers.parsing import Parsers
from freshindex.workers.parsing.numbering import page_title, split_number
from freshindex.workers.runner import sync_inline

FIXTURES = Path(__file__).parent / "fixtures"
PAGES = ["docbook_guc.html", "docbook_refentry.html", "sphinx_django.html", "mkdocs_material.html",
         "javadoc_class.html"]
#: Words that only the navigation of these fixtures holds.
NAV_WORDS = {
    "docbook_guc.html": ["Prev", "Home", "Next", "Write Ahead Log", "Connections and Authentication",
                         "Server Configuration"],
    "docbook_refentry.html": ["Prev", "Home", "DROP SUBSCRIPTION", "DROP TABLESPACE", "SQL Commands"],
    "sphinx_django.html": ["previous", "Previous topic", "Next topic", "Field API reference", "Table of contents",
                           "Django 3.2.25 documentation", "Modules", "Last update", "May 26, 2026"],
    "mkdocs_material.html": ["Previous", "Deploy", "Install", "Edit", "Last update", "Made with", "1.5.3"],
    "javadoc_class.html": ["Overview", "Deprecated", "Prev", "Next", "Frames", "All Classes", "Copyright",
                           "4.2.0"],
}


def parse(name: str, data: bytes | None = None):
    return Parsers().parse(data if data is not None else (FIXTURES / name).read_bytes(), name)


def chunks(name: str, data: bytes | None = None, **kw):
    return Chunker(**kw).chunk("doc", parse(name, data))


def _has(text: str, phrase: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


def _without_classes(data: bytes) -> bytes:
    """The page with every class and role attribute removed: only structure is left."""
    soup = BeautifulSoup(data, "html.parser")
    for tag in soup.find_all(True):
        for attr in ("class", "role", "aria-label", "summary"):
            tag.attrs.pop(attr, None)
    return str(soup).encode()


@pytest.mark.parametrize("name", PAGES)
def test_no_navigation_text_reaches_any_block_or_chunk(name: str) -> None:
    doc = parse(name)
    text = "\n".join(b.text for b in doc.blocks)
    chunk_text = "\n".join(c.text for c in chunks(name))
    for phrase in NAV_WORDS[name]:
        assert not _has(text, phrase), f"{name}: {phrase!r} is navigation"
        assert not _has(chunk_text, phrase), f"{name}: {phrase!r} reached a chunk"


@pytest.mark.parametrize("name", ["docbook_guc.html", "docbook_refentry.html", "javadoc_class.html"])
def test_navigation_is_recognised_by_structure_without_class_names(name: str) -> None:
    data = _without_classes((FIXTURES / name).read_bytes())
    text = "\n".join(b.text for b in parse(name, data).blocks)
    for phrase in ("Prev", "Home", "Next"):
        assert not _has(text, phrase)
    assert "shared_buffers" in text or "DROP TABLE" in text or "maxAttempts" in text


def test_docbook_variable_list_entries_carry_their_term_in_every_block() -> None:
    doc = parse("docbook_guc.html")
    entries: dict[int, list] = {}
    for b in doc.blocks:
        if "entry" in b.meta:
            entries.setdefault(b.meta["entry"], []).append(b)
    assert [bs[0].meta["term"] for bs in entries.values()] == [
        "shared_buffers (integer)", "work_mem (integer)", "temp_buffers (integer)"]
    for blocks in entries.values():
        term = blocks[0].meta["term"]
        assert blocks[0].kind == BlockKind.PARAGRAPH and blocks[0].text.startswith(term)
        assert all(b.meta["term"] == term for b in blocks)
    # No term is a block of its own, or the tail of another entry's block.
    assert not any(b.text.strip() == "work_mem (integer)" for b in doc.blocks)
    assert not any(b.text.rstrip().endswith("work_mem (integer)") for b in doc.blocks)


def test_every_chunk_of_a_long_entry_names_its_term() -> None:
    # A small budget splits shared_buffers' three paragraphs over several chunks.
    drafts = chunks("docbook_guc.html", max_tokens=90, overlap_tokens=10)
    described = [c for c in drafts if "memory" in c.text.lower() and c.kind != BlockKind.TABLE]
    assert len([c for c in drafts if "shared_buffers (integer)" in c.text]) >= 2
    for c in described:
        assert any(t in c.text for t in ("shared_buffers (integer)", "work_mem (integer)", "temp_buffers (integer)")), c.text


def test_sphinx_definitions_with_an_empty_dd_take_the_paragraphs_after_them() -> None:
    doc = parse("sphinx_django.html")
    null = [b for b in doc.blocks if b.meta.get("term") == "Field.null"]
    assert null[0].text == "Field.null"
    assert any("store empty values as NULL" in b.text for b in null)
    assert any("Avoid using null" in b.text for b in null)
    blank = [b for b in doc.blocks if b.meta.get("term") == "Field.blank"]
    assert blank[0].text.startswith("Field.blank: If True")
    # The next heading ends the entry.
    assert all(b.meta.get("term") != "Field.null" for b in doc.blocks if b.heading_path[-1] == "blank")


def test_heading_numbers_are_split_from_heading_text() -> None:
    doc = parse("docbook_guc.html")
    memory = next(b for b in doc.blocks if b.meta.get("term") == "work_mem (integer)")
    assert memory.heading_path == ("Resource Consumption", "Memory")
    assert memory.meta["heading_numbers"] == ("20.4.", "20.4.1.")
    assert doc.title == "Resource Consumption" and doc.meta["title_number"] == "20.4."
    assert split_number("F.1. adminpack") == ("F.1.", "adminpack")
    assert split_number("Chapter 20. Server Configuration") == ("Chapter 20.", "Server Configuration")
    assert split_number("Appendix F. Additional Supplied Modules")[1] == "Additional Supplied Modules"
    assert split_number("2024") == ("", "2024")
    assert split_number("3.2 seconds") == ("", "3.2 seconds")


@pytest.mark.parametrize(
    ("name", "title"),
    [("docbook_guc.html", "Resource Consumption"), ("docbook_refentry.html", "DROP TABLE"),
     ("sphinx_django.html", "Model field reference"), ("mkdocs_material.html", "Configuration"),
     ("javadoc_class.html", "RetryPolicy")],
)
def test_the_title_is_the_page_s_own_without_the_site(name: str, title: str) -> None:
    assert parse(name).title == title
    assert page_title("Settings — Django 3.2.25 documentation", ["Settings"]) == ("", "Settings")


def test_reference_page_sections_sit_under_the_page_title() -> None:
    doc = parse("docbook_refentry.html")
    paths = {b.heading_path for b in doc.blocks}
    assert ("DROP TABLE", "Synopsis") in paths
    assert ("DROP TABLE", "Parameters") in paths
    cascade = next(b for b in doc.blocks if b.meta.get("term") == "CASCADE")
    assert cascade.heading_path == ("DROP TABLE", "Parameters")


def test_letter_numbered_captions_and_group_rows_are_kept() -> None:
    table = next(b for b in parse("docbook_guc.html").blocks if b.kind == BlockKind.TABLE)
    assert table.meta["caption"] == "Table F.1. Error Codes"
    assert table.meta["columns"] == ["group", "Error Code", "Condition Name"]
    assert ["Class 01 — Warning", "0100C", "dynamic_result_sets_returned"] in table.meta["rows"]
    assert not any(r[1].startswith("Class") for r in table.meta["rows"])  # group rows are labels, not data
    drafts = [c for c in chunks("docbook_guc.html") if c.kind == BlockKind.TABLE]
    assert drafts and all(c.text.startswith("Table F.1. Error Codes") for c in drafts)
    assert any("| Class 01 — Warning | 0100C |" in c.text for c in drafts)


@pytest.mark.parametrize("name", PAGES)
def test_block_anchors_and_chunk_anchors_are_ids_of_the_page(name: str) -> None:
    data = (FIXTURES / name).read_bytes()
    ids = {str(t["id"]) for t in BeautifulSoup(data, "html.parser").find_all(id=True)}
    for b in parse(name).blocks:
        if "anchor_id" in b.meta:
            assert b.meta["anchor_id"] in ids
    drafts = chunks(name)
    anchored = [c for c in drafts if c.anchor in ids]
    if name == "javadoc_class.html":
        return  # it names its sections with <a name>, not ids
    assert anchored == drafts, [c.anchor for c in drafts if c.anchor not in ids]


def test_anchors_prefer_the_generator_s_own_ids() -> None:
    blocks = parse("sphinx_django.html").blocks
    assert next(b for b in blocks if b.meta.get("term") == "DEFAULT_AUTO_FIELD").meta["anchor_id"] == \
        "std-setting-DEFAULT_AUTO_FIELD"
    assert next(b for b in blocks if b.text == "Field options").meta["anchor_id"] == "field-options"
    guc = parse("docbook_guc.html").blocks
    assert next(b for b in guc if b.meta.get("term") == "work_mem (integer)").meta["anchor_id"] == "GUC-WORK-MEM"


def _release(data: bytes, version: str) -> bytes:
    """The same page in another release: new version strings in the furniture only."""
    text = data.decode()
    return (text.replace("15.18", version).replace("3.2.25", version).replace("20.5. Write Ahead Log",
                                                                                "20.5. WAL")).encode()


@pytest.mark.parametrize("name", PAGES)
def test_the_content_hash_ignores_furniture_and_sees_content(name: str) -> None:
    data = (FIXTURES / name).read_bytes()
    base = parse(name).meta["content_hash"]
    assert parse(name, _release(data, "15.99")).meta["content_hash"] == base
    end = b"</article>" if b"</article>" in data else b"</body>"
    edited = data.replace(end, b"<p>A new paragraph of real content at the end of the page.</p>" + end)
    assert parse(name, edited).meta["content_hash"] != base


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    yield services
    services.close()


def test_a_navigation_only_release_re_chunks_and_embeds_nothing(svc: Services, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in PAGES:
        (source / name).write_bytes((FIXTURES / name).read_bytes())
    svc.registry.add_source("manual", kind="folder", location=str(source), owner="docs", kb="default")
    first = sync_inline(svc, "manual")
    assert first.run.status == "succeeded", first.errors
    assert first.run.summary["chunks_embedded"] > 10

    for name in PAGES:
        (source / name).write_bytes(_release((FIXTURES / name).read_bytes(), "15.99"))
    second = sync_inline(svc, "manual")
    assert second.run.summary["chunks_embedded"] == 0
    assert second.run.summary["documents_changed"] == 0
    assert second.run.summary["tombstones"] == 0

    # A real edit still goes through.
    page = source / "docbook_guc.html"
    page.write_bytes(page.read_bytes().replace(b"four megabytes", b"eight megabytes"))
    third = sync_inline(svc, "manual")
    assert third.run.summary["documents_changed"] == 1
    assert 1 <= third.run.summary["chunks_embedded"] <= 2
