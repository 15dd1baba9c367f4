"""Faults, end to end: separate Celery worker processes over Redis, the
registry on the local PostgreSQL, workers killed with SIGKILL and the broker
taken away, and the run still completes without anyone stepping in.

Leases are short here (``sync.run_lease_s`` 5 s, heartbeat 1 s, Redis
visibility timeout 10 s, builder lock 6 s) so recovery fits in a test.  The
CLI-side follower (:func:`workers.runner.sync_distributed`) runs in a thread
of this process and reaps stalled runs itself, as ``freshindex sync`` does.

Run as a module (``python -m tests.e2e.test_faults worker ...``) this file is
a worker whose builder stops after writing a version and before verifying it
(file FAULT_BUILD_MARKER appears), so a test can kill it mid-build.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, coordinator, free_port, port_open

pytestmark = [pytest.mark.services, pytest.mark.slow]

BIG_KEY = "guides/handbook.md"
WORDS = ("lease heartbeat broker worker retry backoff snapshot alias verify chunk embed registry queue "
         "tombstone changeset reaper visibility timeout redelivery idempotent").split()


def write_big_document(root: Path, sections: int, seed: int = 7) -> Path:
    """A large, real Markdown handbook: ``sections`` sections of ~120 words."""
    rng = random.Random(seed)
    path = root / BIG_KEY
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [f"# Operations handbook\n\nRevision {seed}.\n"]
    for i in range(sections):
        parts.append(f"## Procedure {i}\n\n" + " ".join(rng.choice(WORDS) for _ in range(120)) + ".\n")
    path.write_text("\n".join(parts))
    return path


# -- processes ------------------------------------------------------------------


@dataclass
class Workers:
    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, queues: str = "sync,parse,build", *, concurrency: int = 1,
              extra_env: dict[str, str] | None = None, slow_build: bool = False, module: str | None = None) -> str:
        hostname = f"{name}-{uuid.uuid4().hex[:6]}@faults"
        module = module or ("tests.e2e.test_faults" if slow_build else "freshindex")
        log = open(self.logs / f"worker-{name}.log", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "worker", "--queues", queues, "-c", str(concurrency),
             "--hostname", hostname],
            cwd=ROOT, env={**os.environ, **self.env, **(extra_env or {})}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs[hostname] = proc
        return hostname

    def kill(self, hostname: str) -> None:
        proc = self.procs[hostname]
        os.killpg(proc.pid, signal.SIGKILL)  # the worker and its pool children, no goodbye
        proc.wait()

    def wait_ready(self, app: Any, hostnames: list[str], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for h, p in self.procs.items():
                assert p.poll() is None or h not in hostnames, self.tail(h)
            replies = app.control.inspect(destination=hostnames, timeout=1.0).ping() or {}
            if all(h in replies for h in hostnames):
                return
        raise AssertionError(f"workers {hostnames} did not come up: {[self.tail(h) for h in hostnames]}")

    def tail(self, hostname: str) -> str:
        name = hostname.split("-")[0]
        return (self.logs / f"worker-{name}.log").read_text()[-3000:]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


class Follower(threading.Thread):
    """``freshindex sync`` in a thread: enqueue, follow, reap when stalled."""

    def __init__(self, svc: Any, app: Any, source_id: str) -> None:
        super().__init__(daemon=True)
        self.svc, self.app, self.source_id = svc, app, source_id
        self.report: Any = None
        self.error: BaseException | None = None
        self.ended_at = 0.0

    def run(self) -> None:
        from freshindex.workers.runner import sync_distributed

        try:
            self.report = sync_distributed(self.svc, self.app, self.source_id, timeout=240, poll=0.2)
        except BaseException as exc:
            self.error = exc
        self.ended_at = time.monotonic()

    def result(self, timeout: float = 150) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "the sync did not end"
        if self.error is not None:
            raise self.error
        return self.report


def fault_env(tmp: Path, pg_url: str, broker_url: str, embedding: str = "hashing") -> dict[str, str]:
    from freshindex.registry import db

    engine = db.make_engine(pg_url)
    db.upgrade(engine)
    engine.dispose()
    return {
        "FRESHINDEX_DATA_DIR": str(tmp / "data"),
        "FRESHINDEX_REGISTRY__URL": pg_url,
        "FRESHINDEX_BROKER__URL": broker_url,
        "FRESHINDEX_BROKER__QUEUE_PREFIX": f"fi-faults-{uuid.uuid4().hex[:8]}",
        "FRESHINDEX_BROKER__VISIBILITY_TIMEOUT": "10",
        "FRESHINDEX_BROKER__RETRY_BACKOFF_MAX": "2",
        "FRESHINDEX_SYNC__RUN_LEASE_S": "5",
        "FRESHINDEX_SYNC__HEARTBEAT_INTERVAL_S": "1",
        "FRESHINDEX_SNAPSHOTS__LOCK_TTL": "6",
        "FRESHINDEX_EMBEDDING__PROVIDER": embedding,
        "FRESHINDEX_LOG_LEVEL": "INFO",
    }


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A factory: cluster(env) -> (svc, app, workers); the workers stopped, then the services closed, after."""
    with ExitStack() as stack:

        def make(env: dict[str, str]) -> tuple[Any, Any, Workers]:
            svc, app = stack.enter_context(coordinator(env, monkeypatch))
            workers = Workers(env, tmp_path)
            stack.callback(workers.stop_all)
            return svc, app, workers

        yield make


