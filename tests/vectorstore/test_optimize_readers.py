"""``EdgeStore.optimize``'s re-index path keeps the reader rules every other handle follows.

Re-indexing a clone of a version built with other index settings closes the
shard and opens it again with this store's settings.  The reopened handle
takes the shared reader ``flock`` like any handle (so another process's
builder sees it as in use and does not recycle it under it); the reopen
itself needs no handle open anywhere (an Edge close writes into the files
it mapped), and no read of this process in flight (count, retrieve and id
scrolls count as reads, not only searches), else :class:`StoreBusyError`.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from freshindex.core.errors import StoreBusyError
from freshindex.vectorstore.edge import EdgeStore
from tests.vectorstore.test_optimize import _config, _old_style, _points


def _old(tmp_path: Path, n: int = 60):
    vecs, _ = _points(n)
    (tmp_path / "collections").mkdir(parents=True)
    _old_style(tmp_path, "old", vecs)
    return vecs


def test_the_reindexed_handle_holds_the_reader_lock(tmp_path: Path) -> None:
    # Given a store that re-indexed a collection and keeps it open
    vecs = _old(tmp_path)
    store = EdgeStore(tmp_path)
    store.optimize("old")
    assert _config(store, "old")["hnsw_config"]["m"] == 0
    assert store.search("old", vecs[3].tolist(), limit=1)[0].id == str(uuid.UUID(int=4))
    # When a builder in another process looks at it
    other = EdgeStore(tmp_path)
    # Then it is in use, and cannot be recycled under the open handle
    assert other.in_use("old")
    with pytest.raises(StoreBusyError):
        other.rename_collection("old", "old-recycled")
    store.release("old")
    assert not other.in_use("old")
    other.close()
    store.close()


def test_reindexing_a_collection_another_process_has_open_is_refused(tmp_path: Path) -> None:
    # Given another process reading the collection
    vecs = _old(tmp_path)
    reader = EdgeStore(tmp_path)
    assert reader.count("old") == len(vecs)
    store = EdgeStore(tmp_path)
    # When this store would re-index it, Then it refuses, and the reader still answers
    with pytest.raises(StoreBusyError):
        store.optimize("old")
    assert reader.search("old", vecs[5].tolist(), limit=1)[0].id == str(uuid.UUID(int=6))
    assert (_config(store, "old").get("hnsw_config") or {}).get("m") != 0  # untouched
    # Once the reader let go, the re-index runs
    reader.close()
    store.optimize("old")
    assert _config(store, "old")["hnsw_config"]["m"] == 0 and store.count("old") == len(vecs)
    store.close()


class _PausedShard:
    """A shard whose ``retrieve`` waits until the test lets it go (a read in flight)."""

    def __init__(self, inner, entered: threading.Event, go: threading.Event) -> None:
        self.inner, self.entered, self.go = inner, entered, go

    def retrieve(self, *args, **kwargs):
        self.entered.set()
        assert self.go.wait(10)
        return self.inner.retrieve(*args, **kwargs)

    def __getattr__(self, item):
        return getattr(self.inner, item)


def test_a_retrieve_in_flight_keeps_its_shard_open_through_a_reindex(tmp_path: Path) -> None:
    # Given a retrieve of this process in flight on the collection
    _old(tmp_path)
    store = EdgeStore(tmp_path)
    store.count("old")
    entered, go = threading.Event(), threading.Event()
    store._open["old"] = _PausedShard(store._open["old"], entered, go)
    ids = [str(uuid.UUID(int=i + 1)) for i in range(5)]
    got: dict[str, object] = {}

    def read() -> None:
        try:
            got["points"] = store.retrieve("old", ids)
        except Exception as exc:  # what a closed shard raises
            got["error"] = exc

    t = threading.Thread(target=read)
    t.start()
    assert entered.wait(10)
    # When the builder thread would re-index it, Then it is refused
    with pytest.raises(StoreBusyError):
        store.optimize("old")
    go.set()
    t.join(10)
    # And the read got its points from an open shard
    assert "error" not in got, got.get("error")
    assert sorted(p.id for p in got["points"]) == sorted(ids)
    store.optimize("old")
    assert _config(store, "old")["hnsw_config"]["m"] == 0
    store.close()
