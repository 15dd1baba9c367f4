"""The registry contract's document side: staging, chunk reads, the vector cache, document ACLs, twins and mirrors.

Checks, on whatever backend: staging a redelivered document again is
idempotent and a document's later outcome in a run replaces its earlier
one; a removed chunk is tombstoned before any build, and ``changeset_ops``
gives the last operation per chunk in changeset order; chunk rows carry what
a point needs; the vector cache gives back the exact float32 values per
model; a document's ACL version only grows, and only when its fingerprint
changes, staging a re-tag; a copy of indexed content under the same
permissions (and document line) finds its canonical twin, is staged as its
mirror with no chunks of its own (fenced like any staging write), is named
by the canonical document, and is re-homed when the canonical one changes;
two canonical copies indexed at once are merged into one.

What it does not check: the builder or the pipeline that call these (their
own tests), or the vector store.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from freshindex.acl.model import DocumentAcl
from freshindex.core.enums import ChangesetStatus, ChunkState, DocumentOutcomeKind
from freshindex.core.errors import StaleTaskError
from freshindex.core.ids import document_id, sha256_hex
from freshindex.registry import Registry
from freshindex.registry.records import MirroredDocument, SourceInfo, SourceSetup
from freshindex.testing.registry_base import RegistrySuite, add_source, make_live, stage


class StagingContract(RegistrySuite):
    """:class:`registry.protocols.DocumentStaging` and :class:`~registry.protocols.ChunkReader`."""

    def test_staging_twice_is_idempotent_and_the_changeset_holds_one_entry_per_chunk(self, reg: Registry) -> None:
        source = self.source(reg)
        run, cs = reg.start_sync_run(source.id, "test")
        doc, ids = stage(reg, run, cs, source, "a.md", ["one", "two"])
        # A redelivered task repeats the same write: no duplicate entries or rows
        stage(reg, run, cs, source, "a.md", ["one", "two"])
        assert reg.live_chunk_ids(doc) == ids
        assert reg.changeset_ops([cs]) == {i: "upsert" for i in ids}
        reg.set_run_planned(run, listed=1, planned=1)
        assert reg.run_progress(run) == (1, 1)

    def test_a_documents_later_outcome_in_a_run_replaces_its_earlier_one(self, reg: Registry) -> None:
        # Given a document staged as added in a run
        source = self.source(reg)
        run, cs = reg.start_sync_run(source.id, "test")
        doc, _ = stage(reg, run, cs, source, "a.md", ["one", "two"])
        # When a redelivered task of the same run finds it unchanged
        reg.touch_document(run, doc, etag="e2", size=1, seconds=0.5)
        # Then the run counts one outcome for it, the later one
        info, _ = reg.finish_sync_run(run)
        assert info.summary["documents"]["unchanged"] == 1 and info.summary["documents"]["added"] == 0
        assert info.summary["chunks_added"] == 0

    def test_changeset_ops_give_the_last_operation_per_chunk_in_changeset_order(self, reg: Registry) -> None:
        # Given a chunk added by one run and removed by the next, neither built yet
        source = self.source(reg)
        run1, cs1 = reg.start_sync_run(source.id, "test")
        _doc, first = stage(reg, run1, cs1, source, "a.md", ["one"])
        reg.finish_sync_run(run1)
        run2, cs2 = reg.start_sync_run(source.id, "test")
        _doc, second = stage(reg, run2, cs2, source, "a.md", ["two"])
        reg.finish_sync_run(run2)
        # Then over both changesets the first version's chunk ends deleted and the second's upserted
        (old,), (new,) = first, second
        assert reg.staged_changesets(source.kb) == [cs1, cs2]
        assert reg.changeset_ops([cs2, cs1]) == {old: "delete", new: "upsert"}
        assert reg.changeset_chunk_ids([cs1, cs2]) == {old, new}

    def test_a_removed_chunk_reads_tombstoned_at_once_and_unknown_ids_are_left_out(self, reg: Registry) -> None:
        source = self.source(reg)
        kb = source.kb
        run, cs = reg.start_sync_run(source.id, "test")
        _doc, (old,) = stage(reg, run, cs, source, "a.md", ["one"])
        _doc, (new,) = stage(reg, run, cs, source, "a.md", ["two"])
        status = reg.chunk_status([old, new, "no-such-chunk"])
        assert set(status) == {old, new}
        assert status[old].tombstoned and not status[new].tombstoned
        assert reg.chunk_states([new]) == {new: ChunkState.PENDING}
        assert reg.tombstone_backlog(kb) == 1
        assert reg.count_live(kb) == 0 and reg.live_chunk_ids_for_kb(kb) == []

    def test_chunk_rows_carry_what_a_point_needs(self, reg: Registry) -> None:
        kb = self.fresh("kb")
        source = reg.add_source(self.fresh("docs"), kind="folder", location="/kb", owner="team", kb=kb,
                                setup=SourceSetup(acl=["eng", "ops"]))
        run, cs = reg.start_sync_run(source.id, "test")
        _doc, ids = stage(reg, run, cs, source, "guide.md", ["alpha", "beta"])
        rows = sorted(reg.chunk_rows(sorted(ids)), key=lambda r: r.ordinal)
        assert [(r.key, r.title, r.text, r.acl, r.kb) for r in rows] == [
            ("guide.md", "guide.md", "alpha", ("eng", "ops"), kb), ("guide.md", "guide.md", "beta", ("eng", "ops"), kb)]
        assert reg.chunk_hashes([rows[0].id]) == {rows[0].id: rows[0].content_hash}


class VectorCacheContract(RegistrySuite):
    """:class:`registry.protocols.VectorCache`."""

    def test_a_cached_vector_reads_back_as_the_exact_float32_values(self, reg: Registry) -> None:
        # Given vectors whose float32 values have no short decimal form
        model = self.fresh("model")
        rng = np.random.default_rng(7)
        vectors = {f"h{i}": rng.standard_normal(384).astype(np.float32) for i in range(3)}
        # When they are cached and read back, Then every bit is the same and the dtype is float32
        reg.cache_vectors(model, vectors)
        found = reg.cached_vectors(model, list(vectors))
        assert set(found) == set(vectors)
        for h, v in vectors.items():
            assert found[h].dtype == np.float32
            assert np.array_equal(found[h], v)

    def test_two_model_ids_never_share_an_entry(self, reg: Registry) -> None:
        a, b = self.fresh("model-a"), self.fresh("model-b")
        reg.cache_vectors(a, {"same-hash": np.ones(4, np.float32)})
        assert reg.cached_vectors(b, ["same-hash"]) == {}
        reg.cache_vectors(b, {"same-hash": np.zeros(4, np.float32)})
        assert np.array_equal(reg.cached_vectors(a, ["same-hash"])["same-hash"], np.ones(4, np.float32))
        assert np.array_equal(reg.cached_vectors(b, ["same-hash"])["same-hash"], np.zeros(4, np.float32))

    def test_caching_a_hash_again_is_a_no_op_that_keeps_the_first_vector(self, reg: Registry) -> None:
        model = self.fresh("model")
        reg.cache_vectors(model, {"h": np.full(8, 0.5, np.float32)})
        reg.cache_vectors(model, {"h": np.full(8, 0.25, np.float32), "h2": np.full(8, 1.0, np.float32)})
        found = reg.cached_vectors(model, ["h", "h2"])
        assert np.array_equal(found["h"], np.full(8, 0.5, np.float32))
        assert np.array_equal(found["h2"], np.full(8, 1.0, np.float32))

    def test_unknown_hashes_are_left_out_and_lookups_span_many_batches(self, reg: Registry) -> None:
        # More hashes than one IN (...) clause holds (500): the batching must not drop any
        model = self.fresh("model")
        vectors = {f"h{i:05d}": np.full(2, i, np.float32) for i in range(1_200)}
        reg.cache_vectors(model, vectors)
        found = reg.cached_vectors(model, [*vectors, "missing", "h00001"])
        assert set(found) == set(vectors)
        assert found["h01199"][0] == 1199.0


class DocumentAclContract(RegistrySuite):
    """Document ACLs and their versions: ``max(old + 1, source.acl_version)``, only when the fingerprint changes."""

    def live_document(self, reg: Registry, texts: list[str]) -> tuple[SourceInfo, int, str, set[str]]:
        source = self.source(reg)
        run, cs = reg.start_sync_run(source.id, "test")
        doc, ids = stage(reg, run, cs, source, "a.md", texts)
        reg.finish_sync_run(run)
        make_live(reg, ids)
        return source, run, doc, ids

    def test_a_never_resolved_document_reads_its_sources_acl(self, reg: Registry) -> None:
        source = reg.add_source(self.fresh("docs"), kind="folder", location="/kb", owner="t", kb=self.fresh("kb"),
                                setup=SourceSetup(acl=["hr", "eng"], tenant="acme", sensitivity="confidential"))
        assert (source.tenant, source.sensitivity, source.acl_version) == ("acme", "confidential", 1)
        run, cs = reg.start_sync_run(source.id, "test")
        doc, ids = stage(reg, run, cs, source, "a.md", ["one", "two"])
        status = reg.chunk_status(sorted(ids))
        assert {tuple(sorted(s.acl)) for s in status.values()} == {("eng", "hr")}
        assert {(s.document_id, s.source_id, s.acl_version) for s in status.values()} == {(doc, source.id, 0)}
        row = reg.chunk_rows(sorted(ids))[0]
        assert sorted(row.acl) == ["eng", "hr"] and row.acl_version == 0

    def test_acl_versions_grow_only_when_the_fingerprint_changes_and_stage_a_retag(self, reg: Registry) -> None:
        from sqlalchemy import select

        from freshindex.registry.schema import Changeset

        source, _run, doc, ids = self.live_document(reg, ["one", "two"])
        applied = reg.apply_document_acls(source.id, {doc: DocumentAcl(("staff",), "default", "internal", "source")})
        assert applied.bumped == (doc,) and applied.retagged_chunks == 2 and applied.changeset_id is not None
        assert reg.changeset_ops([applied.changeset_id]) == {i: "upsert" for i in ids}
        with reg.session() as s:
            assert s.scalar(select(Changeset.status).where(Changeset.id == applied.changeset_id)) == \
                ChangesetStatus.STAGED
        assert {(s.acl, s.acl_version) for s in reg.chunk_status(sorted(ids)).values()} == {(("staff",), 1)}
        again = reg.apply_document_acls(source.id, {doc: DocumentAcl(("staff",), origin="rule")})  # same fingerprint
        assert again.bumped == () and again.changeset_id is None
        # The source's version is the floor: a document catches up with it, never goes below
        updated, changed = reg.update_source_acl(source.id, acl=["ops"], tenant="acme")
        assert updated.acl_version == 2 and set(changed) == {"acl", "tenant"}
        same, nothing = reg.update_source_acl(source.id, acl=["ops"])
        assert nothing == {} and same.acl_version == 2
        for _ in range(3):
            reg.update_source_acl(source.id, sensitivity="restricted")
            reg.update_source_acl(source.id, sensitivity="internal")
        assert reg.get_source(source.id).acl_version == 8
        reg.apply_document_acls(source.id, {doc: DocumentAcl(("ops",), "acme", "restricted")})
        assert {(s.acl, s.tenant, s.sensitivity, s.acl_version) for s in reg.chunk_status(sorted(ids)).values()} == \
            {(("ops",), "acme", "restricted", 8)}
        reg.apply_document_acls(source.id, {doc: DocumentAcl(("ops", "user:ana"), "acme", "restricted")})
        assert {s.acl_version for s in reg.chunk_status(sorted(ids)).values()} == {9}

    def test_a_withheld_document_is_denied_until_resolved_again(self, reg: Registry) -> None:
        source, _run, doc, ids = self.live_document(reg, ["one"])
        reg.apply_document_acls(source.id, {doc: DocumentAcl(("eng",), origin="sidecar")})
        applied = reg.apply_document_acls(source.id, {}, withhold=[doc])
        assert applied.withheld == (doc,) and applied.bumped == ()
        assert {s.acl_version for s in reg.chunk_status(sorted(ids)).values()} == {2}
        assert reg.document_acls(source.id)["a.md"]["fingerprint"] is None
        # The next resolution, even to the same ACL, moves the version and re-tags
        again = reg.apply_document_acls(source.id, {doc: DocumentAcl(("eng",), origin="sidecar")})
        assert again.bumped == (doc,) and again.retagged_chunks == 1
        assert {s.acl_version for s in reg.chunk_status(sorted(ids)).values()} == {3}

    def test_a_sync_stages_a_resolved_acl_with_the_document(self, reg: Registry) -> None:
        source = self.source(reg)
        run, cs = reg.start_sync_run(source.id, "test")
        doc, ids = stage(reg, run, cs, source, "a.md", ["one"])
        applied = reg.apply_document_acls(source.id, {doc: DocumentAcl(("hr",))}, run_id=run, changeset_id=cs)
        assert applied.bumped == (doc,) and applied.retagged_chunks == 0  # pending chunks are written by the build
        assert applied.changeset_id == cs
        assert reg.chunk_rows(sorted(ids))[0].acl == ("hr",)

    def test_denials_are_recorded_and_read_back_by_knowledge_base(self, reg: Registry) -> None:
        kb = self.fresh("kb")
        denial = dict(kb=kb, tenant="default", document_id="d", chunk_id="c", policy_version=3, detail="x")
        reg.record_denials([SimpleNamespace(**denial, principal="anonymous", reason="acl_version"),
                            SimpleNamespace(**denial, principal="ana", reason="tenant")])
        assert [(r["principal"], r["reason"], r["policy_version"]) for r in reg.denials(kb)] == [
            ("ana", "tenant", 3), ("anonymous", "acl_version", 3)]
        assert [r["reason"] for r in reg.denials(kb, principal="anonymous")] == ["acl_version"]
        assert reg.denials(self.fresh("other")) == []


class TwinContract(RegistrySuite):
    """Canonical twins and mirrors (:mod:`registry.twins`): one set of points per content and permissions."""

    ENG = DocumentAcl(("eng",))

    def canonical(self, reg: Registry, text: str = "same text") -> tuple[SourceInfo, str, str]:
        """A kb with one canonical document ``a.md`` of ``text`` readable by eng; (source, its id, content hash)."""
        source = self.source(reg, "first")
        run, cs = reg.start_sync_run(source.id, "test")
        doc, _ = stage(reg, run, cs, source, "a.md", [text], acl=self.ENG)
        reg.finish_sync_run(run)
        return source, doc, sha256_hex(text)

    def mirror(self, source: SourceInfo, key: str, digest: str, canonical: str) -> MirroredDocument:
        return MirroredDocument(source_id=source.id, document_id=document_id(source.id, key), key=key, etag="e",
                                size=1, content_hash=digest, canonical_id=canonical, acl=self.ENG,
                                source_uri=f"file:///{key}", parser_version="v")

    def test_a_copy_finds_its_canonical_twin_only_under_the_same_permissions_and_line(self, reg: Registry) -> None:
        first, doc, digest = self.canonical(reg)
        copy = document_id(self.fresh("second"), "b.md")
        assert reg.canonical_twin(copy, first.kb, digest, acl=self.ENG) == doc
        assert reg.canonical_twin(copy, first.kb, digest, acl=self.ENG, parser_version="v") == doc
        assert reg.canonical_twin(copy, first.kb, digest, acl=self.ENG, parser_version="other") is None
        assert reg.canonical_twin(copy, first.kb, digest, acl=DocumentAcl(("public",))) is None
        assert reg.canonical_twin(copy, self.fresh("other-kb"), digest, acl=self.ENG) is None
        assert reg.canonical_twin(copy, first.kb, sha256_hex("other text"), acl=self.ENG) is None
        assert reg.canonical_twin(doc, first.kb, digest, acl=self.ENG) is None  # never its own twin

    def test_the_kb_content_prefixes_are_its_canonical_documents_and_none_past_the_limit(self, reg: Registry) -> None:
        first, doc, digest = self.canonical(reg)
        second = add_source(reg, self.fresh("second"), first.kb)
        run, cs = reg.start_sync_run(second.id, "test")
        reg.stage_mirror(run, cs, self.mirror(second, "b.md", sha256_hex("a mirror"), doc))  # not canonical
        stage(reg, run, cs, second, "c.md", ["other text"], acl=self.ENG)
        reg.finish_sync_run(run)
        want = sorted(int(h[:16], 16) for h in (digest, sha256_hex("other text")))
        assert [int(p) for p in reg.kb_content_prefixes(first.kb, limit=10)] == want  # type: ignore[union-attr]
        assert reg.kb_content_prefixes(first.kb, limit=1) is None
        assert len(reg.kb_content_prefixes(self.fresh("empty-kb"), limit=10)) == 0  # type: ignore[arg-type]

    def test_a_mirror_has_no_chunks_is_named_by_its_canonical_and_is_no_twin_itself(self, reg: Registry) -> None:
        first, doc, digest = self.canonical(reg)
        second = add_source(reg, self.fresh("second"), first.kb)
        run, cs = reg.start_sync_run(second.id, "test")
        outcome = reg.stage_mirror(run, cs, self.mirror(second, "b.md", digest, doc))
        assert outcome.outcome == DocumentOutcomeKind.ADDED
        mirror = document_id(second.id, "b.md")
        assert reg.live_chunk_ids(mirror) == set() and reg.changeset_ops([cs]) == {}
        assert (reg.document_provenance(mirror) or {})["canonical_id"] == doc
        assert [m["document_id"] for m in (reg.document_provenance(doc) or {})["mirrors"]] == [mirror]
        # A third copy finds the canonical document, not the mirror
        assert reg.canonical_twin(document_id(second.id, "c.md"), first.kb, digest, acl=self.ENG) == doc
        # And a mirror staged by a closed run is refused, like every staging write
        reg.finish_sync_run(run)
        with pytest.raises(StaleTaskError):
            reg.stage_mirror(run, cs, self.mirror(second, "c.md", digest, doc))
        assert set(reg.documents_for_source(second.id)) == {"b.md"}

    def test_a_mirror_whose_canonical_changed_is_rehomed(self, reg: Registry) -> None:
        first, doc, digest = self.canonical(reg)
        second = add_source(reg, self.fresh("second"), first.kb)
        run, cs = reg.start_sync_run(second.id, "test")
        reg.stage_mirror(run, cs, self.mirror(second, "b.md", digest, doc))
        reg.finish_sync_run(run)
        mirror = document_id(second.id, "b.md")
        assert (second.id, "b.md") not in reg.rehome_mirrors()  # its canonical is unchanged
        # When the canonical document's text changes, the mirror is made to re-read its own copy
        run, cs = reg.start_sync_run(first.id, "test")
        stage(reg, run, cs, first, "a.md", ["edited text"], acl=self.ENG)
        reg.finish_sync_run(run)
        assert (second.id, "b.md") in reg.rehome_mirrors()
        assert (reg.document_provenance(mirror) or {})["canonical_id"] == mirror
        assert reg.get_document(mirror).etag is None  # type: ignore[union-attr]
        assert (reg.document_provenance(doc) or {})["mirrors"] == []

    def test_two_canonical_copies_indexed_at_once_are_merged_into_the_earliest(self, reg: Registry) -> None:
        first, doc, _digest = self.canonical(reg)
        second = add_source(reg, self.fresh("second"), first.kb)
        run, cs = reg.start_sync_run(second.id, "test")
        later, chunks = stage(reg, run, cs, second, "b.md", ["same text"], acl=self.ENG)
        reg.finish_sync_run(run)
        merged = [w for w in reg.merge_twins() if w.source_id in (first.id, second.id)]
        assert [(w.document_id, w.reason, w.chunks) for w in merged] == [(later, "mirrored", 1)]
        assert (reg.document_provenance(later) or {})["canonical_id"] == doc
        assert all(s.tombstoned for s in reg.chunk_status(sorted(chunks)).values())
        assert [w for w in reg.merge_twins() if w.source_id in (first.id, second.id)] == []


__all__ = ["DocumentAclContract", "StagingContract", "TwinContract", "VectorCacheContract"]
