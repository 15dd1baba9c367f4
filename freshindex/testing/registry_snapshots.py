"""The registry contract's snapshot side: snapshot records, canaries and golden sets.

A "build" here is what the builder records (:func:`registry_base.build`): a
snapshot over the staged changesets, activated with their final operations;
no vector store is involved.  Checks, on whatever backend: activation leaves
exactly one active snapshot and records the alias move; a stale fencing
token changes nothing; a realign brings superseded chunks back but never a
final tombstone; a failed build keeps the serving snapshot; canaries and
golden sets are kept per knowledge base, a golden set is due once per served
snapshot and replacing it clears its result.

What it does not check: the builder's or the evaluator's decisions, the
vector store's alias, or archives (``tests/snapshots``).
"""

from __future__ import annotations

import pytest

from freshindex.core.enums import ChunkState, SnapshotStatus
from freshindex.core.errors import ConfigError, NotFoundError, RetryableError
from freshindex.registry import NewSnapshot, Registry
from freshindex.testing.registry_base import RegistrySuite, build, sync

GOLDEN = '{"question": "How do I install it?", "expected": "install.md"}\n'


def actives(reg: Registry, kb: str) -> list[str]:
    return [s.id for s in reg.list_snapshots(kb) if s.status == SnapshotStatus.ACTIVE]


def serve(reg: Registry, kb: str, version: int) -> str:
    """A snapshot of ``kb`` recorded as serving (no changeset: the registry side of a swap only)."""
    active = reg.active_snapshot(kb)
    snap = reg.create_snapshot(NewSnapshot(snapshot_id=f"{kb}-v{version}", kb=kb, version=version,
                                           parent_id=active.id if active else None, collection=f"{kb}__v{version}",
                                           strategy="full", embedding_model="m", parser_version="p",
                                           changeset_ids=[], upserts=0, deletes=0))
    reg.mark_verified(snap.id, point_count=0, verification={"ok": True}, seconds=0.1)
    reg.activate_snapshot(snap.id, ops={}, actor="test", reason="build")
    return snap.id


