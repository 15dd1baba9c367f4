"""End to end, distributed: two ``freshindex sync`` commands of one source at
once, one separate Celery worker process on the local Redis, the registry on
the local PostgreSQL.

Given a folder source, when two CLIs ask for its sync at the same moment,
then the worker opens one run (the second ``sync_source`` joins it), each
document is embedded once, and both CLIs follow that run to its end and exit
0, the joiner naming the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from freshindex.registry import Registry
from freshindex.registry.schema import Chunk, DocumentResult, SyncRun
from tests.conftest import ROOT, distributed_env, worker_process
from tests.workers.test_concurrent_sync import _big_kb

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def env(tmp_path: Path, pg_url: str, redis_url: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    return {**base, **distributed_env(tmp_path, pg_url, redis_url, "fi-join",
                                      FRESHINDEX_BROKER__SYNC_TIMEOUT="240")}


@pytest.fixture
def worker(env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen]:
    with worker_process(env, tmp_path / "worker.log", "join") as proc:
        yield proc


def test_two_distributed_syncs_at_once_share_one_run(
    env: dict[str, str], worker: subprocess.Popen, sample_kb: Path, tmp_path: Path
) -> None:
    subprocess.run([sys.executable, "-m", "freshindex", "sources", "add", "docs", "--kind", "folder",
                    "--location", str(_big_kb(sample_kb)), "--owner", "t"], cwd=ROOT, env=env, check=True,
                   capture_output=True)

    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "freshindex", "sync", "docs", "--json"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=open(tmp_path / f"cli{i}.log", "w"), text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    print(f"two concurrent distributed syncs: {time.perf_counter() - started:.1f}s")
    for i, p in enumerate(procs):
        assert p.returncode == 0, (outs[i], (tmp_path / f"cli{i}.log").read_text()[-2000:],
                                   (tmp_path / "worker.log").read_text()[-3000:])
    reports = [json.loads(o) for o in outs]

    assert sorted(r["joined"] for r in reports) == [False, True], reports
    opener, joiner = sorted(reports, key=lambda r: r["joined"])
    assert joiner["run_id"] == opener["run_id"]
    assert joiner["status"] == opener["status"] == "succeeded"
    assert joiner["build"]["status"] == "built" and joiner["active_snapshot"] == "default-v1"

    reg = Registry.open(env["FRESHINDEX_REGISTRY__URL"], auto_migrate=False)
    try:
        with reg.session() as s:
            runs = s.scalars(select(SyncRun)).all()
            embedded = s.scalar(select(func.sum(DocumentResult.chunks_embedded))) or 0
            chunks = s.scalar(select(func.count()).select_from(Chunk).where(Chunk.state == "live")) or 0
        assert [r.id for r in runs] == [opener["run_id"]]  # one run did all the work
        assert embedded == chunks > 200
    finally:
        reg.close()
    assert worker.poll() is None
