"""An inline sync parses in a pool of processes (workers/steps/pool.py), documents ahead for each process.

Given a parser that takes a while in every process, when a folder is synced
with ``pipeline.processes=2``, then parses ran side by side in two worker
processes (their recorded intervals overlap) and none in the sync's own, and
the outcome is the one of a sync parsing in threads.  Given a parser that
kills its process on one document, the sync completes, that document is
charged its crashes and recorded as ``worker_crashed``, the others indexed.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from freshindex.core.types import ParsedDocument, may_kill_the_process
from freshindex.models.hashing import HashingEmbedder
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.parsing import Parsers
from freshindex.workers.runner import sync_inline
from freshindex.workers.steps.pool import LinePool, portable


@dataclass(frozen=True)
class SlowParsers(Parsers):
    """Parsers that sleep in every parse and record (pid, start, end) in ``log_dir`` (pickled into the pool)."""

    log_dir: str = ""

    def for_source(self, options: Any) -> Parsers:
        return self

    def parse(self, data: bytes, key: str, media_type: str | None = None) -> ParsedDocument:
        started = time.monotonic()
        time.sleep(0.2)
        parsed = super().parse(data, key, media_type)
        with open(os.path.join(self.log_dir, f"{os.getpid()}.log"), "a") as out:
            out.write(f"{os.getpid()} {started} {time.monotonic()} {key}\n")
        return parsed


@dataclass(frozen=True)
class DeadlyParsers(Parsers):
    """Parsers whose process exits on ``poison.md``, as a native parser's segfault would end it."""

    def for_source(self, options: Any) -> Parsers:
        return self

    def parse(self, data: bytes, key: str, media_type: str | None = None) -> ParsedDocument:
        if key == "poison.md":
            os._exit(3)
        return super().parse(data, key, media_type)


def _tree(root: Path, n: int = 6) -> None:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"page{i}.md").write_text(f"# Page {i}\n\n## Setup\n\nInstall the agent {i} and restart it.\n")


def _services(tmp_path: Path, name: str, root: Path, parsers: Parsers, **pipeline: Any) -> Services:
    svc = Services(load_settings(data_dir=tmp_path / name, embedding={"provider": "hashing"},
                                 pipeline={"pool_min_documents": 1, **pipeline},
                                 sync={"document_crash_retries": 1}))
    svc.__dict__["pipeline"] = dataclasses.replace(svc.pipeline, parsers=parsers)
    svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="kb")
    return svc


def _intervals(log_dir: Path) -> list[tuple[int, float, float]]:
    rows = [line.split() for f in log_dir.glob("*.log") for line in f.read_text().splitlines()]
    return [(int(pid), float(start), float(end)) for pid, start, end, _key in rows]


def test_parses_overlap_in_two_processes_and_change_no_outcome(tmp_path: Path) -> None:
    # Given a folder, and a slow parser that records where and when it ran
    root, logs = tmp_path / "src", tmp_path / "logs"
    _tree(root)
    logs.mkdir()
    pooled = _services(tmp_path, "pool", root, SlowParsers(log_dir=str(logs)), processes=2)
    threads = _services(tmp_path, "threads", root, Parsers(), processes=1)
    try:
        assert portable(pooled.pipeline.line)
        # When it is synced with two processes, and by threads only
        report = sync_inline(pooled, "docs")
        alone = sync_inline(threads, "docs")
        # Then every page was parsed once, in worker processes, none in this one
        spans = _intervals(logs)
        assert len(spans) == 6 and os.getpid() not in {pid for pid, _, _ in spans}
        # And parses in two distinct processes ran at the same time
        overlapping = {(a[0], b[0]) for a in spans for b in spans if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]}
        assert overlapping, spans
        # And the outcome is the threads' one
        keys = ("documents", "chunks_embedded", "chunks_kept")
        assert {k: report.run.summary[k] for k in keys} == {k: alone.run.summary[k] for k in keys}
        assert report.snapshot is not None and alone.snapshot is not None
        assert report.snapshot.point_count == alone.snapshot.point_count
    finally:
        pooled.close()
        threads.close()


def test_a_process_that_dies_is_charged_to_its_document_and_the_sync_completes(tmp_path: Path) -> None:
    # Given a folder with one page whose parser exits the process
    root = tmp_path / "src"
    _tree(root, 2)
    (root / "poison.md").write_text("# Poison\n\nThis page kills its parser.\n")
    svc = _services(tmp_path, "data", root, DeadlyParsers(), processes=2)
    try:
        # When it is synced with two processes
        report = sync_inline(svc, "docs")
        # Then this process lived, the run completed, the two pages are indexed
        assert report.run.summary["documents"]["added"] == 2, report.as_dict()
        # And the poison page was charged its crashes (document_crash_retries=1) and recorded as worker_crashed
        assert [(e.key, e.reason) for e in report.errors] == [("poison.md", "worker_crashed")]
        assert "died 2 times" in report.errors[0].detail
        # And the next sync skips it until it changes
        again = sync_inline(svc, "docs")
        assert again.errors == () and again.run.summary["documents"].get("added", 0) == 0
    finally:
        svc.close()