class SnapshotRecordsContract(RegistrySuite):
    """:class:`registry.protocols.SnapshotRecords`."""

    def test_activation_moves_exactly_one_active_snapshot_and_is_audited(self, reg: Registry) -> None:
        source = self.source(reg)
        kb = source.kb
        sync(reg, source, {"a.md": ["one"]})
        first, _ = build(reg, kb)
        sync(reg, source, {"a.md": ["one", "two"]})
        second, _ = build(reg, kb)
        assert actives(reg, kb) == [second.id]
        assert reg.get_snapshot(first.id).status == SnapshotStatus.RETIRED
        assert reg.active_snapshot(kb) == second
        assert [(e["from"], e["to"]) for e in reg.alias_events(kb)] == [(first.id, second.id), (None, first.id)]
        assert reg.staged_changesets(kb) == []
        assert reg.tombstone_backlog(kb) == 0

    def test_a_stale_fencing_token_changes_nothing(self, reg: Registry) -> None:
        source = self.source(reg)
        kb = source.kb
        sync(reg, source, {"a.md": ["one"]})
        first, _ = build(reg, kb)
        lock = self.fresh("build")
        old = reg.acquire_lock(lock, "a", ttl=-1.0)
        assert old is not None and reg.acquire_lock(lock, "b", ttl=60) is not None
        sync(reg, source, {"a.md": ["changed"]})
        with pytest.raises(RetryableError, match="lost the writer lock"):
            build(reg, kb, lock=(lock, old))
        assert actives(reg, kb) == [first.id]
        assert len(reg.staged_changesets(kb)) == 1

    def test_realign_brings_back_superseded_chunks_but_never_final_tombstones(self, reg: Registry) -> None:
        # Given v1 with documents a and b, then v2 where a was edited and b deleted at its source
        source = self.source(reg)
        kb = source.kb
        sync(reg, source, {"a.md": ["old a"], "b.md": ["b"]})
        v1, v1_ops = build(reg, kb)
        sync(reg, source, {"a.md": ["new a"]}, delete=("b.md",))
        v2, v2_ops = build(reg, kb)
        keys = {c: r.key for c, r in ((c, reg.chunk_rows([c])[0]) for c in v1_ops)}
        a_old = next(c for c, op in v2_ops.items() if op == "delete" and keys.get(c) == "a.md")
        b_chunk = next(c for c, k in keys.items() if k == "b.md")
        a_new = next(c for c, op in v2_ops.items() if op == "upsert")
        # When the registry is realigned to v1 (a rollback): v1's collection holds a_old and b, not a_new
        withheld = reg.realign_to_snapshot(
            v1.id, present={a_old, b_chunk}, touched={a_old, b_chunk, a_new},
            changesets_reverted=v2.changeset_ids, changesets_reapplied=(), actor="test", reason="rollback",
        )
        # Then v1 is the one active snapshot; the superseded text serves again; the deleted one never does
        assert actives(reg, kb) == [v1.id]
        status = reg.chunk_status([a_old, b_chunk, a_new])
        assert not status[a_old].tombstoned and status[a_old].state == ChunkState.LIVE
        assert withheld == 1 and status[b_chunk].tombstoned
        assert status[a_new].tombstoned and status[a_new].state == ChunkState.REMOVED
        # and the deleted chunk is staged for deletion by the next build
        assert reg.changeset_ops(reg.staged_changesets(kb)) == {b_chunk: "delete"}

    def test_a_failed_build_keeps_the_serving_snapshot(self, reg: Registry) -> None:
        source = self.source(reg)
        kb = source.kb
        sync(reg, source, {"a.md": ["one"]})
        first, _ = build(reg, kb)
        snap = reg.create_snapshot(NewSnapshot(
            snapshot_id=f"{kb}-broken", kb=kb, version=reg.next_snapshot_version(kb), parent_id=first.id,
            collection=f"{kb}__broken", strategy="full", embedding_model="m", parser_version="p", changeset_ids=[],
            upserts=0, deletes=0,
        ))
        assert [s.id for s in reg.abandoned_snapshots(kb)] == [snap.id]
        reg.fail_snapshot(snap.id, "canary missed", {"failed_check": "canary"})
        assert reg.get_snapshot(snap.id).status == SnapshotStatus.FAILED
        assert actives(reg, kb) == [first.id]
        assert reg.abandoned_snapshots(kb) == []

    def test_as_dict_is_the_listing_shape_and_the_full_manifest(self, reg: Registry) -> None:
        source = self.source(reg)
        sync(reg, source, {"a.md": ["one"]})
        snap, _ = build(reg, source.kb)
        listing = snap.as_dict()
        assert set(listing) == {"id", "kb", "version", "parent_id", "status", "strategy", "point_count",
                                "embedding_model", "upserts", "deletes", "created_at", "activated_at",
                                "failure_reason"}
        assert listing["status"] == "active" and isinstance(listing["created_at"], str)
        full = snap.as_dict(full=True)
        assert set(listing) < set(full)
        assert full["changeset_ids"] == list(snap.changeset_ids) and isinstance(full["activated_at"], str)

    def test_canaries_are_kept_per_knowledge_base(self, reg: Registry) -> None:
        kb = self.fresh("kb")
        c = reg.add_canary(kb, "how do I rotate keys?", "ops/keys.md", top_k=3)
        again = reg.add_canary(kb, "how do I rotate keys?", "ops/rotate.md")
        assert again.id == c.id and reg.list_canaries(kb)[0].expected_key == "ops/rotate.md"
        assert reg.list_canaries(self.fresh("other")) == []
        reg.remove_canary(c.id)
        assert reg.list_canaries(kb) == []


