"""Contract of :class:`registry.protocols.ChunkReader` (SQLite and PostgreSQL)."""

from __future__ import annotations

from freshindex.core.enums import ChunkState
from freshindex.registry import Registry
from tests.registry.contract.helpers import add_source, stage


def test_changeset_ops_give_the_last_operation_per_chunk_in_changeset_order(reg: Registry, fresh) -> None:
    # Given a chunk added by one run and removed by the next, neither built yet
    kb = fresh("kb")
    source = add_source(reg, fresh("docs"), kb)
    run1, cs1 = reg.start_sync_run(source.id, "test")
    _doc, first = stage(reg, run1, cs1, source, "a.md", ["one"])
    reg.finish_sync_run(run1)
    run2, cs2 = reg.start_sync_run(source.id, "test")
    _doc, second = stage(reg, run2, cs2, source, "a.md", ["two"])
    reg.finish_sync_run(run2)
    # Then over both changesets the first version's chunk ends deleted and the second's upserted
    (old,), (new,) = first, second
    assert reg.staged_changesets(kb) == [cs1, cs2]
    assert reg.changeset_ops([cs2, cs1]) == {old: "delete", new: "upsert"}
    assert reg.changeset_chunk_ids([cs1, cs2]) == {old, new}


def test_a_removed_chunk_reads_tombstoned_at_once_and_unknown_ids_are_left_out(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    source = add_source(reg, fresh("docs"), kb)
    run, cs = reg.start_sync_run(source.id, "test")
    _doc, (old,) = stage(reg, run, cs, source, "a.md", ["one"])
    _doc, (new,) = stage(reg, run, cs, source, "a.md", ["two"])
    status = reg.chunk_status([old, new, "no-such-chunk"])
    assert set(status) == {old, new}
    assert status[old].tombstoned and not status[new].tombstoned
    assert reg.chunk_states([new]) == {new: ChunkState.PENDING}
    assert reg.tombstone_backlog(kb) == 1
    assert reg.count_live(kb) == 0 and reg.live_chunk_ids_for_kb(kb) == []


def test_chunk_rows_carry_what_a_point_needs(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    source = reg.add_source(fresh("docs"), kind="folder", location="/kb", owner="team", kb=kb, acl=["eng", "ops"])
    run, cs = reg.start_sync_run(source.id, "test")
    _doc, ids = stage(reg, run, cs, source, "guide.md", ["alpha", "beta"])
    rows = sorted(reg.chunk_rows(sorted(ids)), key=lambda r: r.ordinal)
    assert [(r.key, r.title, r.text, r.acl, r.kb) for r in rows] == [
        ("guide.md", "guide.md", "alpha", ("eng", "ops"), kb), ("guide.md", "guide.md", "beta", ("eng", "ops"), kb)]
    assert reg.chunk_hashes([rows[0].id]) == {rows[0].id: rows[0].content_hash}
