"""One sync per source at a time: a second request for a source whose run is
live joins that run instead of doing the same work again.

Given a folder source, when two syncs of it start at once (two ``freshindex
sync`` processes on one embedded data directory), then exactly one run does
the work, every chunk is embedded exactly once, both commands exit 0 and the
one that joined names the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from freshindex.registry import Registry
from freshindex.registry.schema import Chunk, DocumentResult, SyncRun
from tests.conftest import ROOT

SECTION = """## Section {n}

Paragraph {n} of document {d}: the {topic} procedure step {n} requires the {role} to record
the ticket number, the affected service ({svc}), and the time the change window opened.
"""


def _big_kb(sample_kb: Path, docs: int = 40) -> Path:
    """The sample plus enough documents that a sync lasts several seconds."""
    topics = ["deploy", "rollback", "backup", "restore", "audit", "billing", "oncall", "access"]
    for d in range(docs):
        body = "\n".join(SECTION.format(n=n, d=d, topic=topics[(d + n) % 8], role=f"owner-{d}", svc=f"svc-{n}")
                         for n in range(6))
        (sample_kb / "bulk").mkdir(exist_ok=True)
        (sample_kb / "bulk" / f"doc-{d:03d}.md").write_text(f"# Bulk document {d}\n\n{body}")
    return sample_kb


def _cli(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "freshindex", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)


@pytest.mark.slow
def test_two_inline_syncs_at_once_embed_each_document_once(sample_kb: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env["FRESHINDEX_DATA_DIR"] = str(tmp_path / "data")
    subprocess.run([sys.executable, "-m", "freshindex", "sources", "add", "docs", "--kind", "folder",
                    "--location", str(_big_kb(sample_kb)), "--owner", "t"], cwd=ROOT, env=env, check=True,
                   capture_output=True)

    started = time.perf_counter()
    procs = [_cli(["sync", "docs", "--json"], env, tmp_path / f"cli{i}.log") for i in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    print(f"two concurrent inline syncs: {time.perf_counter() - started:.1f}s")
    for i, p in enumerate(procs):
        assert p.returncode == 0, (outs[i], (tmp_path / f"cli{i}.log").read_text()[-3000:])
    reports = [json.loads(o) for o in outs]

    assert sorted(r["joined"] for r in reports) == [False, True], reports
    worker, joiner = sorted(reports, key=lambda r: r["joined"])
    assert joiner["run_id"] == worker["run_id"] and joiner["status"] == "succeeded"
    assert joiner["build"]["status"] == "built" and joiner["active_snapshot"] == "default-v1"
    from freshindex.cli.sync import sync_text

    assert f"joined run {worker['run_id']} started by another sync" in sync_text(joiner)
    text = subprocess.run([sys.executable, "-m", "freshindex", "sync", "docs"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and "joined" not in text.stdout  # nothing running now: a run of its own

    reg = Registry.open(f"sqlite:///{tmp_path / 'data' / 'registry.db'}")
    try:
        with reg.session() as s:
            embedded = s.scalar(select(func.sum(DocumentResult.chunks_embedded))) or 0
            chunks = s.scalar(select(func.count()).select_from(Chunk).where(Chunk.state == "live")) or 0
            runs = s.scalars(select(SyncRun).order_by(SyncRun.id)).all()
        assert embedded == chunks == worker["chunks_embedded"] > 200
        assert [r.status for r in runs] == ["succeeded", "succeeded"]  # the joined run, then the third sync
    finally:
        reg.close()