class GoldenSetContract(RegistrySuite):
    """Golden sets per knowledge base: register, replace, list, remove, due after a swap, results kept."""

    def test_a_set_is_due_once_per_served_snapshot(self, reg: Registry) -> None:
        kb = self.fresh("kb")
        # Given a set registered on a kb that serves nothing yet
        info = reg.register_golden_set(kb, "smoke", GOLDEN, thresholds={"min_hit": 0.5}, top_k=3)
        assert reg.due_golden_sets(kb) == []
        # When the kb serves v1, the set is due on v1
        v1 = serve(reg, kb, 1)
        assert [(i.name, sid) for i, sid in reg.due_golden_sets(kb)] == [("smoke", v1)]
        # And once its result on v1 is kept, it is not
        reg.record_golden_result(info.id, v1, passed=True, metrics={"hit_ratio": 1.0})
        assert reg.due_golden_sets(kb) == []
        kept = reg.list_golden_sets(kb)[0]
        assert (kept.last_snapshot_id, kept.last_passed, kept.last_metrics) == (v1, True, {"hit_ratio": 1.0})
        assert kept.thresholds == {"min_hit": 0.5} and kept.top_k == 3
        # Then the next swap makes it due again, on the new snapshot
        v2 = serve(reg, kb, 2)
        assert [sid for _, sid in reg.due_golden_sets(kb)] == [v2]
        assert [r for r in reg.golden_results() if r["kb"] == kb] == [
            {"kb": kb, "name": "smoke", "last_snapshot_id": v1, "last_run_at": kept.last_run_at.isoformat(),
             "last_passed": True, "last_metrics": {"hit_ratio": 1.0}}]

    def test_replacing_a_set_clears_its_result_and_an_unchanged_one_keeps_it(self, reg: Registry) -> None:
        kb = self.fresh("kb")
        v1 = serve(reg, kb, 1)
        info = reg.register_golden_set(kb, "smoke", GOLDEN)
        reg.record_golden_result(info.id, v1, passed=True, metrics={"hit_ratio": 1.0})
        # The same text again: still evaluated on v1
        reg.register_golden_set(kb, "smoke", GOLDEN)
        assert reg.due_golden_sets(kb) == []
        # A new gate: due again, its old result gone
        reg.register_golden_set(kb, "smoke", GOLDEN, thresholds={"min_hit": 0.9})
        (again, sid), = reg.due_golden_sets(kb)
        assert (again.id, sid, again.last_metrics, again.last_run_at) == (info.id, v1, None, None)
        assert len(reg.list_golden_sets(kb)) == 1

    def test_sets_are_per_kb_and_removed_by_name(self, reg: Registry) -> None:
        docs, hr = self.fresh("docs"), self.fresh("hr")
        reg.register_golden_set(docs, "smoke", GOLDEN)
        reg.register_golden_set(hr, "smoke", GOLDEN)
        mine = lambda: [(i.kb, i.name) for i in reg.list_golden_sets() if i.kb in (docs, hr)]  # noqa: E731
        assert mine() == [(docs, "smoke"), (hr, "smoke")]
        reg.remove_golden_set(docs, "smoke")
        assert mine() == [(hr, "smoke")]
        with pytest.raises(NotFoundError):
            reg.remove_golden_set(docs, "smoke")

    def test_a_bad_registration_is_refused(self, reg: Registry) -> None:
        kb = self.fresh("kb")
        for name, content, top_k in [("has space", GOLDEN, 5), ("", GOLDEN, 5), ("x" * 64, GOLDEN, 5),
                                     ("ok", "  \n", 5), ("ok", GOLDEN, 0), ("ok", GOLDEN, 51)]:
            with pytest.raises(ConfigError):
                reg.register_golden_set(kb, name, content, top_k=top_k)
        assert reg.list_golden_sets(kb) == []

    def test_a_result_for_a_removed_set_is_dropped(self, reg: Registry) -> None:
        kb = self.fresh("kb")
        info = reg.register_golden_set(kb, "smoke", GOLDEN)
        reg.remove_golden_set(kb, "smoke")
        reg.record_golden_result(info.id, f"{kb}-v1", passed=False, metrics=None, error="boom")
        assert reg.list_golden_sets(kb) == []


__all__ = ["GoldenSetContract", "SnapshotRecordsContract", "actives", "serve"]
