"""An inline sync stages its changed documents a batch at a time (workers/batch.py, ``RunBatch.stage``).

The batch holds 4 documents here, so 13 pages make several batches and a
remainder written before the run is finished.  What is checked: a full build
and a release update staged in batches write what staging each page alone
writes (documents, chunks, changeset entries, tombstones, outcomes, the
mirror of a page whose twin is held in the same batch, and no mirror of a
held page whose staging changes the text), with one staging
transaction per batch and no attempt ended one by one; a run closed under
the loop writes none of the stagings it held and leaves no attempt open; a
process killed with stagings held loses only them and the vectors held
with them (the next sync stages them, embedded again) and nothing
half-written; the vectors for the cache are the same rows, written a batch
at a time, and the loop does not read the cache again for a page a thread
prepared; a page that
kills the process charges none of the stagings held before it a crash.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from freshindex.registry.schema import (
    ChangesetEntry,
    Chunk,
    Document,
    DocumentAttempt,
    DocumentResult,
    Embedding,
    Tombstone,
)
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import pipeline, runner
from freshindex.workers.batch import RunBatch, stage_held_or_now
from freshindex.workers.runner import sync_inline
from tests.workers.test_touch_batch import ONLY_THE_POISON_PAGE, _Killed, charges, sync_past_a_poison_page

SIZE = 4


def _page(n: int, release: str, extra: str = "", twins: tuple[int, ...] = ()) -> bytes:
    title, body = (("Ferries", "The ferry leaves at noon.") if n in twins
                   else (f"Chapter {n}", f"Chapter {n} explains backups, number {n}."))
    return (f"<html><head><title>{title}</title></head><body><main><h1>Chapter</h1><p>{body}</p>"
            f"{extra}</main><footer>release {release}</footer></body></html>").encode()


def _write(root: Path, pages: int, release: str, changed: tuple[int, ...] = (), twins: tuple[int, ...] = ()) -> None:
    """``pages`` pages; the ``twins`` hold the same text; ``changed`` pages get a second section."""
    root.mkdir(exist_ok=True)
    for n in range(pages):
        extra = f"<h2>New in {release}</h2><p>Page {n} gained a section on restores.</p>" if n in changed else ""
        (root / f"p{n:02d}.html").write_bytes(_page(n, release, extra, twins))


def _services(tmp_path: Path, name: str) -> Services:
    services = Services(load_settings(data_dir=tmp_path / name, embedding={"provider": "hashing"}))
    services.registry.add_source("docs", kind="folder", location=str(tmp_path / f"{name}-src"), owner="t", kb="kb")
    return services


@pytest.fixture
def svc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Services]:
    # A batch of SIZE documents, its time bound never reached (a clock that stands still)
    monkeypatch.setattr(runner, "RunBatch", functools.partial(RunBatch, size=SIZE, clock=lambda: 0.0))
    services = _services(tmp_path, "batched")
    try:
        yield services
    finally:
        services.close()


def _written(svc: Services, run: int) -> dict[str, Any]:
    """What the source's stagings wrote, by key and ordinal (chunk ids carry nothing else that differs)."""
    with svc.registry.session() as s:
        docs = {d.id: d for d in s.scalars(select(Document))}
        chunks = {c.id: c for c in s.scalars(select(Chunk))}
        name = {i: (docs[c.document_id].key, c.ordinal, c.text) for i, c in chunks.items()}
        return {
            "documents": sorted((d.key, d.state, d.version, d.content_hash, d.chunk_count,
                                 docs[d.canonical_id].key if d.canonical_id else None) for d in docs.values()),
            "chunks": sorted((*name[i], c.state, c.tombstoned) for i, c in chunks.items()),
            "entries": sorted((name[e.chunk_id], e.op) for e in s.scalars(select(ChangesetEntry))),
            "tombstones": sorted(name[t.chunk_id] for t in s.scalars(select(Tombstone))),
            "results": sorted((docs[r.document_id].key, r.outcome, r.chunks_added, r.tombstones)
                              for r in s.scalars(select(DocumentResult).where(DocumentResult.sync_run_id == run))),
            "vectors": sorted((e.model_id, e.content_hash, e.vector) for e in s.scalars(select(Embedding))),
        }


