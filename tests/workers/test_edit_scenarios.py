"""Edit scenarios on a generated 200-page manual, through the real pipeline.

Given a documentation site of 200 HTML pages and the same manual as one PDF
of 200+ pages (``examples/fixtures/manual.py``), each synced once; when a
release changes one paragraph, then the version banner and dates on every
page, then inserts a new section at the very top; then the syncs embed at
most 3 chunks, 0 chunks, and only the new section's chunks, and no chunk
below the insertion changes its id.

"Re-embeds" is read from the pipeline itself (``run.summary
["chunks_embedded"]``: chunks whose (model, content hash) the vector cache
did not have).  These scenarios use the hashing embedder for speed: which
chunks are embedded depends on the chunk hashes, not on the model, and the
real model is exercised by the retrieval tests.  Refusal calibration is off
for the same reason: it fits a query-time bias on each built version and
changes nothing the syncs embed (tests/snapshots/test_refusal_calibration.py
covers it).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from examples.fixtures import manual as m
from freshindex.core.ids import document_id
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

Release = tuple[list, str, str]  # the manual's chapters, version, date
Put = Callable[[int], None]  # puts release i into the source folder


@contextlib.contextmanager
def _html(source: Path, releases: list[Release], tmp_path: Path) -> Iterator[Put]:
    def put(i: int) -> None:
        chapters, version, date = releases[i]
        m.write_html_site(source / "manual", chapters, version=version, date=date)

    yield put


@contextlib.contextmanager
def _pdf(source: Path, releases: list[Release], tmp_path: Path) -> Iterator[Put]:
    """Every release's PDF (about 2 s of pymupdf each, holding the GIL) is written by a separate process while
    the earlier syncs run, and copied into the source folder when its turn comes (a fresh file there)."""
    ahead = tmp_path / "releases"
    ahead.mkdir()
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pages = [pool.submit(m.write_pdf, ahead / f"{i}.pdf", chapters, version=version, date=date)
                 for i, (chapters, version, date) in enumerate(releases)]

        def put(i: int) -> None:
            assert pages[i].result(timeout=300) >= 200
            shutil.copyfile(ahead / f"{i}.pdf", source / "manual.pdf")

        yield put


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                      context={"refusal_calibration": False}))
    yield services
    services.close()


def _live_ids(svc: Services, source: Path, keys: list[str]) -> dict[str, set[str]]:
    return {k: svc.registry.live_chunk_ids(document_id("manual", k)) for k in keys}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["html", "pdf"])
def test_a_release_re_embeds_only_what_changed(fmt: str, svc: Services, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    chapters = m.manual()
    edited = m.edit_one_paragraph(chapters)
    releases: list[Release] = [
        (chapters, m.VERSION, m.DATE),
        (edited, m.VERSION, m.DATE),  # one paragraph of one chapter rewritten (and made longer)
        (edited, m.NEXT_VERSION, m.NEXT_DATE),  # a new version banner, new dates and footers on every page
        (m.insert_section_at_top(edited), m.NEXT_VERSION, m.NEXT_DATE),  # a new section at the very top
    ]
    with (_html if fmt == "html" else _pdf)(source, releases, tmp_path) as put:
        put(0)
        svc.registry.add_source("manual", kind="folder", location=str(source), owner="docs", kb="default")

        first = sync_inline(svc, "manual")
        assert first.run.status == "succeeded", first.errors
        total = first.run.summary["chunks_embedded"]
        assert total > 500

        # One paragraph of one chapter rewritten (and made longer).
        put(1)
        second = sync_inline(svc, "manual")
        assert second.run.summary["documents_changed"] == 1
        assert 1 <= second.run.summary["chunks_embedded"] <= 3

        # A new version banner, new dates and footers on every page.
        put(2)
        third = sync_inline(svc, "manual")
        # HTML: the extracted content hashes the same, so no page is even re-chunked.
        assert third.run.summary["documents_changed"] == (0 if fmt == "html" else 1)
        assert third.run.summary["chunks_embedded"] == 0
        assert third.run.summary["tombstones"] == 0

        # A new section at the very top of the manual.
        keys = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
        before = _live_ids(svc, source, keys)
        put(3)
        fourth = sync_inline(svc, "manual")
        after = _live_ids(svc, source, keys)
        for key in keys:
            assert before[key] <= after[key], f"{key}: ids below the insertion changed"
        new_ids = set().union(*after.values()) - set().union(*before.values())
        assert 1 <= len(new_ids) <= 2
        assert fourth.run.summary["chunks_embedded"] == len(new_ids)
        assert fourth.run.summary["tombstones"] == 0
        new_chunks = svc.registry.chunk_rows(sorted(new_ids))
        assert all("What is new in this release" in c.heading_path for c in new_chunks)
