"""An inline sync writes the touches of its unchanged documents a batch at a time (workers/batch.py).

A release that changed only every page's furniture touches each page: its
new etag and shape hash, the outcome ``unchanged``, its attempt ended.  Here
the batch holds 4 touches, so 13 pages make several batches and a remainder
written before the run is finished.  What is checked: every touch is
recorded as before; the registry transactions per touched page dropped (the
document path opens one attempt, the rest is shared by the batch); a run
closed under the loop writes none of the touches it held and leaves no
attempt open; a process killed with touches held loses only whole touches
(the next sync makes them) and nothing half-written.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from freshindex.core.enums import DocumentOutcomeKind
from freshindex.core.ids import document_id
from freshindex.registry.schema import Document, DocumentAttempt, DocumentResult
from freshindex.registry.touches import MOVED_DETAIL
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import runner
from freshindex.workers.batch import RunBatch
from freshindex.workers.runner import sync_inline

SIZE = 4


def _page(n: int, release: str) -> bytes:
    return (f"<html><head><title>Chapter {n}</title></head><body><div class='navheader'>PostgreSQL {release} "
            f"Documentation</div><main><h1>Chapter {n}</h1><p>Chapter {n} explains backups, number {n}.</p></main>"
            f"<footer>release {release}</footer></body></html>").encode()


def _write(root: Path, pages: int, release: str) -> None:
    root.mkdir(exist_ok=True)
    for n in range(pages):
        (root / f"p{n:02d}.html").write_bytes(_page(n, release))


@pytest.fixture
def svc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Services]:
    # A batch of SIZE touches, its time bound never reached (a clock that stands still)
    monkeypatch.setattr(runner, "RunBatch", functools.partial(RunBatch, size=SIZE, clock=lambda: 0.0))
    services = Services(load_settings(data_dir=tmp_path / "d", embedding={"provider": "hashing"}))
    services.registry.add_source("docs", kind="folder", location=str(tmp_path / "src"), owner="t", kb="kb")
    try:
        yield services
    finally:
        services.close()


def _results(svc: Services, run: int) -> dict[str, str]:
    with svc.registry.session() as s:
        return {r.key: r.outcome for r in s.scalars(select(DocumentResult).where(DocumentResult.sync_run_id == run))}


def _open_attempts(svc: Services) -> set[str]:
    with svc.registry.session() as s:
        return {a.document_id for a in s.scalars(select(DocumentAttempt).where(DocumentAttempt.open.is_(True)))}


def _release(svc: Services, source: str, root: Path, pages: int,
             before_update: Callable[[], None] = lambda: None) -> tuple[Any, int]:
    """Index ``pages`` pages of 15.18 in ``root``, then sync 15.20 (furniture only); the update's report and
    the registry transactions it opened (each store method opens one session)."""
    _write(root, pages, "15.18")
    first = sync_inline(svc, source)
    assert first.run.summary["documents"]["added"] == pages
    _write(root, pages, "15.20")
    before_update()
    count = [0]
    real: Callable[[], AbstractContextManager[Any]] = svc.registry.session

    def counted() -> AbstractContextManager[Any]:
        count[0] += 1
        return real()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(svc.registry, "session", counted)
        report = sync_inline(svc, source)
    return report, count[0]


def test_a_release_of_touched_pages_records_every_touch_in_batches(tmp_path: Path, svc: Services,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, int] = {}
    for name in ("touch_document", "touch_documents", "get_document", "end_document_attempt"):
        real = getattr(svc.registry, name)
        monkeypatch.setattr(svc.registry, name, functools.partial(_calling, calls, name, real))
    # When a release moves only the furniture of 13 pages
    report, _ = _release(svc, "docs", tmp_path / "src", 13, before_update=calls.clear)
    # Then every page is recorded unchanged in the run, with its new etag and its shape hash
    assert _results(svc, report.run.id) == {f"p{n:02d}.html": DocumentOutcomeKind.UNCHANGED for n in range(13)}
    listed = {p.name: p.stat() for p in (tmp_path / "src").iterdir()}
    for key, doc in svc.registry.documents_for_source("docs").items():
        assert doc.etag == f"{listed[key].st_mtime_ns}-{listed[key].st_size}" and doc.shape_hash
    assert report.build_status in ("built", "unchanged") and _open_attempts(svc) == set()
    # And in four transactions of touches (4 + 4 + 4 + the remainder), none by one document
    assert calls.get("touch_documents") == 4
    assert calls.get("touch_document", 0) == calls.get("end_document_attempt", 0) == 0
    assert calls.get("get_document", 0) == 0  # the records were read a batch at a time


def _calling(calls: dict[str, int], name: str, real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    calls[name] = calls.get(name, 0) + 1
    return real(*args, **kwargs)


def test_a_touched_page_costs_about_one_transaction(tmp_path: Path, svc: Services) -> None:
    # Given the same furniture-only release of 6 pages and of 26 pages (two sources, same batch size)
    small, small_tx = _release(svc, "docs", tmp_path / "src", 6)
    svc.registry.add_source("big", kind="folder", location=str(tmp_path / "big"), owner="t", kb="kb2")
    big, big_tx = _release(svc, "big", tmp_path / "big", 26)
    assert small.run.summary["documents"]["unchanged"] == 6 and big.run.summary["documents"]["unchanged"] == 26
    # Then each further touched page costs two transactions: its attempt (opened before its fetch, in the
    # thread working ahead) and its share of the batches (per 4 pages: one read of their records, one write of
    # their touches, the run's refusal and its source); written one by one, a page cost seven (the refusal,
    # the source, the record read by the thread and by the loop, the attempt, the touch, the attempt's end).
    # Half a transaction of slack: a heartbeat that falls inside one sync and not the other
    per_page = (big_tx - small_tx) / 20
    assert per_page <= 2.5, (small_tx, big_tx)


def test_a_run_closed_under_the_loop_writes_none_of_the_touches_it_held(tmp_path: Path, svc: Services) -> None:
    _write(tmp_path / "src", 10, "15.18")
    sync_inline(svc, "docs")
    _write(tmp_path / "src", 10, "15.20")

    # When another process closes the run after the loop's 6th page (4 touches written, 2 held)
    def close_after_six(n: int, _total: int, _key: str) -> None:
        if n == 6:
            run = svc.registry.sync_runs("docs", limit=1)[0]
            svc.registry.finish_sync_run(run.id, error="closed by another process")

    report = sync_inline(svc, "docs", progress=close_after_six)
    # Then the loop stopped at the refused batch: only the first batch is recorded, nothing of the rest
    assert report.build_reason is not None and report.build_reason.startswith("not built here")
    assert sorted(_results(svc, report.run.id)) == [f"p{n:02d}.html" for n in range(4)]
    listed = {p.name: p.stat() for p in (tmp_path / "src").iterdir()}
    docs = svc.registry.documents_for_source("docs")
    old = {k for k, d in docs.items() if d.etag != f"{listed[k].st_mtime_ns}-{listed[k].st_size}"}
    assert old == set(docs) - set(_results(svc, report.run.id)) and len(old) == 6
    # And no attempt is left open: the held pages' attempts were closed, none counts a crash next time
    assert _open_attempts(svc) == set()
    again = sync_inline(svc, "docs")
    assert _results(svc, again.run.id) == {k: DocumentOutcomeKind.UNCHANGED for k in old}
    assert not svc.metrics.value("freshindex_worker_crashes_total", source="docs")


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs in the process (see the patches that go with it)."""


