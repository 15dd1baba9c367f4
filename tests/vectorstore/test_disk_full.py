"""A full file system under the data folder is an error, never a SIGBUS: query, verify, serve and sync on a real tmpfs.

On tmpfs, reading a hole of Qdrant Edge's memory-mapped files allocates a
page; on a full tmpfs the kernel answers the page fault with SIGBUS and the
process died (exit 135) in ``query`` and ``snapshots verify``. Each command
runs in its own process here, so a regression kills that process and fails
its assertion instead of the test run. The tmpfs is mounted by the test
(root only: skipped with the reason elsewhere).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.core.errors import StoreError
from freshindex.vectorstore import edge_space
from freshindex.vectorstore.edge import EdgeStore
from tests.conftest import ROOT
from tests.vectorstore.tmpfs import fill, free, mounted

SIGBUS_EXIT = 128 + signal.SIGBUS


def _docs(folder: Path, first: int, last: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(first, last + 1):
        (folder / f"d{i}.md").write_text(f"# Doc {i}\n\nDocument {i} is about the release train and topic {i}.\n")


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "freshindex", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def _env(data: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    return {**env, "FRESHINDEX_DATA_DIR": str(data), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing", **extra}


def _one_clean_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The error line of a command that failed cleanly: exit 1 (not 135, not a signal), no traceback."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, (proc.returncode, out[-2000:])
    assert "Traceback" not in out and "terminate called" not in out, out[-2000:]
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")][-1]


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """A knowledge base built on a 256 MB tmpfs data dir, which is then filled to the last page.

    A connection holds the SQLite registry open meanwhile (as ``serve`` would), so its shared-memory file
    survives and the commands reach the vector store instead of failing at the registry.
    """
    root = tmp_path_factory.mktemp("diskfull")
    with mounted(root / "data", "256m") as data:
        env = _env(data)
        _docs(root / "src", 1, 20)
        assert _cli(env, "sources", "add", "docs", "--kind", "folder", "--location", str(root / "src")).returncode == 0
        synced = _cli(env, "sync", "docs")
        assert synced.returncode == 0, synced.stderr[-2000:]
        holder = sqlite3.connect(data / "registry.db")
        holder.execute("SELECT count(*) FROM sqlite_master").fetchall()
        filler = fill(data)
        assert free(data) < 1 << 20
        try:
            yield {"env": env, "data": data, "src": root / "src", "filler": filler}
        finally:
            holder.close()


def test_query_and_verify_on_a_full_tmpfs_exit_with_an_error_not_sigbus(full: dict) -> None:
    # Given a full tmpfs under the data dir (the shard's preallocated holes cannot be backed)
    env = full["env"]
    # When query and verify run, each in its own process
    query = _cli(env, "query", "When is the release train?")
    verify = _cli(env, "snapshots", "verify", "default-v1")
    # Then both exit 1 with one line that names the cause, instead of dying of SIGBUS (exit 135)
    assert not {query.returncode, verify.returncode} & {SIGBUS_EXIT, -signal.SIGBUS}
    for proc in (query, verify):
        line = _one_clean_line(proc)
        assert "no space left to open collection 'fi_default-v1'" in line and "tmpfs" in line, line


def test_serve_answers_503_on_a_full_tmpfs(full: dict) -> None:
    # Given the same full tmpfs, and the HTTP app in a process of its own
    script = textwrap.dedent("""
        import json
        from fastapi.testclient import TestClient
        from freshindex.api.app import create_app
        from freshindex.services import Services
        from freshindex.settings import load_settings
        svc = Services(load_settings())
        with TestClient(create_app(svc), raise_server_exceptions=False) as http:
            r = http.post("/v1/query", json={"question": "When is the release train?"})
            print(json.dumps({"status": r.status_code, "body": r.json()}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=full["env"], capture_output=True, text=True,
                          timeout=300)
    # Then the process lives and answers 503 (retryable) with the cause
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["status"] == 503 and "no space left to open collection" in answer["body"]["detail"], answer


def test_a_sync_on_a_full_tmpfs_fails_in_one_line(full: dict) -> None:
    # Given new documents to index and no room left for the registry or the store
    _docs(full["src"], 21, 30)
    # When the source syncs
    proc = _cli(full["env"], "sync", "docs")
    # Then it exits 1 with one line, and no run is left recorded as anything but failed, or running until its lease
    # ends (where the registry took the run's start but had no page left for its close)
    line = _one_clean_line(proc)
    assert "disk is full" in line or "no space left" in line, line
    full["filler"].unlink()
    runs = json.loads(_cli(full["env"], "runs", "list", "--json").stdout)
    left = [r["status"] for r in runs if r["id"] != 1]
    assert left in ([], ["failed"], ["running"]), runs
    # And once there is room again, the same commands answer, and the source syncs past a run left open
    assert _cli(full["env"], "snapshots", "verify", "default-v1").returncode == 0
    if left == ["running"]:
        time.sleep(1.5)  # past the 1 s lease the next sync runs under: the open run no longer holds the source
    again = _cli({**full["env"], "FRESHINDEX_SYNC__RUN_LEASE_S": "1"}, "sync", "docs")
    # (exit 3: the new version's build is held, a 256 MB tmpfs has no room for two versions; the last one serves)
    assert again.returncode in (0, 3), again.stderr[-2000:]
    runs = json.loads(_cli(full["env"], "runs", "list", "--json").stdout)
    assert "running" not in [r["status"] for r in runs], runs
    docs = runs[0]["documents"]
    assert runs[0]["status"] == "succeeded" and docs["failed"] == 0 and docs["added"] + docs["unchanged"] == 30, runs[0]


def test_a_build_with_the_vectors_on_a_full_tmpfs_is_held_and_the_last_snapshot_serves(
        tmp_path: Path) -> None:
    # Given the registry on disk and the vector store on a small tmpfs, with one snapshot built
    with mounted(tmp_path / "vectors", "256m") as vectors:
        env = _env(tmp_path / "data", FRESHINDEX_VECTOR_STORE__PATH=str(vectors))
        _docs(tmp_path / "src", 1, 10)
        assert _cli(env, "sources", "add", "docs", "--kind", "folder", "--location", str(tmp_path / "src")).returncode == 0
        assert _cli(env, "sync", "docs").returncode == 0
        fill(vectors)
        # When new documents sync
        _docs(tmp_path / "src", 11, 15)
        proc = _cli(env, "sync", "docs")
        # Then the build is held with the cause (exit 3, as any held build), nothing died, nothing is left behind
        out = proc.stdout + proc.stderr
        assert proc.returncode == 3 and "Traceback" not in out, (proc.returncode, out[-2000:])
        assert "no space left to write collection 'fi_default-v2'" in out
        assert sorted(p.name for p in (vectors / "collections").iterdir()) == ["fi_default-v1"]
        snaps = {s["id"]: s["status"] for s in json.loads(_cli(env, "snapshots", "list", "--json").stdout)}
        assert snaps == {"default-v2": "failed", "default-v1": "active"}


def test_a_shard_copy_that_runs_out_of_space_leaves_no_temporary_copy(tmp_path: Path) -> None:
    # Given a flushed shard on disk, larger than a 1 MB tmpfs it is copied onto
    store = EdgeStore(tmp_path / "store")
    store.create_collection("fi_src", 8)
    from freshindex.vectorstore.base import PointRecord
    store.upsert("fi_src", [PointRecord(id=f"00000000-0000-0000-0000-{i:012d}", vector=[float(i % 7 + 1)] * 8,
                                        payload={"text": "x" * 2000}) for i in range(2000)])
    store.flush("fi_src")
    store.release()
    with mounted(tmp_path / "small", "1m") as small:
        from freshindex.vectorstore import edge_files
        # When the copy fails part way (ENOSPC)
        with pytest.raises(OSError):
            edge_files.copy_shard(tmp_path / "store" / "collections" / "fi_src", small / "fi_dst")
        # Then neither the copy nor its temporary folder remains
        assert list(small.iterdir()) == []


def test_a_dropped_collection_takes_its_leftover_temporary_copy_with_it(tmp_path: Path) -> None:
    # Given a shard copy a builder left when it died mid-copy (or an import's)
    store = EdgeStore(tmp_path)
    for leftover in (".fi_kb-v2.tmp", ".fi_kb-v2.import"):
        (tmp_path / "collections" / leftover / "segments").mkdir(parents=True)
        (tmp_path / "collections" / leftover / "segments" / "page_0.dat").write_bytes(b"\0" * 4096)
    (tmp_path / "collections" / ".fi_other.tmp").mkdir()
    # When the build's collection is dropped
    store.drop_collection("fi_kb-v2")
    # Then its temporary copies go, another build's stays
    assert sorted(p.name for p in (tmp_path / "collections").iterdir()) == [".fi_other.tmp"]


def test_reading_is_refused_only_where_holes_cost_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a shard with preallocated holes
    store = EdgeStore(tmp_path)
    store.create_collection("fi_c", 8)
    store.flush("fi_c")
    store.release()
    shard = tmp_path / "collections" / "fi_c"
    assert edge_space.holes(shard) > 1 << 20
    # On ext4-like file systems (reading a hole allocates nothing) it opens with no room at all
    monkeypatch.setattr(edge_space, "free_bytes", lambda _p: 0)
    edge_space.check_readable(shard, "fi_c")
    # On tmpfs the same shard is refused, with the figures
    monkeypatch.setattr(edge_space, "reads_allocate", lambda _p: True)
    with pytest.raises(StoreError, match="no space left to open collection 'fi_c'"):
        edge_space.check_readable(shard, "fi_c")
    with pytest.raises(StoreError, match="no space left to write collection 'fi_c'"):
        edge_space.check_writable(tmp_path, "fi_c", shard)
