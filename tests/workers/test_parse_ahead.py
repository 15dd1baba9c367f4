"""Parsing the next document while this one embeds changes no outcome (workers/pipeline.py ParseAhead).

Given the same folder synced by two in-process runners, one parsing ahead in
a thread and one document after another, then both record the same chunks,
the same failures and the same summary; an edit between syncs is picked up
from the bytes fetched ahead, and the parse-ahead thread never parses a
document whose bytes are the indexed ones.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import pipeline
from freshindex.workers.runner import sync_inline


def _tree(root: Path) -> None:
    root.mkdir(parents=True)
    for n in range(6):
        (root / f"page{n}.md").write_text(
            f"# Page {n}\n\n## Setup\n\nInstall the agent {n} on every host and restart it.\n\n"
            f"## Rollback\n\nRun `migrate down {n}` unless the ledger holds the migration.\n")
    (root / "broken.pdf").write_bytes(b"%PDF-1.4 this is not a pdf at all")
    (root / "empty.md").write_text("   \n\n")


def _sync(tmp_path: Path, name: str, ahead: bool | None, root: Path) -> tuple[Services, Any]:
    """A folder source synced once; ``ahead`` None leaves ``sync.parse_ahead`` at its default."""
    svc = Services(load_settings(data_dir=tmp_path / name, embedding={"provider": "hashing"},
                                 sync={} if ahead is None else {"parse_ahead": ahead}))
    svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="kb")
    return svc, sync_inline(svc, "docs")


def _state(svc: Services, report: Any) -> dict[str, Any]:
    s = report.run.summary
    return {
        "summary": {k: s.get(k) for k in ("documents", "chunks_embedded", "chunks_reused", "chunks_kept")},
        "errors": sorted((e.key, e.reason) for e in report.errors),
        "points": report.snapshot.point_count if report.snapshot else None,
    }


def test_parse_ahead_gives_the_same_outcome_as_one_after_another(tmp_path: Path) -> None:
    root = tmp_path / "src"
    _tree(root)
    fast, first = _sync(tmp_path, "a", True, root)
    slow, second = _sync(tmp_path, "b", False, root)
    try:
        assert _state(fast, first) == _state(slow, second)
        assert {k for k, _ in _state(fast, first)["errors"]} == {"broken.pdf"}  # empty.md is skipped, not failed
        assert first.run.summary["chunks_embedded"] > 0
        # An edit: the next sync embeds the changed chunk, from the bytes the thread fetched.
        (root / "page3.md").write_text("# Page 3\n\n## Setup\n\nInstall the agent on two hosts only.\n")
        assert _state(fast, sync_inline(fast, "docs")) == _state(slow, sync_inline(slow, "docs"))
    finally:
        fast.close()
        slow.close()


def test_bytes_already_indexed_are_not_parsed_ahead(tmp_path: Path) -> None:
    root = tmp_path / "src"
    _tree(root)
    svc, _ = _sync(tmp_path, "a", True, root)
    try:
        parsed: list[str] = []
        real = svc.pipeline.parsers

        class Counting:
            def for_source(self, options: Any) -> Any:
                return self

            def version_for(self, key: str, media_type: str | None = None) -> str | None:
                return real.version_for(key, media_type)

            def parse(self, data: bytes, key: str, media_type: str | None = None) -> Any:
                parsed.append(key)
                return real.parse(data, key, media_type)

        ctx = dataclasses.replace(svc.pipeline, parsers=Counting())
        ahead = pipeline.ParseAhead()
        ahead.submit(ctx, "docs", "page1.md")
        ready = ahead.take("page1.md")
        assert ready is not None and ready.data == (root / "page1.md").read_bytes()
        assert ready.parsed is None and parsed == []  # same bytes as indexed: a touch, no parse
        (root / "page1.md").write_text("# Page 1\n\nNew text.\n")
        ahead.submit(ctx, "docs", "page1.md")
        ready = ahead.take("page1.md")
        assert ready is not None and ready.parsed is not None and ready.chunks and parsed == ["page1.md"]
        assert ahead.take("page1.md") is None  # taken once
    finally:
        svc.close()


def test_syncs_work_ahead_by_default_and_embed_there(tmp_path: Path, monkeypatch: Any) -> None:
    """By default a sync parses and embeds the next documents in threads; ``sync.parse_ahead=false`` does
    one document after another."""
    made: list[pipeline.ParseAhead] = []

    class Recorded(pipeline.ParseAhead):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            made.append(self)

    monkeypatch.setattr(pipeline, "ParseAhead", Recorded)
    root = tmp_path / "src"
    _tree(root)
    for name, ahead, expected in (("default", None, [True]), ("off", False, [])):
        made.clear()
        svc, report = _sync(tmp_path, name, ahead, root)
        try:
            assert report.run.summary["chunks_embedded"] > 0
            assert [a.embed for a in made] == expected
        finally:
            svc.close()


def test_embedding_ahead_embeds_only_what_the_diff_will_and_a_failure_there_prepares_nothing(tmp_path: Path) -> None:
    root = tmp_path / "src"
    _tree(root)
    svc, _ = _sync(tmp_path, "a", False, root)
    try:
        calls: list[list[str]] = []
        real = svc.pipeline.embedder

        class Watched:
            model_id, dimension = real.model_id, real.dimension
            fail = False

            def embed(self, texts: list[str]) -> Any:
                calls.append(list(texts))
                if self.fail:
                    raise RuntimeError("model unreachable")
                return real.embed(texts)

        watched = Watched()
        ctx = dataclasses.replace(svc.pipeline, embedder=watched)
        ahead = pipeline.ParseAhead(embed=True)
        # Given an indexed page edited in one section
        (root / "page2.md").write_text("# Page 2\n\n## Setup\n\nInstall the agent 2 on every host and restart it."
                                       "\n\n## Rollback\n\nNever roll back: restore the backup instead.\n")
        ahead.submit(ctx, "docs", "page2.md")
        ready = ahead.take("page2.md")
        # Then only the changed section's chunk was embedded ahead (the unchanged one is live)
        assert ready is not None and ready.chunks and len(ready.chunks) == 2
        assert len(calls) == 1 and len(calls[0]) == 1 and "restore the backup" in calls[0][0]
        assert list(ready.vectors) == [c.content_hash for c in ready.chunks if "restore the backup" in c.text]
        # And a new page is embedded whole, unless its texts are already in the vector cache
        (root / "new.md").write_text("# New\n\n## Setup\n\nInstall the agent 9 on every host and restart it.\n")
        (root / "copy.md").write_text((root / "page4.md").read_text())
        for key, embedded in (("new.md", 1), ("copy.md", 0)):
            calls.clear()
            ahead.submit(ctx, "docs", key)
            ready = ahead.take(key)
            assert ready is not None and len(ready.vectors) == embedded and len(calls) == embedded
        # And when the model fails in the thread, the parse is kept and no vector is: the loop embeds itself
        watched.fail = True
        ahead.submit(ctx, "docs", "new.md")
        ready = ahead.take("new.md")
        assert ready is not None and ready.chunks and ready.vectors == {} and ready.error is None
    finally:
        svc.close()



def _open_attempts(svc: Services) -> list[str]:
    from sqlalchemy import select

    from freshindex.registry.schema import DocumentAttempt

    with svc.registry.session() as s:
        return sorted(s.scalars(select(DocumentAttempt.document_id).where(DocumentAttempt.open.is_(True))))


@pytest.mark.parametrize("where", ["between documents", "waiting for the thread"])
def test_an_interrupted_sync_does_not_wait_for_its_threads_and_closes_their_attempts(
        tmp_path: Path, monkeypatch: Any, where: str) -> None:
    """Ctrl-C while a thread waits on the model (a remote one sitting out its Retry-After, say): the sync
    stops at once, and the attempts its threads opened are closed, so the next sync counts no crash.
    Interrupted between two documents, or while the loop waits for that very thread (a signal)."""
    root = tmp_path / "src"
    root.mkdir()
    for n in range(4):
        (root / f"page{n}.md").write_text(f"# Page {n}\n\nInstall the agent {n} on every host and restart it.\n")
    svc = Services(load_settings(data_dir=tmp_path / "d", embedding={"provider": "hashing"}))
    svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="kb")
    real = svc.embedder
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    class Stuck:
        """page2's embedding, in its thread, waits until the test releases it."""

        model_id, dimension = real.model_id, real.dimension

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def embed(self, texts: list[str]) -> Any:
            if threading.current_thread().name == "freshindex-parse-ahead" and any("agent 2" in t for t in texts):
                entered.set()
                release.wait(60)
                finished.set()
            return real.embed(texts)

    svc.__dict__["embedder"] = Stuck()
    process = pipeline.process_document

    def between(ctx: Any, task: Any, *a: Any, **kw: Any) -> Any:
        if task.key == "page1.md":  # page2 was handed to its thread before this call
            assert entered.wait(30)
            raise KeyboardInterrupt
        return process(ctx, task, *a, **kw)

    main = threading.get_ident()

    def interrupt_the_wait() -> None:  # the loop is in take("page2.md"), joining the stuck thread
        if entered.wait(30):
            time.sleep(0.3)
            signal.pthread_kill(main, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if where == "between documents":
            monkeypatch.setattr(pipeline, "process_document", between)
        else:
            threading.Thread(target=interrupt_the_wait, daemon=True).start()
        # When the loop is interrupted while page2's thread is stuck in the model
        with pytest.raises(KeyboardInterrupt):
            sync_inline(svc, "docs")
        # Then the sync did not wait for that thread, and left no attempt open
        assert not finished.is_set()
        assert _open_attempts(svc) == []
        release.set()
        assert finished.wait(30)
        # And the next sync counts no crash and indexes every page
        monkeypatch.setattr(pipeline, "process_document", process)
        report = sync_inline(svc, "docs")
        assert report.run.status == "succeeded" and not report.errors
        assert not svc.metrics.registry.get_sample_value("freshindex_worker_crashes_total", {"source": "docs"})
        assert all(svc.registry.document_crashes(pipeline.document_id("docs", f"page{n}.md")) == 0 for n in range(4))
        assert report.snapshot is not None and report.snapshot.point_count >= 4
    finally:
        signal.signal(signal.SIGINT, previous)
        release.set()
        svc.close()


class _TwoProcesses:
    processes = 2  # all ParseAhead reads of a pool before its first document


def _entry(ready: pipeline.Prepared | None, size: int = 0) -> tuple[threading.Event, list[Any], str, int]:
    done = threading.Event()
    if ready is not None:
        done.set()
    return done, [ready] if ready is not None else [], "doc", size


def test_touches_waiting_for_the_loop_let_it_hand_more_documents_ahead() -> None:
    from freshindex.workers.ahead import ParseAhead

    ahead = ParseAhead(pool=_TwoProcesses())  # type: ignore[arg-type]  # depth and wants read only .processes
    depth = ahead.depth
    assert depth == 8 and ahead.threads == depth * ParseAhead.TOUCH_LEAD + 1
    # A full build: every document ahead is being parsed; the window stays at depth.
    ahead._pending = {f"p{i}": _entry(None) for i in range(depth)}
    assert ahead.wants(depth - 1) and not ahead.wants(depth)
    # A release's update: 20 documents came back as touches; each makes room for one more in flight.
    touch = pipeline.Prepared(data=b"x" * 1000, digest="d", shape="s", attempt_deferred=True)
    ahead._pending = {**{f"t{i}": _entry(touch) for i in range(20)}, **{f"p{i}": _entry(None) for i in range(depth)}}
    assert ahead.wants(28)
    ahead._pending.update({f"q{i}": _entry(None) for i in range(20)})
    assert not ahead.wants(48)  # 28 in flight: as many as depth plus the touches
    # No more is handed while depth parsed documents wait for the loop, however many touches wait.
    parsed = pipeline.Prepared(data=b"x", digest="d", chunks=[])
    ahead._pending = {**{f"t{i}": _entry(touch) for i in range(20)}, **{f"p{i}": _entry(parsed) for i in range(depth)}}
    assert not ahead.wants(28)
    # Nor do held touches' bytes pass MAX_LEAD_BYTES, or the lead MAX_LEAD.
    big = pipeline.Prepared(data=b"x" * (ParseAhead.MAX_LEAD_BYTES // 2 + 1), digest="d", shape="s",
                            attempt_deferred=True)
    ahead._pending = {"a": _entry(big), "b": _entry(big)}
    assert not ahead.wants(depth)
    ahead._pending = {f"t{i}": _entry(touch) for i in range(10)}
    assert ahead.wants(depth) and not ahead.wants(ParseAhead.MAX_LEAD)
    # Documents in flight count with their listed size: a large file may come back parsed.
    ahead._pending.update({"pdf": _entry(None, ParseAhead.MAX_LEAD_BYTES)})
    assert not ahead.wants(depth)
    # A failure found ahead (no touch: the loop fetches it again) makes no room.
    failed = pipeline.Prepared()
    ahead._pending = {**{f"f{i}": _entry(failed) for i in range(20)}, **{f"p{i}": _entry(None) for i in range(depth)}}
    assert not ahead.wants(28)
    # Without a pool (threads only), nothing changes: one document ahead.
    alone = ParseAhead()
    alone._pending = {"t": _entry(touch)}
    assert alone.wants(0) and not alone.wants(1)
