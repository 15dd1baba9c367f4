"""A table that runs over a page break: each chunk of it cites the pages of its own rows.

Given the SEXPTYPE table of R's internals manual (R-ints.pdf from Debian's
``r-doc-pdf``, pages 6-9: the table starts on one page and goes on on the
next), fetched once into the bench cache, when it is parsed and chunked,
then the table is one block that knows the page of every row
(``TableMeta.row_pages``), and every chunk's page and page list are exactly
the pages its rows are printed on, not every page of the table.
"""

from __future__ import annotations

import subprocess

import pymupdf
import pytest

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block, TableMeta
from freshindex.workers.chunking import Chunker
from freshindex.workers.parsing import Parsers


@pytest.fixture(scope="module")
def r_ints() -> bytes:
    from bench import pdf as bench_pdf

    try:
        manuals = bench_pdf.fetch()
    except (subprocess.CalledProcessError, OSError, StopIteration, IndexError) as exc:
        pytest.skip(f"r-doc-pdf could not be downloaded from the Debian archive: {exc}")
    src = pymupdf.open(manuals / "R-ints.pdf")
    kept = pymupdf.open()
    kept.insert_pdf(src, from_page=5, to_page=8)  # printed pages 6-9: section 1.1 SEXPTYPEs
    return kept.tobytes()


def test_a_table_chunk_cites_its_own_rows_pages(r_ints: bytes) -> None:
    doc = Parsers().parse(r_ints, "R-ints.pdf")
    [table] = [b for b in doc.blocks if b.kind == BlockKind.TABLE and "SEXPTYPE" in b.meta.get("columns", [])]
    meta = table.meta
    assert isinstance(meta, TableMeta) and meta.pages == [1, 2]
    assert meta.row_pages is not None and len(meta.row_pages) == len(meta.rows)
    page_of = {row[1]: page for row, page in zip(meta.rows, meta.row_pages, strict=True)}
    assert page_of["NILSXP"] == 1 and page_of["RAWSXP"] == 2  # the first and last types of the table
    assert set(meta.row_pages) == {1, 2}

    chunks = [c for c in Chunker().chunk("d", doc) if c.kind == BlockKind.TABLE and "SEXPTYPE" in c.text]
    assert len(chunks) >= 3
    on_one_page = 0
    for chunk in chunks:
        first, last = chunk.meta["rows"]
        own = sorted(set(meta.row_pages[first - 1 : last]))
        cited = chunk.meta.get("pages", [chunk.page])
        assert cited == own, (chunk.meta["rows"], cited, own)
        assert chunk.page == own[0]
        on_one_page += len(own) == 1
    # Rows on the second page only are cited there (the old chunker said "page 1, pages 1-2" for all of them).
    assert on_one_page >= 2 and any(c.page == 2 and "pages" not in c.meta for c in chunks)


def test_row_pages_follow_the_rows_when_a_first_row_becomes_the_header() -> None:
    # A table given without a header: its first row becomes the header, and drops its page with it.
    from freshindex.workers.parsing.table import table_block

    block = table_block([], [["type", "code"], ["a", "1"], ["b", "2"], ["c", "3"]], ("T",), page=4,
                        row_pages=[4, 4, 5, 5], pages=[4, 5])
    assert isinstance(block, Block) and isinstance(block.meta, TableMeta)
    assert block.meta.columns == ["type", "code"] and block.meta.row_pages == [4, 5, 5]
    [chunk] = Chunker().chunk("d", _doc(block))
    assert chunk.page == 4 and chunk.meta["pages"] == [4, 5]
    # Unknown metadata is refused where it is written, not carried to the chunker.
    with pytest.raises(TypeError):
        Block(BlockKind.PARAGRAPH, "x", meta={"colums": ["typo"]})


def _doc(*blocks: Block):
    from freshindex.core.types import ParsedDocument

    return ParsedDocument("t", tuple(blocks), "pdf", "test")