def test_a_killed_run_leaves_whole_batches_and_the_next_sync_makes_the_rest(tmp_path: Path, svc: Services) -> None:
    _write(tmp_path / "src", 10, "15.18")
    sync_inline(svc, "docs")
    _write(tmp_path / "src", 10, "15.20")

    def die_after_six(n: int, _total: int, _key: str) -> None:
        if n == 6:
            raise _Killed

    # Given a process that dies after its 6th page: no clean-up of any kind runs
    with pytest.MonkeyPatch.context() as mp, pytest.raises(_Killed):
        mp.setattr(RunBatch, "release", lambda self: None)
        mp.setattr(runner, "_close_aborted", lambda *_a: None)
        mp.setattr(runner.pipeline.ParseAhead, "abandon", lambda self: None)
        sync_inline(svc, "docs", progress=die_after_six)
    run = svc.registry.sync_runs("docs", limit=1)[0]
    # Then the first batch is written whole and the held touches not at all (their records as they were)
    written = _results(svc, run.id)
    assert sorted(written) == [f"p{n:02d}.html" for n in range(4)]
    docs = svc.registry.documents_for_source("docs")
    listed = {p.name: p.stat() for p in (tmp_path / "src").iterdir()}
    new = {k for k, d in docs.items() if d.etag == f"{listed[k].st_mtime_ns}-{listed[k].st_size}"}
    assert new == set(written)
    # And the written pages' attempts ended with their batch (the held ones are closed by the next attempt opened
    # or before the next parse: test_a_document_that_kills_the_sync_charges_only_itself...)
    assert not {docs[f"p{n:02d}.html"].id for n in range(4)} & _open_attempts(svc)
    # When the dead run is closed (the reaper's part) and the source synced again
    svc.registry.finish_sync_run(run.id, error="its process died")
    again = sync_inline(svc, "docs")
    # Then the rest is touched, every page holds its new etag, and no attempt stays open
    assert _results(svc, again.run.id) == {k: DocumentOutcomeKind.UNCHANGED for k in set(docs) - set(written)}
    docs = svc.registry.documents_for_source("docs")
    assert all(d.etag == f"{listed[k].st_mtime_ns}-{listed[k].st_size}" for k, d in docs.items())
    assert _open_attempts(svc) == set() and svc.registry.document_errors(run_id=again.run.id) == []


