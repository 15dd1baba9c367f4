"""A document whose parse kills its worker process is retried a bounded number of times, then recorded.

Real parts: a Celery worker process (prefork, one pool process) on the local
Redis, the registry on PostgreSQL, the ONNX model, and a parser that SIGKILLs
the pool process parsing the poison document (tests/e2e/poison.py, loaded
only into these test processes).  The prefork pool replaces each killed
process and Celery requeues the task (``task_reject_on_worker_lost``); the
registry's attempt counter (``document_attempts``) sees each crash.  The
same rule holds for the inline runner, whose process is the one that dies.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, ROOT
from tests.e2e.poison import MARKER
from tests.e2e.test_faults import Follower, assert_indexed_once, fault_env
from tests.e2e.test_faults import cluster as cluster  # the fixture

pytestmark = [pytest.mark.services, pytest.mark.slow]

POISON_KEY = "guides/poison.md"
RETRIES = 2  # sync.document_crash_retries, the default


def _knowledge_base(root: Path) -> list[str]:
    """The sample knowledge base (its scanned PDF left out: OCR is not what this is about) plus the poison."""
    shutil.copytree(EXAMPLES / "kb", root)
    (root / "pdf" / "scanned-policy.pdf").unlink()
    (root / POISON_KEY).write_bytes(b"# Poison\n\n" + MARKER + b"\n\nIt looks like any other guide.\n")
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and str(p.relative_to(root)) != POISON_KEY)


def test_a_document_that_kills_its_worker_is_recorded_worker_crashed_and_the_run_completes(
    tmp_path: Path, pg_url: str, redis_url: str, cluster: Any
) -> None:
    # Given a worker whose pool process dies (SIGKILL) on parsing one document of a real knowledge base
    kb = tmp_path / "kb"
    good = _knowledge_base(kb)
    kills = tmp_path / "kills.log"
    env = fault_env(tmp_path, pg_url, redis_url, embedding="onnx")
    env["POISON_LOG"] = str(kills)
    svc, app, workers = cluster(env)
    host = workers.start("wpoison", module="tests.e2e.poison")
    workers.wait_ready(app, [host])
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")

    # When the source is synced through it
    follower = Follower(svc, app, "docs")
    follower.start()
    report = follower.result(timeout=200)

    # Then the poison document was tried 1 + RETRIES times, each attempt killing its pool process,
    # the worker itself (the prefork parent) lives on, and the run ended partial with that one error
    killed = kills.read_text().splitlines()
    assert [line.split()[1] for line in killed] == [POISON_KEY] * (RETRIES + 1), killed
    assert len({line.split()[0] for line in killed}) == RETRIES + 1  # a new pool process each time
    assert workers.procs[host].poll() is None, workers.tail(host)
    assert report.run.status == "partial" and report.build_status == "built", (report.run.summary, report.errors)
    assert [(e.key, e.reason) for e in report.errors] == [(POISON_KEY, "worker_crashed")]
    assert "died 3 times" in report.errors[0].detail
    assert report.run.summary["documents"]["added"] == len(good)
    docs = svc.registry.documents_for_source("docs")
    assert {k for k, d in docs.items() if d.state == "active"} == set(good)
    assert docs[POISON_KEY].state == "error" and docs[POISON_KEY].error_reason == "worker_crashed"
    assert_indexed_once(svc)
    # And every other document is queryable
    from freshindex.acl import Principal

    anyone = Principal.of("anonymous", ())
    price = svc.client.retrieve("What is the monthly price of the Team plan?", kb="default", principal=anyone, limit=3)
    assert price.evidence and price.evidence[0].key == "reference/pricing.csv"
    rollback = svc.client.retrieve("How do I roll back a database migration?", kb="default", principal=anyone, limit=3)
    assert rollback.evidence and rollback.evidence[0].key == "guides/release.md"
    # (The metric is counted in the pool process: tests/workers/test_poison_rule.py reads it.)

    # When the source is synced again, unchanged
    again = Follower(svc, app, "docs")
    again.start()
    second = again.result(timeout=200)
    # Then the poison document is not tried again (it has not changed): no new kill
    assert len(kills.read_text().splitlines()) == RETRIES + 1
    assert second.run.status == "succeeded" and second.errors == (), second.errors


def test_an_inline_sync_killed_by_a_document_gives_up_on_it_after_the_same_retries(
    tmp_path: Path, pg_url: str
) -> None:
    # Given an embedded deployment (no broker) whose parser kills the sync process on one document
    from tests.conftest import distributed_env

    kb = tmp_path / "kb"
    good = _knowledge_base(kb)
    kills = tmp_path / "kills.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    # A short lease, so that each sync after a death finds the dead run's lease run out at once.
    env = {**base, **distributed_env(tmp_path, pg_url, "", "fi-poison"), "POISON_LOG": str(kills),
           "FRESHINDEX_EMBEDDING__PROVIDER": "hashing", "FRESHINDEX_SYNC__RUN_LEASE_S": "2",
           "FRESHINDEX_SYNC__HEARTBEAT_INTERVAL_S": "0.3"}
    env.pop("FRESHINDEX_BROKER__URL")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tests.e2e.poison", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)

    assert cli("sources", "add", "docs", "--kind", "folder", "--location", str(kb)).returncode == 0, "add"
    # When `freshindex sync` is run again after each death
    codes = []
    for _ in range(RETRIES + 2):
        codes.append(cli("sync", "docs", "--json").returncode)
    # Then the first 1 + RETRIES syncs die with the poison (SIGKILL), the next records it and completes
    assert codes[: RETRIES + 1] == [-9] * (RETRIES + 1), codes
    assert codes[-1] == 0, codes
    assert len(kills.read_text().splitlines()) == RETRIES + 1
    from freshindex.registry import Registry

    registry = Registry.open(env["FRESHINDEX_REGISTRY__URL"])
    try:
        run = registry.sync_runs("docs", limit=1)[0]
        assert run.status == "partial"
        assert [(e.key, e.reason) for e in registry.document_errors(run_id=run.id)] == [(POISON_KEY, "worker_crashed")]
        docs = registry.documents_for_source("docs")
        assert {k for k, d in docs.items() if d.state == "active"} == set(good)
    finally:
        registry.close()


def test_an_inline_sync_killed_by_a_document_charges_none_of_the_unchanged_documents_before_it(
    tmp_path: Path, pg_url: str
) -> None:
    # Given an embedded deployment parsing in this process only (no pool), 30 indexed guides whose mtimes
    # then move (each touched, unchanged: their touches held for a batch), and a new guide, planned after
    # them, whose parser kills the sync process (SIGKILL)
    from tests.conftest import distributed_env

    kb = tmp_path / "kb"
    kb.mkdir()
    good = [f"guide-{n:02d}.md" for n in range(30)]
    for n, key in enumerate(good):
        (kb / key).write_text(f"# Guide {n}\n\nGuide {n} explains step {n} of the release.\n")
    kills = tmp_path / "kills.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env = {**base, **distributed_env(tmp_path, pg_url, "", "fi-poison"), "POISON_LOG": str(kills),
           "FRESHINDEX_EMBEDDING__PROVIDER": "hashing", "FRESHINDEX_SYNC__RUN_LEASE_S": "2",
           "FRESHINDEX_SYNC__HEARTBEAT_INTERVAL_S": "0.3", "FRESHINDEX_PIPELINE__PROCESSES": "1"}
    env.pop("FRESHINDEX_BROKER__URL")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tests.e2e.poison", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)

    assert cli("sources", "add", "docs", "--kind", "folder", "--location", str(kb)).returncode == 0, "add"
    first = cli("sync", "docs", "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    for key in good:
        os.utime(kb / key, ns=((kb / key).stat().st_mtime_ns + 10**9,) * 2)
    (kb / "zz-poison.md").write_bytes(b"# Poison\n\n" + MARKER + b"\n")
    # When `freshindex sync` is run again after each death
    codes = [cli("sync", "docs", "--json").returncode for _ in range(RETRIES + 2)]
    # Then the poison kills 1 + RETRIES syncs, the next records it worker_crashed, it only, and completes
    assert codes == [-9] * (RETRIES + 1) + [0], codes
    from freshindex.registry import Registry

    registry = Registry.open(env["FRESHINDEX_REGISTRY__URL"])
    try:
        run = registry.sync_runs("docs", limit=1)[0]
        assert run.status == "partial"
        assert [(e.key, e.reason) for e in registry.document_errors(run_id=run.id)] == [
            ("zz-poison.md", "worker_crashed")]
        docs = registry.documents_for_source("docs")
        assert {k for k, d in docs.items() if d.state == "active"} == set(good)
    finally:
        registry.close()
