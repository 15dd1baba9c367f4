"""Contract of :class:`registry.protocols.SnapshotRecords` (SQLite and PostgreSQL).

A "build" here is what the builder records: a snapshot over the staged
changesets, activated with their final operations.  No vector store is
involved: these are the registry's records only.
"""

from __future__ import annotations

import pytest

from freshindex.core.enums import ChunkState, SnapshotStatus
from freshindex.core.errors import RetryableError
from freshindex.registry import NewSnapshot, Registry, SnapshotInfo
from freshindex.registry.records import SourceInfo
from tests.registry.contract.helpers import add_source, stage


def _build(reg: Registry, kb: str, *, lock: tuple[str, int] | None = None) -> tuple[SnapshotInfo, dict[str, str]]:
    changesets = reg.staged_changesets(kb)
    ops = reg.changeset_ops(changesets)
    version = reg.next_snapshot_version(kb)
    active = reg.active_snapshot(kb)
    snap = reg.create_snapshot(NewSnapshot(
        snapshot_id=f"{kb}-v{version}", kb=kb, version=version, parent_id=active.id if active else None,
        collection=f"{kb}__v{version}", strategy="incremental", embedding_model="m", parser_version="p",
        changeset_ids=changesets, upserts=sum(op == "upsert" for op in ops.values()),
        deletes=sum(op == "delete" for op in ops.values()),
    ))
    reg.mark_verified(snap.id, point_count=len(ops), verification={"ok": True}, seconds=0.1)
    reg.activate_snapshot(snap.id, ops=ops, actor="test", reason="build", lock=lock)
    return reg.get_snapshot(snap.id), ops


def _sync(reg: Registry, source: SourceInfo, docs: dict[str, list[str]], *, delete: tuple[str, ...] = ()) -> None:
    run, cs = reg.start_sync_run(source.id, "test")
    for key, texts in docs.items():
        stage(reg, run, cs, source, key, texts)
    for key in delete:
        reg.stage_deletion(run, cs, next(d.id for k, d in reg.documents_for_source(source.id).items() if k == key))
    reg.finish_sync_run(run)


def _actives(reg: Registry, kb: str) -> list[str]:
    return [s.id for s in reg.list_snapshots(kb) if s.status == SnapshotStatus.ACTIVE]


def test_activation_moves_exactly_one_active_snapshot_and_is_audited(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    source = add_source(reg, fresh("docs"), kb)
    _sync(reg, source, {"a.md": ["one"]})
    first, _ = _build(reg, kb)
    _sync(reg, source, {"a.md": ["one", "two"]})
    second, _ = _build(reg, kb)
    assert _actives(reg, kb) == [second.id]
    assert reg.get_snapshot(first.id).status == SnapshotStatus.RETIRED
    assert reg.active_snapshot(kb) == second
    assert [(e["from"], e["to"]) for e in reg.alias_events(kb)] == [(first.id, second.id), (None, first.id)]
    assert reg.staged_changesets(kb) == []
    assert reg.tombstone_backlog(kb) == 0


def test_a_stale_fencing_token_changes_nothing(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    source = add_source(reg, fresh("docs"), kb)
    _sync(reg, source, {"a.md": ["one"]})
    first, _ = _build(reg, kb)
    lock = fresh("build")
    old = reg.acquire_lock(lock, "a", ttl=-1.0)
    assert old is not None and reg.acquire_lock(lock, "b", ttl=60) is not None
    _sync(reg, source, {"a.md": ["changed"]})
    with pytest.raises(RetryableError, match="lost the writer lock"):
        _build(reg, kb, lock=(lock, old))
    assert _actives(reg, kb) == [first.id]
    assert len(reg.staged_changesets(kb)) == 1


def test_realign_brings_back_superseded_chunks_but_never_final_tombstones(reg: Registry, fresh) -> None:
    # Given v1 with documents a and b, then v2 where a was edited and b deleted at its source
    kb = fresh("kb")
    source = add_source(reg, fresh("docs"), kb)
    _sync(reg, source, {"a.md": ["old a"], "b.md": ["b"]})
    v1, v1_ops = _build(reg, kb)
    _sync(reg, source, {"a.md": ["new a"]}, delete=("b.md",))
    v2, v2_ops = _build(reg, kb)
    a_old = next(c for c, op in v2_ops.items() if op == "delete" and c in v1_ops and reg.chunk_rows([c])[0].key == "a.md")
    b_chunk = next(c for c in v1_ops if reg.chunk_rows([c])[0].key == "b.md")
    a_new = next(c for c, op in v2_ops.items() if op == "upsert")
    # When the registry is realigned to v1 (a rollback): v1's collection holds a_old and b, not a_new
    withheld = reg.realign_to_snapshot(
        v1.id, present={a_old, b_chunk}, touched={a_old, b_chunk, a_new},
        changesets_reverted=v2.changeset_ids, changesets_reapplied=(), actor="test", reason="rollback",
    )
    # Then v1 is the one active snapshot; the superseded text serves again; the deleted one never does
    assert _actives(reg, kb) == [v1.id]
    status = reg.chunk_status([a_old, b_chunk, a_new])
    assert not status[a_old].tombstoned and status[a_old].state == ChunkState.LIVE
    assert withheld == 1 and status[b_chunk].tombstoned
    assert status[a_new].tombstoned and status[a_new].state == ChunkState.REMOVED
    # and the deleted chunk is staged for deletion by the next build
    assert reg.changeset_ops(reg.staged_changesets(kb)) == {b_chunk: "delete"}


def test_a_failed_build_keeps_the_serving_snapshot(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    source = add_source(reg, fresh("docs"), kb)
    _sync(reg, source, {"a.md": ["one"]})
    first, _ = _build(reg, kb)
    snap = reg.create_snapshot(NewSnapshot(
        snapshot_id=f"{kb}-broken", kb=kb, version=reg.next_snapshot_version(kb), parent_id=first.id,
        collection=f"{kb}__broken", strategy="full", embedding_model="m", parser_version="p", changeset_ids=[],
        upserts=0, deletes=0,
    ))
    assert [s.id for s in reg.abandoned_snapshots(kb)] == [snap.id]
    reg.fail_snapshot(snap.id, "canary missed", {"failed_check": "canary"})
    assert reg.get_snapshot(snap.id).status == SnapshotStatus.FAILED
    assert _actives(reg, kb) == [first.id]
    assert reg.abandoned_snapshots(kb) == []


def test_canaries_are_kept_per_knowledge_base(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    c = reg.add_canary(kb, "how do I rotate keys?", "ops/keys.md", top_k=3)
    again = reg.add_canary(kb, "how do I rotate keys?", "ops/rotate.md")
    assert again.id == c.id and reg.list_canaries(kb)[0].expected_key == "ops/rotate.md"
    assert reg.list_canaries(fresh("other")) == []
    reg.remove_canary(c.id)
    assert reg.list_canaries(kb) == []


def test_as_dict_is_the_listing_shape_and_the_full_manifest(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    source = add_source(reg, fresh("docs"), kb)
    _sync(reg, source, {"a.md": ["one"]})
    snap, _ = _build(reg, kb)
    listing = snap.as_dict()
    assert set(listing) == {"id", "kb", "version", "parent_id", "status", "strategy", "point_count",
                            "embedding_model", "upserts", "deletes", "created_at", "activated_at", "failure_reason"}
    assert listing["status"] == "active" and isinstance(listing["created_at"], str)
    full = snap.as_dict(full=True)
    assert set(listing) < set(full)
    assert full["changeset_ids"] == list(snap.changeset_ids) and isinstance(full["activated_at"], str)
