"""Document ACLs and their versions in the registry (SQLite and PostgreSQL): migration 0007's columns.

Guarantees: a document's ``acl_version`` only grows (``max(old + 1,
source.acl_version)``) and only when its ACL fingerprint changes; a change
outside a sync stages a re-tag (upserts of its live chunks) in a new staged
changeset; ``chunk_status`` reports the document's ACL, tenant, sensitivity
and version (its source's ACL when never resolved), one query per batch.
"""

from __future__ import annotations

from sqlalchemy import select, update

from freshindex.acl.model import DocumentAcl
from freshindex.core.enums import ChangesetStatus, ChunkState
from freshindex.registry import Registry
from freshindex.registry.schema import AclDenial, Changeset, Chunk
from tests.registry.contract.helpers import add_source, stage


def _make_live(reg: Registry, ids: set[str]) -> None:
    with reg.session() as s:
        s.execute(update(Chunk).where(Chunk.id.in_(sorted(ids))).values(state=ChunkState.LIVE))


def test_a_never_resolved_document_reads_its_sources_acl(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    source = reg.add_source(fresh("docs"), kind="folder", location="/kb", owner="t", kb=kb, acl=["hr", "eng"],
                            tenant="acme", sensitivity="confidential")
    assert (source.tenant, source.sensitivity, source.acl_version) == ("acme", "confidential", 1)
    run, cs = reg.start_sync_run(source.id, "test")
    doc, ids = stage(reg, run, cs, source, "a.md", ["one", "two"])
    status = reg.chunk_status(sorted(ids))
    assert {tuple(sorted(s.acl)) for s in status.values()} == {("eng", "hr")}
    assert {(s.document_id, s.source_id, s.acl_version) for s in status.values()} == {(doc, source.id, 0)}
    row = reg.chunk_rows(sorted(ids))[0]
    assert sorted(row.acl) == ["eng", "hr"] and row.acl_version == 0


def test_acl_versions_grow_only_when_the_fingerprint_changes_and_stage_a_retag(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    source = add_source(reg, fresh("docs"), kb)
    run, cs = reg.start_sync_run(source.id, "test")
    doc, ids = stage(reg, run, cs, source, "a.md", ["one", "two"])
    reg.finish_sync_run(run)
    _make_live(reg, ids)

    staff = DocumentAcl(("staff",), "default", "internal", "source")
    applied = reg.apply_document_acls(source.id, {doc: staff})
    assert applied.bumped == (doc,) and applied.retagged_chunks == 2
    assert reg.changeset_ops([applied.changeset_id]) == {i: "upsert" for i in ids}
    with reg.session() as s:
        assert s.scalar(select(Changeset.status).where(Changeset.id == applied.changeset_id)) == ChangesetStatus.STAGED
    v1 = reg.chunk_status(sorted(ids))
    assert {(s.acl, s.acl_version) for s in v1.values()} == {(("staff",), 1)}

    again = reg.apply_document_acls(source.id, {doc: DocumentAcl(("staff",), origin="rule")})  # same fingerprint
    assert again.bumped == () and again.changeset_id is None

    # The source's version is the floor: a document catches up with it, never goes below.
    updated, changed = reg.update_source_acl(source.id, acl=["ops"], tenant="acme")
    assert updated.acl_version == 2 and set(changed) == {"acl", "tenant"}
    _same, nothing = reg.update_source_acl(source.id, acl=["ops"])
    assert nothing == {} and _same.acl_version == 2
    for _ in range(3):
        reg.update_source_acl(source.id, sensitivity="restricted")
        reg.update_source_acl(source.id, sensitivity="internal")
    assert reg.get_source(source.id).acl_version == 8
    reg.apply_document_acls(source.id, {doc: DocumentAcl(("ops",), "acme", "restricted")})
    v2 = reg.chunk_status(sorted(ids))
    assert {(s.acl, s.tenant, s.sensitivity, s.acl_version) for s in v2.values()} == {(("ops",), "acme",
                                                                                       "restricted", 8)}
    reg.apply_document_acls(source.id, {doc: DocumentAcl(("ops", "user:ana"), "acme", "restricted")})
    assert {s.acl_version for s in reg.chunk_status(sorted(ids)).values()} == {9}


def test_a_withheld_document_is_denied_until_resolved_again(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    source = add_source(reg, fresh("docs"), kb)
    run, cs = reg.start_sync_run(source.id, "test")
    doc, ids = stage(reg, run, cs, source, "a.md", ["one"])
    reg.finish_sync_run(run)
    _make_live(reg, ids)
    reg.apply_document_acls(source.id, {doc: DocumentAcl(("eng",), origin="sidecar")})
    applied = reg.apply_document_acls(source.id, {}, withhold=[doc])
    assert applied.withheld == (doc,) and applied.bumped == ()
    assert {s.acl_version for s in reg.chunk_status(sorted(ids)).values()} == {2}
    assert reg.document_acls(source.id)["a.md"]["fingerprint"] is None
    # The next resolution, even to the same ACL, moves the version and re-tags.
    again = reg.apply_document_acls(source.id, {doc: DocumentAcl(("eng",), origin="sidecar")})
    assert again.bumped == (doc,) and again.retagged_chunks == 1
    assert {s.acl_version for s in reg.chunk_status(sorted(ids)).values()} == {3}


def test_a_sync_stages_a_resolved_acl_with_the_document(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    source = add_source(reg, fresh("docs"), kb)
    run, cs = reg.start_sync_run(source.id, "test")
    doc, ids = stage(reg, run, cs, source, "a.md", ["one"])
    applied = reg.apply_document_acls(source.id, {doc: DocumentAcl(("hr",))}, run_id=run, changeset_id=cs)
    assert applied.bumped == (doc,) and applied.retagged_chunks == 0  # pending chunks are written by the build anyway
    assert applied.changeset_id == cs
    assert reg.chunk_rows(sorted(ids))[0].acl == ("hr",)


def test_the_denials_table_takes_rows(reg: Registry, fresh) -> None:
    kb = fresh("kb")
    with reg.session() as s:
        s.add(AclDenial(kb=kb, principal="anonymous", tenant="default", document_id="d", chunk_id="c",
                        reason="acl_version", policy_version=3, detail="x"))
    with reg.session() as s:
        row = s.scalars(select(AclDenial).where(AclDenial.kb == kb)).one()
        assert (row.reason, row.policy_version, row.at is not None) == ("acl_version", 3, True)
