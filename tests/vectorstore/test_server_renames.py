"""Blue/green on the Qdrant client store without copies (``vector_store.server_renames``).

Each version name is an alias over a neutral physical collection, so a rename
is one alias update.  Run in ``qdrant-client`` local mode, and against a real
server when ``QDRANT_URL`` is set (skipped otherwise: no server runs here).

* the store: version names resolve for points, search, describe, optimise,
  export/import and clones; a rename moves no point; the knowledge base's
  alias points at the physical collection and reads back as a version name;
  dropping the last version name drops the physical collection; a collection
  made before the setting keeps working and can be renamed;
* the builder: the third build is ``bluegreen`` and writes only the change
  (no snapshot, recovery or point copy), the alias only ever points at a
  verified version, rollback is a swap, and a builder killed (SIGKILL) at any
  step leaves the alias on a verified version and a standby repaired by replay;
* the contract suite and the general blue/green builder tests on this store.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import models as qm

from freshindex.core.errors import NotFoundError, StoreError
from freshindex.core.naming import Naming
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.testing import VectorStoreContract
from freshindex.vectorstore import PointRecord, VectorStore, open_store
from freshindex.vectorstore.qdrant import QdrantStore
from freshindex.workers.runner import sync_inline

# The store-independent blue/green tests, collected again here with this module's
# ``build_strategy`` fixture (renames on, local mode); the contract suite is subclassed below.
from tests.snapshots.test_bluegreen import (  # noqa: F401
    _assert_exact,
    _kb,
    _write,
    stage_pending_change,
    test_a_full_rebuild_goes_beside_and_the_ring_copies_once_after_it,
    test_a_recycled_side_that_fails_verification_is_dropped_and_the_ring_refills,
    test_a_store_without_rename_builds_by_copy,
    test_rollback_to_the_standby_is_a_swap_and_the_next_build_replays_it_away,
    test_the_third_build_recycles_the_standby_and_replays_only_the_change,
)
from tests.snapshots.test_crash_and_concurrency import kill_builder_at

DIM = 4
LOCK_TTL = 2.0


def _server_url() -> str:
    url = os.environ.get("QDRANT_URL")
    if not url:
        pytest.skip("Qdrant server tests need QDRANT_URL (no Qdrant server can be installed here)")
    return url


@pytest.fixture(params=["local", "server"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "server":
        _server_url()
    return request.param


def _open(kind: str, path: Path, prefix: str) -> QdrantStore:
    if kind == "server":
        s = open_store("server", url=_server_url(), api_key=os.environ.get("QDRANT_API_KEY"), renames=True,
                       prefix=prefix)
    else:
        s = open_store("local", path=path, renames=True, prefix=prefix)
    assert isinstance(s, QdrantStore) and callable(s.rename_collection)
    return s


def _cleanup(s: QdrantStore, prefix: str) -> None:
    for a in list(s._aliases()):
        if a.startswith(prefix):
            s.client.update_collection_aliases(change_aliases_operations=[
                qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=a))])
    for c in s._physicals():
        if c.startswith(prefix):
            s.client.delete_collection(c)


@pytest.fixture
def rs(kind: str, tmp_path: Path) -> Iterator[QdrantStore]:
    """A renaming store with a prefix of its own (a shared server keeps other tests' collections)."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    s = _open(kind, tmp_path / "q", prefix)
    s.test_prefix = prefix  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        _cleanup(s, prefix)
        s.close()


class TestRenamingStoreContract(VectorStoreContract):
    """The vector store contract on the renaming store, in local mode (plain, not version, names)."""

    def make_store(self, tmp_path: Path, prefix: str) -> QdrantStore:
        return _open("local", tmp_path / "q", prefix)

    def drop_leftovers(self, store: VectorStore, prefix: str) -> None:
        assert isinstance(store, QdrantStore)
        _cleanup(store, prefix)


class TestRenamingServerStoreContract(TestRenamingStoreContract):
    """The same on a Qdrant server (QDRANT_URL; skipped without it)."""

    def make_store(self, tmp_path: Path, prefix: str) -> QdrantStore:
        return _open("server", tmp_path / "q", prefix)


def _points(n: int, start: int = 0) -> list[PointRecord]:
    out = []
    for i in range(start, start + n):
        v = [1.0, float(i % 7), float(i % 3), 0.5]
        out.append(PointRecord(id=str(uuid.UUID(int=i + 1)), vector=v, payload={"n": i, "kb": "kb"},
                               lexical=f"word{i} common"))
    return out


def _v(rs: QdrantStore, version: int) -> str:
    return rs.naming.collection(rs.naming.snapshot_id("kb", version))


# -- the store ---------------------------------------------------------------------


def test_version_names_are_aliases_over_hidden_neutral_collections(rs: QdrantStore) -> None:
    v1 = _v(rs, 1)
    rs.create_collection(v1, DIM)
    rs.upsert(v1, _points(10))
    aliases, physicals = rs._aliases(), rs._physicals()
    physical = aliases[v1]
    assert physical in physicals and physical != v1 and physical.startswith(rs.naming.alias("kb") + "--p")
    assert rs.list_collections() == [v1]  # not the physical collection
    assert rs.count(v1) == 10
    assert rs.retrieve(v1, [_points(1)[0].id])[0].payload["n"] == 0
    hits = rs.search(v1, [1.0, 0.0, 0.0, 0.5], limit=3, text="word0")
    assert hits and hits[0].id == _points(1)[0].id
    assert rs.optimize(v1) in (True, False)
    with pytest.raises(StoreError, match="already exists"):
        rs.create_collection(v1, DIM)


def test_a_rename_is_one_alias_update_and_moves_no_point(rs: QdrantStore) -> None:
    v1, v3 = _v(rs, 1), _v(rs, 3)
    rs.create_collection(v1, DIM)
    rs.upsert(v1, _points(20))
    physical = rs._aliases()[v1]
    calls: list[Any] = []
    real = rs.client.update_collection_aliases
    rs.client.update_collection_aliases = lambda **kw: (calls.append(kw), real(**kw))[1]  # type: ignore[method-assign]
    writes = []
    for fn in ("upsert", "create_collection", "create_snapshot", "recover_snapshot", "delete_collection"):
        orig = getattr(rs.client, fn)
        setattr(rs.client, fn, lambda *a, _f=fn, _o=orig, **kw: (writes.append(_f), _o(*a, **kw))[1])
    try:
        rs.rename_collection(v1, v3)  # type: ignore[misc]
    finally:
        for fn in ("update_collection_aliases", "upsert", "create_collection", "create_snapshot",
                   "recover_snapshot", "delete_collection"):
            rs.client.__dict__.pop(fn, None)
    assert len(calls) == 1 and not writes
    assert rs._aliases().get(v3) == physical and v1 not in rs._aliases()
    assert rs.list_collections() == [v3] and rs.count(v3) == 20
    with pytest.raises(NotFoundError):
        rs.count(v1)
    with pytest.raises(StoreError, match="already exists"):
        rs.create_collection(v3, DIM)
    rs.create_collection(v1, DIM)  # (the builder never reuses a name; the store does not forbid it)
    with pytest.raises(StoreError, match="already exists"):
        rs.rename_collection(v3, v1)  # type: ignore[misc]
    with pytest.raises(NotFoundError):
        rs.rename_collection(_v(rs, 8), _v(rs, 9))  # type: ignore[misc]


def test_the_kb_alias_points_at_the_physical_collection_and_reads_as_the_version(rs: QdrantStore) -> None:
    v1, v2, v3 = _v(rs, 1), _v(rs, 2), _v(rs, 3)
    kb_alias = rs.naming.alias("kb")
    for v in (v1, v2):
        rs.create_collection(v, DIM)
        rs.upsert(v, _points(5 if v == v1 else 6))
    assert rs.swap_alias(kb_alias, v1) is None
    assert rs._aliases()[kb_alias] == rs._aliases()[v1]  # directly at the physical: no alias of an alias
    assert rs.get_alias(kb_alias) == v1 and rs.count(kb_alias) == 5
    assert rs.swap_alias(kb_alias, v2) == v1 and rs.get_alias(kb_alias) == v2
    assert rs.list_collections() == [v1, v2]  # the knowledge base's alias is not a collection
    # Renaming the standby leaves the serving alias alone; renaming the served one follows it.
    rs.rename_collection(v1, v3)  # type: ignore[misc]
    assert rs.get_alias(kb_alias) == v2 and rs.count(kb_alias) == 6
    assert rs.swap_alias(kb_alias, v3) == v2 and rs.get_alias(kb_alias) == v3 and rs.count(kb_alias) == 5
    with pytest.raises(NotFoundError):
        rs.swap_alias(kb_alias, v1)
    assert rs.get_alias(kb_alias) == v3


def test_dropping_the_last_version_name_drops_the_physical_collection(rs: QdrantStore) -> None:
    v1, v2 = _v(rs, 1), _v(rs, 2)
    rs.create_collection(v1, DIM)
    rs.create_collection(v2, DIM, clone_from=v1)
    p1, p2 = rs._aliases()[v1], rs._aliases()[v2]
    assert p1 != p2
    rs.drop_collection(v1)
    assert v1 not in rs._aliases() and p1 not in rs._physicals() and p2 in rs._physicals()
    rs.drop_collection(v1)  # twice: harmless
    rs.drop_collection(p2)  # a physical collection a version names is not dropped by its own name
    assert rs.list_collections() == [v2]
    rs.drop_collection(v2)
    assert rs.list_collections() == [] and not [p for p in rs._physicals() if p.startswith(rs.test_prefix)]


def test_clone_export_and_import_resolve_version_names(rs: QdrantStore, tmp_path: Path) -> None:
    v1, v2, v5 = _v(rs, 1), _v(rs, 2), _v(rs, 5)
    rs.create_collection(v1, DIM)
    rs.upsert(v1, _points(12))
    rs.create_collection(v2, DIM, clone_from=v1)
    rs.delete(v2, [_points(1)[0].id])
    assert (rs.count(v1), rs.count(v2)) == (12, 11)
    with pytest.raises(NotFoundError):
        rs.create_collection(_v(rs, 3), DIM, clone_from=_v(rs, 9))
    assert _v(rs, 3) not in rs.list_collections()
    rs.export_collection(v2, tmp_path / "v2.bin")
    rs.import_collection(v5, tmp_path / "v2.bin")
    assert rs.count(v5) == 11 and v5 in rs.list_collections() and rs._aliases()[v5] != rs._aliases()[v2]
    assert {p.id for p in rs.retrieve(v5, [p.id for p in _points(12)])} == {p.id for p in _points(11, 1)}
    assert rs.search(v5, [1.0, 1.0, 1.0, 0.5], limit=2, text="word3")


def test_a_collection_made_before_the_setting_keeps_working_and_can_be_renamed(kind: str, tmp_path: Path) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    path = tmp_path / "q"
    naming = Naming(prefix)
    old_name, new_name = naming.collection("kb-v1"), naming.collection("kb-v3")
    plain = (open_store("server", url=_server_url(), api_key=os.environ.get("QDRANT_API_KEY"))
             if kind == "server" else open_store("local", path=path))
    plain.create_collection(old_name, DIM)
    plain.upsert(old_name, _points(7))
    plain.swap_alias(naming.alias("kb"), old_name)
    plain.close()
    rs = _open(kind, path, prefix)
    try:
        assert rs.list_collections() == [old_name] and rs.get_alias(naming.alias("kb")) == old_name
        assert rs.count(old_name) == 7
        rs.rename_collection(old_name, new_name)  # type: ignore[misc]
        assert rs.list_collections() == [new_name] and rs.count(new_name) == 7
        assert rs.get_alias(naming.alias("kb")) == new_name  # the physical collection goes by its version name
        rs.drop_collection(old_name)  # no longer a name of it: nothing happens
        assert rs.count(new_name) == 7
        rs.drop_collection(new_name)
        assert old_name not in rs._physicals() and rs.list_collections() == []
    finally:
        _cleanup(rs, prefix)
        rs.close()


def test_an_unnamed_physical_collection_is_hidden_and_dropped_by_the_next_creation(rs: QdrantStore) -> None:
    orphan = f"{rs.naming.alias('kb')}--p{'0' * 12}"  # a process died between creating and naming it
    rs.client.create_collection(orphan, vectors_config={"dense": qm.VectorParams(size=DIM,
                                                                                 distance=qm.Distance.COSINE)})
    assert orphan not in rs.list_collections()
    rs.create_collection(_v(rs, 1), DIM)
    assert orphan not in rs._physicals() and rs.list_collections() == [_v(rs, 1)]


# -- the builder -------------------------------------------------------------------


@pytest.fixture
def build_strategy(_clean_env: None, monkeypatch: pytest.MonkeyPatch) -> str:
    """Blue/green, a ring of two, renames on, in local mode (the imported builder tests name ``fi_`` collections)."""
    for key, value in {"FRESHINDEX_SNAPSHOTS__STRATEGY": "bluegreen", "FRESHINDEX_SNAPSHOTS__READER_GRACE": "0",
                       "FRESHINDEX_SNAPSHOTS__KEEP_VERSIONS": "2", "FRESHINDEX_EMBEDDING__PROVIDER": "hashing",
                       "FRESHINDEX_SNAPSHOTS__LOCK_TTL": str(LOCK_TTL), "FRESHINDEX_VECTOR_STORE__KIND": "local",
                       "FRESHINDEX_VECTOR_STORE__SERVER_RENAMES": "true"}.items():
        monkeypatch.setenv(key, value)
    return "bluegreen"


@pytest.fixture(autouse=True)
def _bluegreen_env(request: pytest.FixtureRequest) -> None:
    """The builder tests (imported ones included) run under ``build_strategy``; the store tests do not need it."""
    if "rs" not in request.fixturenames and "store" not in request.fixturenames \
            and "kind" not in request.fixturenames:
        request.getfixturevalue("build_strategy")


def _env_for(kind: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The vector store settings of a builder test; returns the collection prefix."""
    monkeypatch.setenv("FRESHINDEX_VECTOR_STORE__KIND", kind)
    monkeypatch.setenv("FRESHINDEX_VECTOR_STORE__SERVER_RENAMES", "true")
    if kind == "server":
        prefix = f"t{uuid.uuid4().hex[:8]}_"
        monkeypatch.setenv("FRESHINDEX_VECTOR_STORE__URL", _server_url())
        monkeypatch.setenv("FRESHINDEX_VECTOR_STORE__COLLECTION_PREFIX", prefix)
        return prefix
    return "fi_"


def _svc(tmp_path: Path) -> Services:
    return Services(load_settings(data_dir=tmp_path / "data"))


class _Watch:
    """Counts what the builder writes through the store, and checks the alias whenever it moves."""

    def __init__(self, svc: Services) -> None:
        self.svc, self.store = svc, svc.store
        self.upserted = 0
        self.copies: list[str] = []
        self.swapped_to: list[str] = []
        store: Any = self.store
        upsert, swap = store.upsert, store.swap_alias
        store.upsert = lambda name, points: (self._count(points), upsert(name, points))[1]
        store.swap_alias = lambda alias, collection: self._swap(swap, alias, collection)
        for fn in ("_copy_points", "_recover_copy", "_clone_on_server"):
            orig = getattr(store, fn)
            setattr(store, fn, lambda *a, _f=fn, _o=orig: (self.copies.append(_f), _o(*a))[1])

    def _count(self, points: Any) -> None:
        self.upserted += len(points)

    def _swap(self, swap: Any, alias: str, collection: str) -> Any:
        snap = self.svc.registry.get_snapshot(self.svc.naming.snapshot_of(collection) or "")
        assert snap.status in ("verified", "active", "retired"), (collection, snap.status)
        previous = swap(alias, collection)
        self.swapped_to.append(collection)
        return previous

    def serving_is_verified(self, kb: str = "kb1") -> None:
        serving = self.store.get_alias(self.svc.naming.alias(kb))
        if serving is None:
            return
        snap = self.svc.registry.get_snapshot(self.svc.naming.snapshot_of(serving) or "")
        assert snap.status in ("verified", "active", "retired"), (serving, snap.status)
        assert snap.point_count == self.store.count(serving)


def _physicals_of(svc: Services) -> list[str]:
    return sorted(p for p in svc.store._physicals() if p.startswith(svc.naming.alias("kb1") + "--p"))  # type: ignore[attr-defined]


def _cleanup_svc(svc: Services, prefix: str) -> None:
    if svc.settings.vector_store.kind == "server":
        _cleanup(svc.store, prefix)  # type: ignore[arg-type]
    svc.close()


def test_the_third_build_renames_the_standby_and_writes_only_the_change(kind: str, tmp_path: Path,
                                                                        build_strategy: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = _env_for(kind, monkeypatch)
    svc = _svc(tmp_path)
    try:
        src = _kb(svc, tmp_path)
        watch = _Watch(svc)
        svc.builder.on_phase = lambda _phase: watch.serving_is_verified()
        assert sync_inline(svc, "s").snapshot.strategy == "full"
        _write(src, range(0, 2), 1)
        assert sync_inline(svc, "s").snapshot.strategy == "incremental"  # the ring is not full yet: a copy
        assert len(watch.copies) == 1 and len(_physicals_of(svc)) == 2
        physicals, watch.upserted, watch.copies = _physicals_of(svc), 0, []
        v1_physical = svc.store._aliases()[svc.naming.collection("kb1-v1")]  # type: ignore[attr-defined]
        _write(src, range(2, 4), 2)
        (src / "doc29.md").unlink()
        third = sync_inline(svc, "s").snapshot
        snap = svc.registry.get_snapshot(third.id)
        assert snap.strategy == "bluegreen" and snap.verification["side"]["base"] == "kb1-v1"
        # No copy, no new physical collection: v1's physical collection now goes by v3's name.
        assert watch.copies == [] and _physicals_of(svc) == physicals
        assert svc.store._aliases()[snap.collection] == v1_physical  # type: ignore[attr-defined]
        assert svc.store.list_collections() == sorted([svc.naming.collection("kb1-v2"), snap.collection])
        # Written: the change (2 documents of 2 chunks) and v2's change replayed (2 documents), not 60 chunks.
        assert 0 < watch.upserted <= 8 < snap.point_count
        assert 0 < snap.verification["replayed"] <= 12
        assert svc.store.get_alias(svc.naming.alias("kb1")) == snap.collection
        assert svc.store._aliases()[svc.naming.alias("kb1")] == v1_physical  # type: ignore[attr-defined]
        _assert_exact(svc, third.id)
        assert watch.swapped_to == [svc.naming.collection(f"kb1-v{i}") for i in (1, 2, 3)]
        # Rollback is a swap to the standby; the next build replays it away on the recycled side.
        result = svc.snapshots.rollback("kb1", actor="t", reason="bad release")
        assert result["snapshot_id"] == "kb1-v2"
        assert svc.store.get_alias(svc.naming.alias("kb1")) == svc.naming.collection("kb1-v2")
        watch.upserted = 0
        again = svc.registry.get_snapshot(sync_inline(svc, "s").snapshot.id)
        assert again.strategy == "bluegreen" and again.parent_id == "kb1-v2"
        assert again.verification["side"]["base"] == "kb1-v3" and watch.copies == []
        assert watch.upserted <= 12 < again.point_count and _physicals_of(svc) == physicals
        _assert_exact(svc, again.id)
        watch.serving_is_verified()
    finally:
        _cleanup_svc(svc, prefix)


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["recycling", "recycled", "written", "verifying", "swapped"])
def test_a_builder_killed_at_any_step_leaves_the_alias_on_a_verified_version(
        phase: str, kind: str, tmp_path: Path, build_strategy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = _env_for(kind, monkeypatch)
    env = {k: v for k, v in os.environ.items() if k.startswith("FRESHINDEX_")}
    env["FRESHINDEX_DATA_DIR"] = str(tmp_path / "data")
    svc = _svc(tmp_path)
    try:
        stage_pending_change(svc, tmp_path)
        physicals = _physicals_of(svc)
    finally:
        svc.close()  # local mode admits one client per folder: the builder's process opens it

    killed_at = kill_builder_at(phase, env, tmp_path)

    svc = _svc(tmp_path)
    try:
        naming = svc.naming
        serving = svc.store.get_alias(naming.alias("kb1"))
        assert serving == naming.collection("kb1-v3" if phase == "swapped" else "kb1-v2")
        snap = svc.registry.get_snapshot(naming.snapshot_of(serving) or "")
        assert snap.status in ("active", "verified") and svc.store.count(serving) == snap.point_count
        time.sleep(max(0.0, LOCK_TTL + 0.2 - (time.monotonic() - killed_at)))
        watch = _Watch(svc)
        svc.builder.on_phase = lambda _phase: watch.serving_is_verified()
        result = svc.builder.build("kb1")
        if phase == "swapped":
            assert result.status == "unchanged" and svc.registry.get_snapshot("kb1-v3").status == "active"
            _assert_exact(svc, "kb1-v3")
            return
        dead = svc.registry.get_snapshot("kb1-v3")
        assert dead.status == "failed" and dead.verification["side"]["base"] == "kb1-v1"
        # Repaired by replay on the dead builder's side: no copy, no full rebuild, no new physical collection.
        assert result.status == "built" and result.snapshot_id == "kb1-v4" and result.strategy == "bluegreen"
        assert watch.copies == [] and _physicals_of(svc) == physicals
        assert watch.upserted < result.point_count
        assert svc.store.list_collections() == sorted(naming.collection(f"kb1-v{i}") for i in (2, 4))
        assert svc.store.get_alias(naming.alias("kb1")) == naming.collection("kb1-v4")
        _assert_exact(svc, "kb1-v4")
    finally:
        _cleanup_svc(svc, prefix)


def test_the_imported_builder_tests_run_on_the_renaming_local_store(tmp_path: Path) -> None:
    svc = _svc(tmp_path)
    try:
        assert isinstance(svc.store, QdrantStore) and svc.store.local and svc.store.renames
        assert svc.builder.strategy == "bluegreen" and svc.builder.keep_versions == 2
    finally:
        svc.close()