def active_tasks(app: Any, name: str) -> dict[str, list[dict[str, Any]]]:
    replies = app.control.inspect(timeout=0.5).active() or {}
    return {host: [t for t in tasks if t.get("name") == name] for host, tasks in replies.items()}


def assert_indexed_once(svc: Any, kb: str = "default") -> Any:
    """The active snapshot holds exactly the registry's live chunks, once each,
    and the alias points at it; every snapshot the alias ever named was verified."""
    active = svc.registry.active_snapshot(kb)
    assert active is not None and active.status == "active"
    assert svc.store.get_alias(svc.naming.alias(kb)) == active.collection
    ids = list(svc.store.iter_ids(active.collection))
    live = set(svc.registry.live_chunk_ids_for_kb(kb))
    assert len(ids) == len(set(ids)) == svc.store.count(active.collection) == svc.registry.count_live(kb)
    assert set(ids) == live
    for event in svc.registry.alias_events(kb, limit=50):
        snap = svc.registry.get_snapshot(event["to"])
        assert snap.status in ("active", "retired", "pruned"), snap
        assert snap.verification and not snap.verification.get("failed_check"), snap
    return active


# -- tests ----------------------------------------------------------------------


def test_a_worker_killed_mid_document_the_run_completes_on_the_other(
    tmp_path: Path, pg_url: str, redis_url: str, sample_kb: Path, cluster: Any
) -> None:
    # Given two workers and a source with one large document (real model: ~10 s of embedding)
    write_big_document(sample_kb, sections=100)
    svc, app, workers = cluster(fault_env(tmp_path, pg_url, redis_url, embedding="onnx"))
    hosts = [workers.start("wa"), workers.start("wb")]
    workers.wait_ready(app, hosts)
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")

    # When the worker parsing the large document is killed with SIGKILL
    follower = Follower(svc, app, "docs")
    follower.start()
    victim, deadline = None, time.monotonic() + 90
    while victim is None and time.monotonic() < deadline and follower.is_alive():
        for host, tasks in active_tasks(app, "freshindex.process_document").items():
            if any(BIG_KEY in (t.get("args") or []) for t in tasks):
                victim = host
        time.sleep(0.2)
    assert victim is not None, "never saw the large document being processed"
    time.sleep(1.0)  # well inside the document: parsing and embedding take several seconds
    workers.kill(victim)
    killed_at = time.monotonic()

    # Then the run completes on the other worker, nothing indexed twice
    report = follower.result()
    print(f"kill -> run ended: {follower.ended_at - killed_at:.1f}s; reaped (resumed) "
          f"{svc.metrics.value('freshindex_reaped_runs_total', action='resumed'):.0f}; ended {report.as_dict()['ended']}")
    survivor = next(h for h in hosts if h != victim)
    assert workers.procs[survivor].poll() is None, workers.tail(survivor)
    assert report.run.status == "succeeded" and report.build_status == "built", (report.build_reason,
                                                                                      report.run.summary)
    assert report.run.summary["documents"]["added"] == 9 and report.run.summary["documents"]["failed"] == 0
    docs = svc.registry.documents_for_source("docs")
    assert docs[BIG_KEY].state == "active" and docs[BIG_KEY].version == 1
    assert len(svc.registry.live_chunk_ids(docs[BIG_KEY].id)) >= 100
    active = assert_indexed_once(svc)
    assert active.id == report.snapshot.id