def _open_attempts(svc: Services) -> set[str]:
    with svc.registry.session() as s:
        return {a.document_id for a in s.scalars(select(DocumentAttempt).where(DocumentAttempt.open.is_(True)))}


def _calling(calls: dict[str, int], name: str, real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    calls[name] = calls.get(name, 0) + 1
    if threading.current_thread() is threading.main_thread():
        calls[f"loop:{name}"] = calls.get(f"loop:{name}", 0) + 1
    return real(*args, **kwargs)


def _counting(svc: Services, mp: pytest.MonkeyPatch) -> dict[str, int]:
    calls: dict[str, int] = {}
    for name in ("stage_document", "stage_documents", "end_document_attempt", "cached_vectors", "cache_vectors",
                 "live_chunk_ids"):
        mp.setattr(svc.registry, name, functools.partial(_calling, calls, name, getattr(svc.registry, name)))
    return calls


def _two_syncs(svc: Services, root: Path, mp: pytest.MonkeyPatch) -> list[tuple[dict[str, Any], dict[str, int], Any]]:
    """A full build of 13 pages (two of them twins), then a release that changes three (one twin); per sync what was
    written, the staging calls and the report."""
    out = []
    for release, changed in (("15.18", ()), ("15.20", (2, 7, 9))):
        _write(root, 13, release, changed, twins=(1, 2))
        with pytest.MonkeyPatch.context() as inner:
            calls = _counting(svc, inner)
            report = sync_inline(svc, "docs")
        assert report.build_status == "built" and not report.errors
        out.append((_written(svc, report.run.id), calls, report))
    return out


def test_a_build_and_an_update_staged_in_batches_write_what_staging_each_page_alone_writes(
        tmp_path: Path, svc: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the same two releases synced with each page staged alone (as a Celery task stages it) ...
    alone = _services(tmp_path, "alone")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(pipeline, "stage_held_or_now", lambda reg, _batch, *a: stage_held_or_now(reg, None, *a))
            mp.setattr(RunBatch, "vector_cache", lambda self, _looked=None: self.registry)  # read, written now
            mp.setattr(RunBatch, "_no_twin", lambda self, _kb, _digest: False)  # every twin asked of the registry
            one_by_one = _two_syncs(alone, tmp_path / "alone-src", mp)
    finally:
        alone.close()
    # ... and in batches of 4
    batched = _two_syncs(svc, tmp_path / "batched-src", monkeypatch)
    for (by_one, one_calls, one_report), (by_batch, calls, report) in zip(one_by_one, batched, strict=True):
        # Then each sync wrote the same rows, outcomes and points
        assert by_batch == by_one
        assert report.snapshot.point_count == one_report.snapshot.point_count
        staged = one_calls["stage_document"]  # each page with chunks of its own (a mirror stages none)
        assert staged >= 3 and one_calls.get("end_document_attempt", 0) >= staged
        # And in batches: no document staged, nor its attempt ended, in a transaction of its own (but the
        # mirror's: a mirror is staged alone, stage_mirror)
        assert calls.get("stage_document", 0) == 0 and calls.get("end_document_attempt", 0) <= 1
        # One a batch of 4 pages, touched or staged (+1: the twin's lookup writes its batch early)
        assert 1 <= calls["stage_documents"] <= -(-13 // SIZE) + 1
        # The vectors for the cache (the same rows, above) written a batch at a time too, and the loop did not
        # read the cache again for what the thread that prepared each page had read (the main thread reads for
        # the first page only, which the loop prepares itself, and for the build)
        assert one_calls["cache_vectors"] >= 3 and calls["cache_vectors"] <= calls["stage_documents"]
        assert one_calls.get("loop:cached_vectors", 0) >= 4 and calls.get("loop:cached_vectors", 0) <= 2
    # A page the run found no record of has no chunks to diff against: the full build reads none, the update does
    assert batched[0][1].get("loop:live_chunk_ids", 0) == 0 and batched[1][1]["loop:live_chunk_ids"] >= 3
    full, update = (b[0] for b in batched)
    # The twin held in the same batch was found: p02 is the mirror of p01 (after it changed, a page of its own)
    assert [d[5] for d in full["documents"] if d[0] == "p02.html"] == ["p01.html"]
    assert [d[5] for d in update["documents"] if d[0] == "p02.html"] == [None]
    assert {t[0] for t in update["tombstones"]} <= {"p02.html", "p07.html", "p09.html"}
    assert _open_attempts(svc) == set()


def test_a_run_closed_under_the_loop_writes_none_of_the_stagings_it_held(tmp_path: Path, svc: Services) -> None:
    root = tmp_path / "batched-src"
    _write(root, 10, "15.18")

    # When another process closes the run after the loop's 7th page (4 stagings written, 3 held)
    def close_after_seven(n: int, _total: int, _key: str) -> None:
        if n == 7:
            run = svc.registry.sync_runs("docs", limit=1)[0]
            svc.registry.finish_sync_run(run.id, error="closed by another process")

    report = sync_inline(svc, "docs", progress=close_after_seven)
    # Then the loop stopped at the refused batch: only the first batch is recorded, nothing of the rest
    assert report.build_reason is not None and report.build_reason.startswith("not built here")
    first = [f"p{n:02d}.html" for n in range(4)]
    assert [r[0] for r in _written(svc, report.run.id)["results"]] == first
    assert sorted(svc.registry.documents_for_source("docs")) == first
    # And no attempt is left open: the held pages' attempts were closed, none counts a crash next time
    assert _open_attempts(svc) == set()
    again = sync_inline(svc, "docs")
    assert [r[0] for r in _written(svc, again.run.id)["results"]] == [f"p{n:02d}.html" for n in range(4, 10)]
    docs = svc.registry.documents_for_source("docs")
    assert sorted(docs) == [f"p{n:02d}.html" for n in range(10)] and all(d.version == 1 for d in docs.values())
    assert not svc.metrics.value("freshindex_worker_crashes_total", source="docs")
    assert again.build_status == "built" and not again.errors


def test_a_killed_run_loses_only_the_stagings_it_held_and_the_next_sync_stages_them(
        tmp_path: Path, svc: Services) -> None:
    root = tmp_path / "batched-src"
    _write(root, 10, "15.18")

    def die_after_seven(n: int, _total: int, _key: str) -> None:
        if n == 7:
            raise _Killed

    # Given a process that dies after its 7th page: no clean-up of any kind runs
    with pytest.MonkeyPatch.context() as mp, pytest.raises(_Killed):
        mp.setattr(RunBatch, "release", lambda self: None)
        mp.setattr(runner, "_close_aborted", lambda *_a: None)
        mp.setattr(runner.pipeline.ParseAhead, "abandon", lambda self: None)
        sync_inline(svc, "docs", progress=die_after_seven)
    run = svc.registry.sync_runs("docs", limit=1)[0]
    # Then the first batch is written whole (documents, chunks, outcomes) and the held stagings not at all
    first = [f"p{n:02d}.html" for n in range(4)]
    written = _written(svc, run.id)
    assert [r[0] for r in written["results"]] == first
    assert sorted(svc.registry.documents_for_source("docs")) == first
    assert {c[0] for c in written["chunks"]} == set(first)
    # When the dead run is closed (the reaper's part) and the source synced again
    svc.registry.finish_sync_run(run.id, error="its process died")
    again = sync_inline(svc, "docs")
    # Then the rest is staged and nothing is lost (the held pages' vectors were held with them: embedded again)
    docs = svc.registry.documents_for_source("docs")
    assert sorted(docs) == [f"p{n:02d}.html" for n in range(10)] and all(d.version == 1 for d in docs.values())
    assert sorted(r[0] for r in _written(svc, again.run.id)["results"]) == [f"p{n:02d}.html" for n in range(4, 10)]
    assert again.run.summary["chunks_embedded"] >= 6, again.run.summary
    assert again.build_status == "built" and not again.errors and _open_attempts(svc) == set()


def _alone(tmp_path: Path, run: Callable[[Services, Path], Any]) -> Any:
    """``run`` on services of their own whose loop stages each page alone (as a Celery task stages it)."""
    alone = _services(tmp_path, "alone")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(pipeline, "stage_held_or_now", lambda reg, _batch, *a: stage_held_or_now(reg, None, *a))
            return run(alone, tmp_path / "alone-src")
    finally:
        alone.close()


def test_a_page_that_takes_the_old_text_of_a_held_page_is_not_made_its_mirror(tmp_path: Path, svc: Services) -> None:
    # Given p01 indexed with a text T, then a release where p01 changes and p02 takes T: while p01's staging is
    # held, the registry still says p01 holds T
    def releases(services: Services, root: Path) -> list[dict[str, Any]]:
        out = []
        for release in (1, 2):
            root.mkdir(exist_ok=True)
            for n in range(6):
                title, body = f"Chapter {n}", f"Chapter {n} explains backups, number {n}."
                if (release, n) in ((1, 1), (2, 2)):
                    title, body = "Ferries", "The ferry leaves at noon."
                elif (release, n) == (2, 1):
                    body = "Chapter 1 now explains restores."
                (root / f"p{n:02d}.html").write_bytes(
                    f"<html><head><title>{title}</title></head><body><main><h1>Chapter</h1><p>{body}</p>"
                    f"</main></body></html>".encode())
            report = sync_inline(services, "docs")
            out.append({**_written(services, report.run.id), "points": report.snapshot.point_count})
        return out

    one_by_one = _alone(tmp_path, releases)
    batched = releases(svc, tmp_path / "batched-src")
    # Then p02 keeps points of its own, as when each page is staged alone (not a mirror of p01's new text)
    assert batched == one_by_one
    assert [d[4:] for d in batched[1]["documents"] if d[0] == "p02.html"] == [(1, None)]


def test_a_page_that_kills_the_sync_charges_none_of_the_stagings_held_before_it(tmp_path: Path, svc: Services) -> None:
    # Given 10 new pages (the last two held in a batch when the sync reaches its 11th) and a page, planned last,
    # whose parser kills the process (added by the helper)
    src = tmp_path / "batched-src"
    _write(src, 10, "15.18")
    # When the source is synced again after each death until a sync completes
    report, deaths = sync_past_a_poison_page(svc, src)
    # Then the poison page alone is recorded worker_crashed; every other page is indexed and counts no crash
    assert charges(svc, report, deaths) == ONLY_THE_POISON_PAGE


class _Cache:
    """A registry holding only a vector cache (and recording what is asked and written)."""

    def __init__(self, cached: dict[str, Any]) -> None:
        self.cached, self.asked, self.wrote = cached, [], []

    def cached_vectors(self, model_id: str, hashes: list[str]) -> dict[str, Any]:
        self.asked.append(sorted(hashes))
        return {h: self.cached[h] for h in hashes if h in self.cached}

    def cache_vectors(self, model_id: str, vectors: dict[str, Any]) -> None:
        self.wrote.append((model_id, sorted(vectors)))


def test_the_loops_vector_cache_serves_held_then_looked_then_the_registry_and_writes_with_the_batch() -> None:
    import numpy as np

    def vec(x: float) -> Any:
        return np.full(3, x, dtype=np.float32)

    registry = _Cache({"c": vec(3), "d": vec(4)})
    batch = RunBatch(registry, 1, 1, "docs", [])  # type: ignore[arg-type]
    cache = batch.vector_cache({"b": vec(2), "d": None})  # what a thread read: b cached, d not (then)
    cache.cache_vectors("m", {"a": vec(1)})
    found = cache.cached_vectors("m", ["a", "b", "c", "d", "e"])
    # a: held by the batch; b: as the thread read it; d: the thread read none, so none (it embedded it); c, e: asked
    assert sorted(found) == ["a", "b", "c"] and registry.asked == [["c", "e"]]
    assert batch.cached_vectors("other-model", ["a"]) == {}  # held vectors are per model
    assert registry.wrote == []  # held, not written
    batch.flush()  # no touch nor staging held: the vectors alone are written
    assert registry.wrote == [("m", ["a"])]
    # A thread that found no vector for "a" before the batch wrote one: asked again, not embedded again
    registry.cached["a"] = vec(1)
    registry.asked.clear()
    assert sorted(batch.vector_cache({"a": None}).cached_vectors("m", ["a"])) == ["a"] and registry.asked == [["a"]]
    batch.hold_vectors("m", {"z": vec(9)})
    batch.drop()  # a refused run writes nothing
    batch.flush()
    assert registry.wrote == [("m", ["a"])]


class _Twins:
    """A registry answering twin lookups from a dict of content -> canonical document (and counting them)."""

    def __init__(self, canonical: dict[str, str], *, limit_hit: bool = False) -> None:
        self.canonical, self.limit_hit, self.asked = canonical, limit_hit, []

    def kb_content_prefixes(self, kb: str, *, limit: int) -> Any:
        import numpy as np
        return None if self.limit_hit else np.sort(np.array([int(h[:16], 16) for h in self.canonical], np.uint64))

    def canonical_twin(self, document_id: str, kb: str, content_hash: str, **_kw: Any) -> str | None:
        self.asked.append(content_hash)
        return self.canonical.get(content_hash)

    def stage_documents(self, *_a: Any) -> None:
        pass

    def end_document_attempts(self, *_a: Any, **_kw: Any) -> None:
        pass


def test_a_twin_lookup_of_content_no_document_holds_asks_nothing_of_the_registry() -> None:
    from types import SimpleNamespace

    from freshindex.core.ids import sha256_hex

    held, new, staged_now = sha256_hex("indexed"), sha256_hex("new"), sha256_hex("staged by this run")
    registry = _Twins({held: "doc-a"})
    batch = RunBatch(registry, 1, 1, "docs", ["a", "b", "c"])  # type: ignore[arg-type]
    acl = object()
    assert batch.canonical_twin("doc-b", "kb", new, acl=acl) is None and registry.asked == []  # no query
    assert batch.canonical_twin("doc-b", "kb", held, acl=acl) == "doc-a" and registry.asked == [held]
    # Content this run staged is asked of the registry (the batch is written first)
    batch.stage(SimpleNamespace(document_id="doc-c", content_hash=staged_now, chunks=[]))  # type: ignore[arg-type]
    batch.canonical_twin("doc-d", "kb", staged_now, acl=acl)
    assert registry.asked == [held, staged_now]
    # A knowledge base too large to read (or hashes that are not hexadecimal): every lookup is asked
    big = _Twins({held: "doc-a"}, limit_hit=True)
    RunBatch(big, 1, 1, "docs", ["a"]).canonical_twin("doc-b", "kb", new, acl=acl)  # type: ignore[arg-type]
    assert big.asked == [new]


def test_a_page_without_a_record_has_no_chunks_to_read_unless_it_is_planned_twice() -> None:
    from freshindex.core.ids import document_id

    batch = RunBatch(None, 1, 1, "docs", ["a.md", "b.md", "a.md"])  # type: ignore[arg-type]
    assert batch.unknown(document_id("docs", "b.md"), None)
    # A key listed twice (no connector should) may have been staged by its first occurrence: its chunks are read
    assert not batch.unknown(document_id("docs", "a.md"), None)
    assert not batch.unknown(document_id("docs", "b.md"), object())  # type: ignore[arg-type]
