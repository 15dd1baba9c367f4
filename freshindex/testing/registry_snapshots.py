"""The registry contract's snapshot side: snapshot records, canaries, golden sets, archives, repairs.

A "build" here is what the builder records (:func:`registry_base.build`): a
snapshot over the staged changesets, activated with their final operations;
no vector store is involved.  Checks, on whatever backend: activation leaves
exactly one active snapshot and records the alias move; a stale fencing
token changes nothing; a realign brings superseded chunks back but never a
final tombstone; a failed build keeps the serving snapshot; canaries and
golden sets are kept per knowledge base, a golden set is due once per served
snapshot and replacing it clears its result; an exported snapshot loads into a
fresh registry (a second database of the backend) and not into one that knows
its knowledge base; tombstones are collected only past the cut-off and once no
retained snapshot needs them; stranded pending chunks are found and re-staged.

What it does not check: the builder's or the evaluator's decisions, the
vector store's alias, or the archive files (``tests/snapshots``).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from freshindex.core.enums import ChangesetStatus, ChunkState, SnapshotStatus
from freshindex.core.errors import ConfigError, NotFoundError, RetryableError
from freshindex.registry import NewSnapshot, Registry
from freshindex.testing.registry_base import RegistrySuite, build, open_migrated, stage, sync

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
        assert kept.thresholds == {"min_hit": 0.5} and kept.top_k == 3 and kept.last_run_at is not None
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


class SnapshotArchiveContract(RegistrySuite):
    """:class:`registry.protocols.SnapshotArchive` and the tombstone collection retention allows."""

    def test_an_exported_snapshot_loads_into_a_fresh_registry_only(self, reg: Registry, tmp_path: Path) -> None:
        # Given a built snapshot of a kb with a canary
        source = self.source(reg)
        sync(reg, source, {"a.md": ["one", "two"]})
        snap, ops = build(reg, source.kb)
        reg.add_canary(source.kb, "what is one?", "a.md")
        # When it is exported (JSON-ready), as the current snapshot and as an older one
        data = json.loads(json.dumps(reg.export_snapshot(snap.id, sorted(ops), current=True)))
        assert [d["etag"] for d in data["documents"]] == ["e"]
        older = reg.export_snapshot(snap.id, sorted(ops), current=False)
        assert all("etag" not in d and "content_hash" not in d for d in older["documents"])
        # Then a registry that knows the kb refuses it, and a fresh one serves it once verified
        with pytest.raises(ConfigError, match="already has snapshots"):
            reg.import_snapshot(data)
        url = self.registry_url(tmp_path)
        try:
            with open_migrated(url) as other:
                info = other.import_snapshot(data)
                assert (info.id, info.status, info.kb) == (snap.id, SnapshotStatus.VERIFIED, source.kb)
                assert other.get_source(source.id).kb == source.kb
                assert other.chunk_states(sorted(ops)) == dict.fromkeys(ops, ChunkState.LIVE)
                assert [c.question for c in other.list_canaries(source.kb)] == ["what is one?"]
        finally:
            self.drop_url(url)

    def test_tombstones_go_past_the_cutoff_once_no_retained_snapshot_needs_them(self, reg: Registry) -> None:
        # Given v1, then v2 that applied the tombstone of v1's chunk (v1 retired: a rollback would need it)
        source = self.source(reg)
        kb = source.kb
        sync(reg, source, {"a.md": ["one"]})
        v1, _ = build(reg, kb)
        sync(reg, source, {"a.md": ["two"]})
        build(reg, kb)
        now = dt.datetime.now(dt.UTC)
        assert reg.collect_tombstones(kb, older_than=now + dt.timedelta(minutes=1)) == 0
        # When retention drops v1, Then a tombstone is collected only once it is older than the cutoff
        reg.set_snapshot_status(v1.id, SnapshotStatus.PRUNED)
        assert reg.collect_tombstones(kb, older_than=now - dt.timedelta(hours=1)) == 0
        assert reg.collect_tombstones(kb, older_than=now + dt.timedelta(minutes=1)) == 1
        assert reg.collect_tombstones(kb, older_than=now + dt.timedelta(minutes=1)) == 0


class StrandedRepairContract(RegistrySuite):
    """:class:`registry.protocols.StrandedRepair`: pending chunks no changeset will apply are found and re-staged."""

    def test_a_stranded_document_is_found_and_restaged_for_the_next_build(self, reg: Registry) -> None:
        from sqlalchemy import update

        from freshindex.registry.schema import Changeset

        # Given a document whose pending chunks sit in a changeset marked applied (a lost write)
        source = self.source(reg)
        run, cs = reg.start_sync_run(source.id, "test")
        doc, ids = stage(reg, run, cs, source, "a.md", ["one", "two"])
        reg.finish_sync_run(run)
        with reg.session() as s:
            s.execute(update(Changeset).where(Changeset.id == cs).values(status=ChangesetStatus.APPLIED))
        # Then it is found, per document, with its stranded chunks
        assert reg.stranded_documents(source.kb) == [
            {"document_id": doc, "source_id": source.id, "key": "a.md", "kb": source.kb, "chunks": sorted(ids)}]
        # When it is repaired, Then a new staged changeset upserts them and the document is re-read next sync
        repaired = reg.repair_stranded(source.kb)
        assert [r["document_id"] for r in repaired] == [doc]
        fix = repaired[0]["changeset_id"]
        assert reg.staged_changesets(source.kb) == [fix]
        assert reg.changeset_ops([fix]) == dict.fromkeys(ids, "upsert")
        assert reg.stranded_documents(source.kb) == [] and reg.repair_stranded(source.kb) == []
        record = reg.get_document(doc)
        assert record is not None and (record.etag, record.content_hash) == (None, None)


__all__ = ["GoldenSetContract", "SnapshotArchiveContract", "SnapshotRecordsContract", "StrandedRepairContract",
           "actives", "serve"]
