"""The embedded store shared by processes on one host: what is supported works, what is not is a clear error.

Each test runs a second, real Python process on the same store root (as
`freshindex worker`, `beat` and `serve` share ``data_dir`` on one host),
driven line by line over its stdin and stdout.  Decided and documented in
docs/operations.md ("Running distributed"): many readers, one writer per
collection (the builder, under its knowledge base's registry lock), alias
changes serialised across processes; a shard written with a WAL admits one
process and the next gets :class:`StoreBusyError` after the open timeout;
recycling a version another process has open is refused, never torn.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import qdrant_edge as qe

from freshindex.core.errors import StoreBusyError
from freshindex.vectorstore.base import DENSE, PointRecord
from freshindex.vectorstore.edge import EdgeStore
from tests.conftest import ROOT

DIM = 4

# The second process: an EdgeStore on argv[1] that runs one command per line and answers one line.
CHILD = textwrap.dedent("""
    import sys
    from freshindex.vectorstore.edge import EdgeStore
    store = EdgeStore(sys.argv[1], open_timeout=float(sys.argv[2]))
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "aliases":  # swap aliases PREFIX-0 .. PREFIX-(N-1) to COLLECTION, one at a time
            prefix, n, collection = args
            for i in range(int(n)):
                store.swap_alias(f"{prefix}-{i}", collection)
            print("done", flush=True)
        elif cmd == "query":  # resolve ALIAS and query what it names (holding that version open)
            target = store.get_alias(args[0])
            hits = store.search(target, [1.0, 0.0, 0.0, 0.0], limit=1)
            print(target, len(hits), flush=True)
        elif cmd == "count":
            print(store.count(args[0]), flush=True)
        elif cmd == "exit":
            break
    store.close()
""")


class Child:
    """The second process; :meth:`ask` sends one command and returns its one-line answer."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer, f"the second process answered nothing to {line!r} (exit {self.proc.poll()})"
        return answer


@contextlib.contextmanager
def second_process(root: Path, *, open_timeout: float = 30.0) -> Iterator[Child]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(open_timeout)], cwd=ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    child = Child(proc)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield child
    finally:
        if proc.poll() is None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.write("exit\n")
                proc.stdin.flush()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _version(store: EdgeStore, name: str, n: int = 3) -> None:
    """A written, flushed collection of ``n`` points, as a build leaves it."""
    store.create_collection(name, DIM)
    store.upsert(name, [PointRecord(id=str(uuid.UUID(int=i + 1)), vector=[1.0, float(i), 0.0, 0.0],
                                    payload={"tenant": "default", "acl": ["public"]}) for i in range(n)])
    store.flush(name)


def test_two_processes_changing_aliases_at_once_lose_no_swap(tmp_path: Path) -> None:
    # Given one store root, one collection, and a second process on the same root
    store = EdgeStore(tmp_path)
    _version(store, "c")
    with second_process(tmp_path) as child:
        # When both set 100 aliases each at the same time (two knowledge bases' builders swapping)
        assert child.proc.stdin is not None
        child.proc.stdin.write("aliases b 100 c\n")
        child.proc.stdin.flush()
        for i in range(100):
            store.swap_alias(f"a-{i}", "c")
        assert child.proc.stdout is not None and child.proc.stdout.readline().strip() == "done"
    # Then every one of the 200 swaps is in the file (none rewritten away by the other's stale read)
    fresh = EdgeStore(tmp_path)
    missing = [f"{p}-{i}" for p in "ab" for i in range(100) if fresh.get_alias(f"{p}-{i}") != "c"]
    assert missing == []
    store.close()
    fresh.close()


def test_a_version_another_process_reads_is_not_recycled_until_it_lets_go(tmp_path: Path) -> None:
    # Given a builder's store serving v1 under the alias, and a reader process querying through the alias
    builder = EdgeStore(tmp_path)
    _version(builder, "v1")
    builder.swap_alias("kb", "v1")
    with second_process(tmp_path) as reader:
        assert reader.ask("query kb") == "v1 1"
        # When the builder writes v2 and swaps the alias to it
        _version(builder, "v2", n=5)
        builder.swap_alias("kb", "v2")
        # Then v1, still open in the reader, is in use and recycling it is refused (not torn under the reader)
        assert builder.in_use("v1")
        with pytest.raises(StoreBusyError, match="open in another process"):
            builder.rename_collection("v1", "v3")
        assert builder.count("v2") == 5
        # When the reader queries again, it follows the alias to v2 and lets v1 go
        assert reader.ask("query kb") == "v2 1"
        assert not builder.in_use("v1")
        builder.rename_collection("v1", "v3")
        assert reader.ask("count v2") == "5"
    builder.close()


def test_a_shard_written_with_a_wal_admits_one_process_and_the_next_gets_a_clear_error(tmp_path: Path) -> None:
    # Given a shard an older release wrote with a write-ahead log (the log's lock admits one opener)
    (tmp_path / "collections").mkdir(parents=True)
    shard = qe.EdgeShard.create(str(tmp_path / "collections" / "wal"), qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)}, wal_enabled=True))
    shard.close()
    del shard
    with second_process(tmp_path) as holder:
        assert holder.ask("count wal") == "0"  # the other process has it open
        # When this process opens it too
        store = EdgeStore(tmp_path, open_timeout=0.5)
        started = time.monotonic()
        with pytest.raises(StoreBusyError, match="locked by another process"):
            store.count("wal")
        # Then it is refused within the open timeout (wide margin), not a wait without end
        assert time.monotonic() - started < 10
        store.close()