def test_a_build_worker_killed_mid_build_is_reaped_and_another_builds(
    tmp_path: Path, pg_url: str, redis_url: str, sample_kb: Path, cluster: Any
) -> None:
    # Given a sync/parse worker and a build worker that stalls after writing, before verifying
    svc, app, workers = cluster(fault_env(tmp_path, pg_url, redis_url))
    marker = tmp_path / "build-reached"
    parse = workers.start("wp", "sync,parse")
    slow = workers.start("wbuild", "build", extra_env={"FAULT_BUILD_MARKER": str(marker)}, slow_build=True)
    workers.wait_ready(app, [parse, slow])
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")

    # When the build worker is killed with SIGKILL while build_snapshot runs
    follower = Follower(svc, app, "docs")
    follower.start()
    deadline = time.monotonic() + 90
    while not marker.exists() and time.monotonic() < deadline and follower.is_alive():
        time.sleep(0.1)
    assert marker.exists(), workers.tail(slow)
    other = workers.start("wc", "build")  # the build queue's other worker
    workers.wait_ready(app, [other])
    workers.kill(slow)
    killed_at = time.monotonic()

    # Then the run's build completes after reaping, on the other worker
    report = follower.result()
    run = svc.registry.get_sync_run(report.run.id)
    actions = [r["action"] for r in run.summary.get("reaps", [])]
    print(f"kill -> build done: {follower.ended_at - killed_at:.1f}s; reaps {actions}; ended {report.as_dict()['ended']}")
    assert report.run.status == "succeeded" and report.build_status == "built", (report.build_reason,
                                                                                      report.run.summary)
    assert "rebuilt" in actions
    snaps = {s.id: s.status for s in svc.registry.list_snapshots("default")}
    assert snaps["default-v1"] == "failed", snaps  # the half-built version the dead builder left
    active = assert_indexed_once(svc)
    assert active.id == report.snapshot.id == "default-v2"
    assert svc.registry.lock_holder("build:default")[0] is None


def test_the_broker_away_for_30_s_mid_sync_the_sync_completes(
    tmp_path: Path, pg_url: str, sample_kb: Path, cluster: Any
) -> None:
    # Given a private Redis (the shared one is left alone) and a worker on it
    port = free_port()
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
            "--appendfsync", "always", "--dir", str(redis_dir), "--daemonize", "no"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        _wait_port(port)
        write_big_document(sample_kb, sections=400)
        svc, app, workers = cluster(fault_env(tmp_path, pg_url, f"redis://127.0.0.1:{port}/0"))
        host = workers.start("wr", concurrency=2)
        workers.wait_ready(app, [host])
        svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")

        # When the broker connections are cut for 30 s while the run's documents are in flight
        follower = Follower(svc, app, "docs")
        follower.start()
        deadline = time.monotonic() + 60
        run = None
        while time.monotonic() < deadline:
            runs = svc.registry.sync_runs("docs", limit=1)
            if runs and runs[0].docs_planned:
                run = runs[0]
                break
            time.sleep(0.05)
        assert run is not None
        # Every client connection (worker, follower, result backend) is cut, again and again, for 30 s.
        # (Stopping the server instead crashes the Celery worker on reconnect here: "Unrecoverable error:
        # AttributeError: 'NoneType' object has no attribute 'hostname'" in kombu's redis transport.)
        done_at_cut, planned = svc.registry.run_progress(run.id)
        cut_at = time.monotonic()
        kills = 0
        while time.monotonic() - cut_at < 30:
            out = subprocess.run(["redis-cli", "-p", str(port), "CLIENT", "KILL", "TYPE", "normal"],
                                 check=False, capture_output=True, text=True)
            kills += int(out.stdout.strip() or 0) if out.stdout.strip().isdigit() else 0
            time.sleep(0.2)
        assert kills > 0

        # Then the sync completes, every document indexed once
        report = follower.result()
        print(f"cut at {done_at_cut}/{planned} documents, {kills} connections killed; cut -> run ended {follower.ended_at - cut_at:.1f}s; "
              f"reaped {svc.metrics.value('freshindex_reaped_runs_total', action='resumed'):.0f}")
        assert done_at_cut < planned, "the run finished before the cut: the test proved nothing"
        assert workers.procs[host].poll() is None, workers.tail(host)
        assert report.run.status == "succeeded" and report.build_status == "built", (report.build_reason,
                                                                                      report.run.summary,
                                                                                      report.errors)
        # A task whose ack was cut is delivered again: its second pass finds the content
        # indexed and records "unchanged"; the index holds it once either way.
        docs = report.run.summary["documents"]
        assert docs["failed"] == 0 and docs["added"] + docs["unchanged"] == 9, docs
        states = svc.registry.documents_for_source("docs")
        # Two deliveries of one task can run side by side (the ack of the first was cut): both stage the
        # same chunks, the document's version may count both; the index still holds each chunk once.
        assert len(states) == 9 and all(d.state == "active" for d in states.values()), states
        assert_indexed_once(svc)
    finally:
        server.terminate()
        server.wait(timeout=10)


def _wait_port(port: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not port_open("127.0.0.1", port):
        assert time.monotonic() < deadline, f"redis on {port} did not start"
        time.sleep(0.05)


def _slow_build_worker() -> None:
    """``freshindex worker`` whose builds stop after writing (see the module docstring)."""
    from freshindex.snapshots.builder import Builder

    marker = os.environ.get("FAULT_BUILD_MARKER")
    original = Builder._phase

    def phase(self: Builder, name: str) -> None:
        original(self, name)
        if marker and name == "written":
            Path(marker).write_text(str(os.getpid()))
            time.sleep(3600)

    Builder._phase = phase  # type: ignore[method-assign]
    from freshindex.cli import main

    sys.argv = ["freshindex", *sys.argv[1:]]
    main()


if __name__ == "__main__":
    _slow_build_worker()
