"""Registry behaviour on SQLite and on the local PostgreSQL (every test runs on both)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sqlalchemy import inspect

from freshindex.core.errors import ConfigError, NotFoundError
from freshindex.core.ids import chunk_point_id, document_id, sha256_hex
from freshindex.core.types import ChunkDraft
from freshindex.registry import DocumentOutcome, Registry, StagedDocument
from freshindex.registry import db as registry_db
from freshindex.registry.schema import Base


def _draft(doc: str, n: int, text: str) -> ChunkDraft:
    h = sha256_hex(text)
    return ChunkDraft(id=chunk_point_id(doc, ("S", str(n)), h), ordinal=n, text=text, content_hash=h,
                      kind="paragraph", heading_path=("S",), anchor="s")


def _stage(reg: Registry, run: int, cs: int, source, key: str, texts: list[str], old: set[str] | None = None):
    doc = document_id(source.id, key)
    drafts = [_draft(doc, i, t) for i, t in enumerate(texts)]
    new = {d.id for d in drafts}
    old = old if old is not None else reg.live_chunk_ids(doc)
    reg.stage_document(run, cs, StagedDocument(
        source=source, document_id=doc, key=key, etag="e", size=1, content_hash=sha256_hex(*texts),
        title=key, parser="text", parser_version="v", chunks=drafts, added_ids=new - old, removed_ids=old - new,
        outcome=DocumentOutcome(document_id=doc, key=key, outcome="added", chunks_added=len(new - old)),
    ))
    return doc, drafts


def test_schema_matches_the_models_after_upgrade(registry: Registry) -> None:
    tables = set(inspect(registry.engine).get_table_names())
    assert set(Base.metadata.tables) <= tables
    assert registry_db.current_revision(registry.engine) == registry_db.head_revision()


def test_a_postgres_registry_behind_head_refuses_to_open(pg_url: str) -> None:
    with pytest.raises(ConfigError, match="freshindex db upgrade"):
        Registry.open(pg_url)


def test_sources_round_trip_and_reject_duplicates(registry: Registry) -> None:
    registry.add_source("docs", kind="folder", location="/kb", owner="team", kb="default", acl=["eng"])
    with pytest.raises(ConfigError, match="already exists"):
        registry.add_source("docs", kind="folder", location="/kb", owner="team", kb="default")
    src = registry.get_source("docs")
    assert (src.kind, src.location, src.acl) == ("folder", "/kb", ("eng",))
    with pytest.raises(NotFoundError):
        registry.get_source("nope")
    with pytest.raises(ConfigError):
        registry.add_source("../evil", kind="folder", location="/", owner="x", kb="default")


def test_staging_twice_is_idempotent_and_finish_happens_once(registry: Registry) -> None:
    src = registry.add_source("docs", kind="folder", location="/kb", owner="t", kb="default")
    run, cs = registry.start_sync_run("docs", "test")
    doc, drafts = _stage(registry, run, cs, src, "a.md", ["one", "two"])
    # A redelivered task repeats the same write: no duplicate entries or rows.
    _stage(registry, run, cs, src, "a.md", ["one", "two"], old=set())
    assert registry.live_chunk_ids(doc) == {d.id for d in drafts}
    assert registry.changeset_ops([cs]) == {d.id: "upsert" for d in drafts}
    registry.set_run_planned(run, listed=1, planned=1)
    assert registry.run_progress(run) == (1, 1)
    info, first = registry.finish_sync_run(run)
    again, second = registry.finish_sync_run(run)
    assert (first, second) == (True, False)
    assert info.status == again.status == "succeeded"
    assert registry.staged_changesets("default") == [cs]


def test_a_documents_later_outcome_in_a_run_replaces_its_earlier_one(registry: Registry) -> None:
    # Given a document staged as added in a run
    src = registry.add_source("docs", kind="folder", location="/kb", owner="t", kb="default")
    run, cs = registry.start_sync_run("docs", "test")
    doc, _ = _stage(registry, run, cs, src, "a.md", ["one", "two"])
    # When a redelivered task of the same run finds it unchanged
    registry.touch_document(run, doc, etag="e2", size=1, seconds=0.5)
    # Then the run counts one outcome for it, the later one, with the later row's fields
    info, _ = registry.finish_sync_run(run)
    assert info.summary["documents"]["unchanged"] == 1 and info.summary["documents"]["added"] == 0
    assert info.summary["chunks_added"] == 0


def test_tombstoned_chunks_stop_being_servable_before_any_build(registry: Registry) -> None:
    src = registry.add_source("docs", kind="folder", location="/kb", owner="t", kb="default")
    run, cs = registry.start_sync_run("docs", "test")
    _doc, drafts = _stage(registry, run, cs, src, "a.md", ["keep", "drop"])
    run2, cs2 = registry.start_sync_run("docs", "test")
    _stage(registry, run2, cs2, src, "a.md", ["keep"])
    status = registry.chunk_status([d.id for d in drafts])
    assert status[drafts[0].id].tombstoned is False
    assert status[drafts[1].id].tombstoned is True
    assert registry.tombstone_backlog("default") == 1
    # The later changeset wins when both are resolved together.
    ops = registry.changeset_ops([cs, cs2])
    assert ops[drafts[1].id] == "delete" and ops[drafts[0].id] == "upsert"


def test_an_abandoned_open_changeset_is_adopted_by_the_next_run(registry: Registry) -> None:
    src = registry.add_source("docs", kind="folder", location="/kb", owner="t", kb="default")
    run, cs = registry.start_sync_run("docs", "test")
    _stage(registry, run, cs, src, "a.md", ["text"])
    # The run dies here; the next run stages the orphaned changeset.
    _run2, _ = registry.start_sync_run("docs", "test")
    assert registry.get_sync_run(run).status == "failed"
    assert cs in registry.staged_changesets("default")


def test_vector_cache_keys_on_model_and_content(registry: Registry) -> None:
    v = np.arange(8, dtype=np.float32)
    registry.cache_vectors("m1", {"h1": v})
    registry.cache_vectors("m1", {"h1": v + 1})  # first write wins: same key, same content
    assert np.array_equal(registry.cached_vectors("m1", ["h1", "h2"])["h1"], v)
    assert registry.cached_vectors("m2", ["h1"]) == {}


def test_lock_lease_fencing_and_expiry(registry: Registry) -> None:
    t1 = registry.acquire_lock("build:kb", "a", ttl=0.5)
    assert t1 is not None
    assert registry.acquire_lock("build:kb", "b", ttl=0.5) is None
    time.sleep(0.6)
    t2 = registry.acquire_lock("build:kb", "b", ttl=5)
    assert t2 is not None and t2 > t1
    assert registry.renew_lock("build:kb", t1, 5) is False  # a's lease is gone
    registry.release_lock("build:kb", t1)  # a stale release does nothing
    assert registry.lock_holder("build:kb")[0] == "b"
    registry.release_lock("build:kb", t2)
    assert registry.acquire_lock("build:kb", "c", ttl=5) == t2 + 1


def test_the_models_and_the_migrations_agree(registry: Registry) -> None:
    """Autogenerate against the upgraded database finds nothing to do."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with registry.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []
