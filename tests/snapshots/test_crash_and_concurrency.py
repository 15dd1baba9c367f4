"""Builders die and readers keep reading.

* kill -9 of a builder during the build and during verification: the alias
  does not move, the lock frees itself after its expiry, the next build
  succeeds and nothing is duplicated;
* a reader process queries without pause while 20 snapshots are built and
  swapped: no failed query, every result set from one snapshot, and no chunk
  returned after the swap that removed it.

Both use the hashing embedder: what is measured is bookkeeping, not meaning.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from freshindex.core.errors import LockHeldError
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.conftest import ROOT

pytestmark = pytest.mark.slow
LOCK_TTL = 5.0  # the dead builder's lock must outlive its kill and the store's reopening on a loaded machine


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {"FRESHINDEX_EMBEDDING__PROVIDER": "hashing", "FRESHINDEX_SNAPSHOTS__LOCK_TTL": str(LOCK_TTL),
              "FRESHINDEX_DATA_DIR": str(tmp_path / "data")}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


def _proc(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.snapshots.procs", *args], cwd=ROOT,
                            env={**os.environ, **env}, stdout=log.open("w"), stderr=subprocess.STDOUT)


def kill_builder_at(phase: str, env: dict[str, str], tmp_path: Path) -> float:
    """Start a builder process on ``env``'s data dir, SIGKILL it once it reaches ``phase``; the kill's monotonic time."""
    marker, log = tmp_path / "marker", tmp_path / "builder.log"
    proc = _proc(["build", env["FRESHINDEX_DATA_DIR"], phase, str(marker)], env, log)
    _wait_for(marker, proc, log)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return time.monotonic()


def _wait_for(path: Path, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"timed out waiting for {path}"
        time.sleep(0.05)


@pytest.mark.parametrize("phase", ["written", "verifying"])
def test_a_builder_killed_mid_build_changes_nothing_that_serves(phase: str, env, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"doc{i}.md").write_text(f"# Doc {i}\n\nParagraph about topic {i}.\n\nAnother paragraph {i}.")
    svc = Services(load_settings())
    svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
    first = sync_inline(svc, "s")
    assert first.snapshot.id == "kb1-v1"
    for i in range(10):
        (src / f"doc{i}.md").write_text(f"# Doc {i}\n\nRewritten paragraph {i}.")
    (src / "doc29.md").unlink()
    sync_inline(svc, "s", build=False)
    svc.store.release()

    killed_at = kill_builder_at(phase, env, tmp_path)

    assert svc.store.get_alias("fi_kb1") == "fi_kb1-v1"
    with pytest.raises(LockHeldError):
        svc.builder.build("kb1")  # the dead builder's lease has not expired yet
    time.sleep(max(0.0, LOCK_TTL + 0.2 - (time.monotonic() - killed_at)))
    result = svc.builder.build("kb1")
    assert result.status == "built" and result.snapshot_id == "kb1-v3"
    dead = svc.registry.get_snapshot("kb1-v2")
    assert dead.status == "failed" and "abandoned" in (dead.failure_reason or "")
    assert sorted(c for c in svc.store.list_collections() if c.startswith("fi_kb1")) == ["fi_kb1-v1", "fi_kb1-v3"]
    ids = list(svc.store.iter_ids("fi_kb1-v3"))
    assert len(ids) == len(set(ids)) == svc.registry.count_live("kb1") == result.point_count
    assert svc.snapshots.verify("kb1-v3")["ok"]
    svc.close()


def test_a_reader_sees_one_snapshot_per_query_while_20_snapshots_swap(env, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(20):
        (src / f"guide{i}.md").write_text(f"# Guide {i}\n\nUnrelated guidance number {i} about deployments.")
    counter = src / "counter.md"
    counter.write_text("# Counter\n\nrelease marker value 1")
    svc = Services(load_settings())
    svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
    assert sync_inline(svc, "s").snapshot.id == "kb1-v1"

    out, stop = tmp_path / "reads.jsonl", tmp_path / "stop"
    reader = _proc(["read", env["FRESHINDEX_DATA_DIR"], "release marker value", str(out), str(stop)], env,
                   tmp_path / "reader.log")
    try:
        deadline = time.monotonic() + 30
        while not out.exists() or out.stat().st_size == 0:
            assert reader.poll() is None and time.monotonic() < deadline, (tmp_path / "reader.log").read_text()
            time.sleep(0.05)
        for n in range(2, 22):
            counter.write_text(f"# Counter\n\nrelease marker value {n}")
            report = sync_inline(svc, "s")
            assert report.snapshot.id == f"kb1-v{n}", report.as_dict()
            # Wait until the reader has queried this snapshot, so every version
            # is read whatever the machine's load (no rate is assumed).
            deadline = time.monotonic() + 60
            while f'"kb1-v{n}"' not in out.read_text():
                assert reader.poll() is None and time.monotonic() < deadline, (tmp_path / "reader.log").read_text()
                time.sleep(0.02)
    finally:
        stop.write_text("stop")
        reader.wait(timeout=30)

    reads = [json.loads(line) for line in out.read_text().splitlines()]
    errors = [r for r in reads if "error" in r]
    assert errors == [], errors[:3]
    seen, with_marker = set(), 0
    for r in reads:
        version = int(r["snapshot"].rsplit("-v", 1)[1])
        seen.add(version)
        markers = {int(m) for t in r["texts"] for m in re.findall(r"release marker value (\d+)", t)}
        # Only the marker this snapshot holds: never an older one it removed,
        # never a newer one from another snapshot.
        assert markers <= {version}, (r["snapshot"], markers)
        with_marker += bool(markers)
    assert seen == set(range(1, 22)), sorted(seen)
    # Reads that fell between a tombstone and its swap (old marker withheld,
    # new one not built yet) find no marker; how many depends on load, so the
    # share is printed, not asserted (bench/ measures rates).
    assert with_marker > 0, len(reads)
    print(f"{len(reads)} reads over {len(seen)} snapshots, {with_marker} with the marker")
    svc.close()