class _Ledger:
    """A registry stand-in that records what :class:`RunBatch` asks of it."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.refusal: str | None = None
        self.written: list[list[str]] = []
        self.moved: list[str] = []
        self.ended: list[tuple[list[str], int | None]] = []

    def run_refusal(self, run_id: int, changeset_id: int | None = None) -> str | None:
        self.asked.append("refusal")
        return self.refusal

    def get_source(self, source_id: str) -> Any:
        self.asked.append("source")
        return source_id

    def touch_documents(self, run_id: int, changeset_id: int | None, source_id: str, touches: Any) -> list[str]:
        self.written.append([t.document_id for t in touches])
        return [t.document_id for t in touches if t.document_id in self.moved]

    def end_document_attempts(self, document_ids: Any, *, outcome: bool, run_id: int | None = None) -> None:
        self.ended.append((list(document_ids), run_id))


def test_the_refusal_is_asked_at_the_first_document_then_per_interval_or_batch() -> None:
    from freshindex.registry.records import DocumentTouch

    now = [0.0]
    ledger = _Ledger()
    batch = RunBatch(ledger, 1, 1, "docs", [], size=3, check_s=2.0, clock=lambda: now[0])  # type: ignore[arg-type]
    # The first document asks; the next two within the interval do not; the third since the check does
    assert [batch.refusal() for _ in range(3)] == [None] * 3 and ledger.asked.count("refusal") == 1
    assert batch.refusal() is None and ledger.asked.count("refusal") == 2
    # Past the interval it asks again, and reads the source again with it
    batch.source()
    now[0] = 2.5
    ledger.refusal = "the run is failed"
    assert batch.refusal() == "the run is failed" and batch.source() == "docs"
    assert ledger.asked.count("source") == 2
    # A held touch is written once the oldest was held the interval, not before
    batch.touch(DocumentTouch(document_id="d1", etag="e", size=1, content_hash="h", parser_version="v"))
    now[0] = 4.0
    batch.flush_if_due()
    assert ledger.written == [] and batch.holds("d1")
    now[0] = 4.5
    batch.flush_if_due()
    assert ledger.written == [["d1"]] and not batch.holds("d1")


def test_the_metric_counts_the_touches_written_and_the_run_closes_only_its_own_attempts() -> None:
    from freshindex.registry.records import DocumentTouch

    ledger, counted = _Ledger(), []
    batch = RunBatch(ledger, 7, 1, "docs", [], size=8)  # type: ignore[arg-type]

    def hold(doc: str) -> None:
        batch.touch(DocumentTouch(document_id=doc, etag="e", size=1, content_hash="h", parser_version="v"),
                    counted=lambda outcome: counted.append((doc, outcome)))

    # Given d1 and d2 held, nothing is counted until the batch is written
    hold("d1")
    hold("d2")
    assert counted == []
    # When d2's record moved since it was judged unchanged (not touched), Then it is counted skipped, not unchanged
    ledger.moved = ["d2"]
    batch.flush()
    assert counted == [("d1", "unchanged"), ("d2", "skipped")]
    # And touches dropped by a refused run are never counted; their attempts are closed for this run only
    hold("d3")
    batch.drop()
    assert counted == [("d1", "unchanged"), ("d2", "skipped")]
    assert ledger.ended == [(["d3"], 7)]


def _pooled_and_indexed(tmp_path: Path) -> Services:
    """Services syncing with two processes, its source of 8 pages of 15.18 indexed."""
    svc = Services(load_settings(data_dir=tmp_path / "d", embedding={"provider": "hashing"},
                                 pipeline={"processes": 2, "pool_min_documents": 1}))
    svc.registry.add_source("docs", kind="folder", location=str(tmp_path / "src"), owner="t", kb="kb")
    _write(tmp_path / "src", 8, "15.18")
    sync_inline(svc, "docs")
    return svc


def test_with_a_pool_the_shape_of_a_touched_page_is_hashed_in_its_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from freshindex.workers.parsing import Parsers
    from freshindex.workers.parsing.html import shape_html
    from freshindex.workers.steps import Raw
    from freshindex.workers.steps.pool import LinePool

    # A pool's shape is the parser's
    pool = LinePool(1)
    try:
        page = _page(1, "15.20")
        assert pool.shape(Parsers(), Raw(page, "p.html", None)) == shape_html(page)
    finally:
        pool.close()
    # Given 8 indexed pages, synced with two processes
    svc = _pooled_and_indexed(tmp_path)
    try:
        _write(tmp_path / "src", 8, "15.20")
        # When a furniture-only release is synced, with this process's own shape hashing counted
        hashed_here: list[str] = []
        real = Parsers.shape

        def counted(self: Parsers, data: bytes, key: str, media_type: str | None = None) -> str | None:
            hashed_here.append(key)
            return real(self, data, key, media_type)

        monkeypatch.setattr(Parsers, "shape", counted)
        report = sync_inline(svc, "docs")
        # Then every page is touched, and the pages worked ahead were hashed in the pool, not here
        assert _results(svc, report.run.id) == {f"p{n:02d}.html": DocumentOutcomeKind.UNCHANGED for n in range(8)}
        assert len(hashed_here) <= 1  # the loop's first page is its own (nothing works ahead of it)
    finally:
        svc.close()


def test_with_a_pool_a_touch_opens_no_attempt_and_a_page_parsed_here_opens_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from freshindex.workers import pipeline

    # Given 8 indexed pages, synced with two processes
    svc = _pooled_and_indexed(tmp_path)
    try:
        # When a release moves the furniture of every page and the text of p05, and the loop finds p03 no longer
        # a touch although the thread working ahead found it one (as when its record moved in between)
        _write(tmp_path / "src", 8, "15.20")
        (tmp_path / "src" / "p05.html").write_bytes(_page(5, "15.20").replace(b"backups", b"restores"))
        opened: list[str] = []
        for name in ("begin_attempt_ahead", "begin_document_attempt"):
            real = getattr(svc.registry, name)
            monkeypatch.setattr(svc.registry, name, functools.partial(_opening, opened, real))
        real_shape = pipeline._touch_if_same_shape
        monkeypatch.setattr(pipeline, "_touch_if_same_shape", lambda ctx, job, fetched: (
            None if job.key == "p03.html" else real_shape(ctx, job, fetched)))
        report = sync_inline(svc, "docs")
        # Then every page is recorded: p05 modified, the others unchanged (p03 after the loop's own parse)
        expected = {f"p{n:02d}.html": DocumentOutcomeKind.UNCHANGED for n in range(8)}
        expected["p05.html"] = DocumentOutcomeKind.MODIFIED
        assert _results(svc, report.run.id) == expected
        # And attempts were opened for the page parsed ahead (p05), the page the loop parses itself (p03), and
        # the loop's first page (nothing works ahead of it), not for the touches found ahead; none is left open
        ids = {document_id("docs", f"p{n:02d}.html"): f"p{n:02d}.html" for n in range(8)}
        assert {ids[d] for d in opened} == {"p00.html", "p03.html", "p05.html"}
        assert _open_attempts(svc) == set()
    finally:
        svc.close()


def _opening(opened: list[str], real: Callable[..., Any], document_id: str, **kwargs: Any) -> Any:
    opened.append(document_id)
    return real(document_id, **kwargs)


POISON = b"POISON: this page kills the process that parses it"


def test_a_document_that_kills_the_sync_charges_only_itself_not_the_touches_held_before_it(
        tmp_path: Path, svc: Services) -> None:
    # Given 10 indexed pages, then a release that moves only their mtimes (10 touches, the last 2 held when
    # the sync reaches its 11th document) and a new page, planned last, whose parser kills the process
    src = tmp_path / "src"
    _write(src, 10, "15.18")
    sync_inline(svc, "docs")
    for page in src.iterdir():
        os.utime(page, ns=(page.stat().st_mtime_ns + 10**9,) * 2)
    report, deaths = sync_past_a_poison_page(svc, src)
    # Then the poison page killed 1 + document_crash_retries syncs and the next recorded it worker_crashed,
    # and it only: every other page is indexed and counts no crash
    assert charges(svc, report, deaths) == ONLY_THE_POISON_PAGE


#: What :func:`charges` reads after :func:`sync_past_a_poison_page` on 10 pages when only the poison page was
#: charged: it killed 1 + document_crash_retries syncs, the next recorded it (only it) worker_crashed, every
#: other page is indexed with no crash, and no attempt is left open.
ONLY_THE_POISON_PAGE = {"deaths": 3, "errors": [("zz-poison.html", "worker_crashed")],
                        "active": {f"p{n:02d}.html" for n in range(10)}, "others_crashed": [], "open_attempts": set()}


def charges(svc: Services, report: Any, deaths: int) -> dict[str, Any]:
    """What a sync past a poison page left, in the shape of :data:`ONLY_THE_POISON_PAGE`."""
    docs = svc.registry.documents_for_source("docs")
    return {"deaths": deaths, "errors": [(e.key, e.reason) for e in report.errors],
            "active": {k for k, d in docs.items() if d.state == "active"},
            "others_crashed": sorted(k for k, d in docs.items()
                                     if k != "zz-poison.html" and svc.registry.document_crashes(d.id) != 0),
            "open_attempts": _open_attempts(svc)}


def sync_past_a_poison_page(svc: Services, src: Path) -> tuple[Any, int]:
    """Add a page planned last whose parser kills the process, then sync the source again after each death
    (the dead run closed, as the reaper does) until a sync completes, nothing of a dying process's clean-up
    running; the completed sync's report and the deaths."""
    from freshindex.workers import pipeline
    from freshindex.workers.parsing import Parsers

    (src / "zz-poison.html").write_bytes(b"<html><body><main><p>" + POISON + b"</p></main></body></html>")
    real = Parsers.parse

    def parse(self: Parsers, data: bytes, key: str, *rest: Any) -> Any:
        if POISON in data:
            raise _Killed
        return real(self, data, key, *rest)

    deaths = 0
    while True:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Parsers, "parse", parse)
            mp.setattr(RunBatch, "release", lambda self: None)
            mp.setattr(runner, "_close_aborted", lambda *_a: None)
            mp.setattr(runner.pipeline.ParseAhead, "abandon", lambda self: None)
            mp.setattr(pipeline, "_end_attempt", functools.partial(_unless_killed, pipeline._end_attempt))
            try:
                return sync_inline(svc, "docs"), deaths
            except _Killed:
                deaths += 1
                assert deaths <= 3
                svc.registry.finish_sync_run(svc.registry.sync_runs("docs", limit=1)[0].id, error="its process died")