def test_the_pool_keeps_a_documents_error_and_survives_a_death(tmp_path: Path) -> None:
    from freshindex.workers.steps import DocumentLine, Raw
    from freshindex.workers.steps.pool import PoolBroken

    line = DocumentLine(DeadlyParsers(), Services(load_settings(data_dir=tmp_path)).chunker)
    pool = LinePool(1)
    try:
        assert pool.draft(line, "d", Raw(b"not a pdf", "a.pdf")).error is not None  # a DocumentError crosses over
        try:
            pool.draft_alone(line, "d", Raw(b"# x", "poison.md"))
            raise AssertionError("the process did not die")
        except PoolBroken:
            pass
        drafted = pool.draft(line, "d", Raw(b"# Fine\n\ntext here\n", "fine.md"))
        assert drafted.error is None and drafted.chunks
    finally:
        pool.close()


def test_a_script_without_a_main_guard_syncs_in_threads_and_charges_nobody(tmp_path: Path) -> None:
    # Given a script that syncs at import (no `if __name__ == "__main__":`), which a worker would run again
    root = tmp_path / "src"
    _tree(root, 3)
    script = tmp_path / "sync_here.py"
    script.write_text(
        "from freshindex.services import Services\nfrom freshindex.settings import load_settings\n"
        "from freshindex.workers.runner import sync_inline\n"
        f"svc = Services(load_settings(data_dir={str(tmp_path / 'data')!r}, embedding={{'provider': 'hashing'}},"
        " pipeline={'processes': 2, 'pool_min_documents': 1}))\n"
        f"svc.registry.add_source('docs', kind='folder', location={str(root)!r}, owner='t', kb='kb')\n"
        "report = sync_inline(svc, 'docs')\n"
        "print('RESULT', report.run.summary['documents'].get('added'), len(report.errors))\n")
    # When it runs
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    # Then its pool was given up before any document went in: every page indexed, none charged
    assert "RESULT 3 0" in done.stdout, done.stdout + done.stderr


class _SlowEmbedder:
    """The service's embedder, slowed, counting the threads working ahead that embed at once."""

    def __init__(self, real: Any) -> None:
        self.real, self.now, self.most = real, 0, 0
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def embed(self, texts: Any) -> Any:
        ahead = threading.current_thread().name == "freshindex-parse-ahead"
        with self.lock:
            self.now += ahead
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.05)
            return self.real.embed(texts)
        finally:
            with self.lock:
                self.now -= ahead


def test_documents_ahead_outnumber_the_processes_but_embed_no_more_at_once_than_before(tmp_path: Path) -> None:
    # Given 16 pages synced with two processes, and an embedder that takes a while
    root = tmp_path / "src"
    _tree(root, 16)
    svc = _services(tmp_path, "data", root, Parsers(), processes=2)
    slow = _SlowEmbedder(svc.pipeline.embedder)
    svc.__dict__["pipeline"] = dataclasses.replace(svc.pipeline, embedder=slow)
    try:
        report = sync_inline(svc, "docs")
        # Then every page is indexed, and at most three threads working ahead (processes + 1) embedded at once,
        # although eight documents were kept ahead
        assert report.run.summary["documents"]["added"] == 16, report.as_dict()
        assert 1 <= slow.most <= 3, slow.most
    finally:
        svc.close()


class _InProcessModel(HashingEmbedder):
    """The hashing stand-in declared as a native model in this process (ONNX, torch): its embedding could kill it."""

    cannot_kill_process = False


def test_held_attempts_are_closed_before_work_only_when_that_work_can_kill_this_process(tmp_path: Path) -> None:
    """Parses in the pool and a hashing (or remote) embedding cannot take the sync's process down: the held
    documents' attempts then wait for the next attempt's transaction; a model in this process closes them first."""
    from freshindex.workers.batch import RunBatch

    assert not may_kill_the_process(HashingEmbedder()) and may_kill_the_process(_InProcessModel())
    assert may_kill_the_process(object())  # an embedder that says nothing is treated as a native model
    root = tmp_path / "src"
    _tree(root, 8)
    entered: dict[str, dict[str, int]] = {}
    for name, embedder in (("hashing", HashingEmbedder()), ("in-process model", _InProcessModel())):
        svc = _services(tmp_path, name, root, Parsers(), processes=2)
        svc.__dict__["pipeline"] = dataclasses.replace(svc.pipeline, embedder=embedder)
        counts = entered[name] = {"settle": 0, "working": 0}
        real_settle, real_working = RunBatch.settle, RunBatch.working

        def settle(self: RunBatch, _c: dict[str, int] = counts, _real: Any = real_settle) -> None:
            _c["settle"] += 1
            _real(self)

        def working(self: RunBatch, _c: dict[str, int] = counts, _real: Any = real_working) -> Any:
            _c["working"] += 1
            return _real(self)

        try:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(RunBatch, "settle", settle)
                mp.setattr(RunBatch, "working", working)
                report = sync_inline(svc, "docs")
            assert report.build_status == "built" and report.run.summary["documents"]["added"] == 8
        finally:
            svc.close()
    # The pool parsed every page and hashing embedded them: no attempt closed ahead of that work
    assert entered["hashing"] == {"settle": 0, "working": 0}
    # A model in this process: the loop settles before each page's embedding, the threads before theirs
    assert entered["in-process model"]["settle"] >= 8 and entered["in-process model"]["working"] >= 1