def _unless_killed(real: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """``real``, unless the process is dying (:class:`_Killed`): a killed process ends no attempt."""
    if not isinstance(sys.exc_info()[1], _Killed):
        real(*args, **kwargs)


def test_a_touch_alone_is_not_written_over_a_change_made_after_it_was_judged_unchanged(
    tmp_path: Path, svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two pages indexed, then a furniture-only release, and a document task of the distributed path (no batch)
    from freshindex.workers import pipeline

    root = tmp_path / "src"
    _write(root, 2, "15.18")
    sync_inline(svc, "docs")
    _write(root, 2, "15.20")
    run, cs = svc.registry.start_sync_run("docs", "test")
    doc = svc.registry.documents_for_source("docs")["p00.html"].id
    real = svc.registry.get_document

    def judged_then_changed(doc_id: str) -> Any:  # another writer stages new content right after the record is read
        record = real(doc_id)
        with svc.registry.session() as s:
            s.execute(update(Document).where(Document.id == doc_id).values(content_hash="staged-by-another"))
        return record

    monkeypatch.setattr(svc.registry, "get_document", judged_then_changed)
    stat = (root / "p00.html").stat()
    etag = f"{stat.st_mtime_ns}-{stat.st_size}"
    outcome = pipeline.process_document(svc.pipeline, pipeline.DocumentTask(run, cs, "docs", "p00.html", etag,
                                                                             stat.st_size))
    # Then the other writer's change stays, the document is recorded skipped with why, and counted skipped
    record = real(doc)
    assert record is not None and record.content_hash == "staged-by-another" and record.etag != etag
    assert (outcome.outcome, outcome.error_detail) == (DocumentOutcomeKind.SKIPPED, MOVED_DETAIL)
    assert _results(svc, run) == {"p00.html": DocumentOutcomeKind.SKIPPED}
    assert svc.metrics.value("freshindex_documents_total", source="docs", outcome="unchanged") == 0
    assert svc.metrics.value("freshindex_documents_total", source="docs", outcome="skipped") == 1
    assert _open_attempts(svc) == set()
