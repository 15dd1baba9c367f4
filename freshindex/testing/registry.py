"""The registry contract: the source catalog, the run ledger with its fenced writes, and the locks.

A subclass gives a database URL (:meth:`RegistryContract.registry_url`, and
:meth:`RegistryContract.drop_url` to clean up); the suite migrates it once
per class and shares that registry among its tests, which keep apart by
naming everything they create with :meth:`RegistryContract.fresh`.  It
checks the guarantees the planner, the document tasks, the scheduler and
the builder rely on, on whatever backend: sources round-trip and never move
between knowledge bases; one run per source however many callers race to
open it, exactly one finisher, no write from a task whose run is closed or
whose changeset is not the run's, stalled runs found by their lease; one
owner per lease, fencing tokens that only grow, an expired lease taken over
with the old token dead.  ``add_source`` and ``stage`` are the small
builders its tests (and ``tests/registry/contract``) share.

What it does not check: the other protocols of ``registry.protocols``
(vector cache, snapshot records, chunk reader, document ACLs, dispatch
cursor: ``tests/registry/contract`` runs each on SQLite and PostgreSQL),
migrations between versions, or performance.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from freshindex.core.enums import BuildStatus, DocumentOutcomeKind, DocumentState, RunStatus
from freshindex.core.errors import ConfigError, NotFoundError, StaleTaskError
from freshindex.core.ids import chunk_point_id, document_id, sha256_hex
from freshindex.core.types import ChunkDraft
from freshindex.registry import DocumentFailure, DocumentOutcome, Registry, SourceInfo, StagedDocument
from freshindex.registry import db as registry_db


def draft(doc: str, n: int, text: str) -> ChunkDraft:
    h = sha256_hex(text)
    return ChunkDraft(id=chunk_point_id(doc, ("S", str(n)), h), ordinal=n, text=text, content_hash=h,
                      kind="paragraph", heading_path=("S",), anchor="s")


def add_source(reg: Registry, source_id: str, kb: str) -> SourceInfo:
    return reg.add_source(source_id, kind="folder", location="/kb", owner="team", kb=kb)


def stage(reg: Registry, run: int, cs: int, source: SourceInfo, key: str, texts: list[str]) -> tuple[str, set[str]]:
    """Stage ``texts`` as the new version of document ``key``; returns (document id, chunk ids)."""
    doc = document_id(source.id, key)
    drafts = [draft(doc, i, t) for i, t in enumerate(texts)]
    new = {d.id for d in drafts}
    old = reg.live_chunk_ids(doc)
    reg.stage_document(run, cs, StagedDocument(
        source=source, document_id=doc, key=key, etag="e", size=1, content_hash=sha256_hex(*texts),
        title=key, parser="text", parser_version="v", chunks=drafts, added_ids=new - old, removed_ids=old - new,
        outcome=DocumentOutcome(document_id=doc, key=key, outcome=DocumentOutcomeKind.ADDED, chunks_added=len(new - old)),
    ))
    return doc, new


class RegistryContract:
    """Subclass as ``TestMyBackend(RegistryContract)`` and implement :meth:`registry_url`."""

    def registry_url(self, tmp: Path) -> str:
        """A SQLAlchemy URL of an empty database (files, if any, under ``tmp``); the suite migrates it."""
        raise NotImplementedError

    def drop_url(self, url: str) -> None:
        """Remove the database :meth:`registry_url` made (nothing to do for a file under ``tmp``)."""

    @pytest.fixture(scope="class")
    @classmethod
    def reg(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
        """One migrated registry shared by the class's tests (each test gets a new instance: none is kept)."""
        owner = cls()
        url = owner.registry_url(tmp_path_factory.mktemp("registry"))
        try:
            engine = registry_db.make_engine(url)
            registry_db.upgrade(engine)
            engine.dispose()
            registry = Registry.open(url, auto_migrate=False)
            try:
                yield registry
            finally:
                registry.close()
        finally:
            owner.drop_url(url)

    @pytest.fixture(autouse=True)
    def _tag(self) -> None:
        self.tag = uuid.uuid4().hex[:8]

    def fresh(self, prefix: str) -> str:
        """A name unique to this test (valid as a source id, knowledge base, lock name)."""
        return f"{prefix}-{self.tag}"

    # -- the source catalog ------------------------------------------------------------------------

    def test_a_source_round_trips_and_is_listed_by_its_knowledge_base(self, reg: Registry) -> None:
        kb = self.fresh("kb")
        reg.add_source(self.fresh("b"), kind="folder", location="/b", owner="team", kb=kb, acl=["eng"], poll_interval_s=60)
        reg.add_source(self.fresh("a"), kind="http", location="https://x", owner="team", kb=kb, options={"depth": 2})
        got = reg.get_source(self.fresh("b"))
        assert (got.kind, got.location, got.acl, got.poll_interval_s, got.kb) == ("folder", "/b", ("eng",), 60, kb)
        assert reg.get_source(self.fresh("a")).options == {"depth": 2}
        assert [s.id for s in reg.list_sources(kb)] == [self.fresh("a"), self.fresh("b")]
        assert kb in reg.knowledge_bases()


    def test_a_duplicate_is_refused_unless_replaced_and_a_source_never_moves(self, reg: Registry) -> None:
        sid, kb = self.fresh("docs"), self.fresh("kb")
        reg.add_source(sid, kind="folder", location="/one", owner="team", kb=kb)
        with pytest.raises(ConfigError, match="already exists"):
            reg.add_source(sid, kind="folder", location="/two", owner="team", kb=kb)
        assert reg.add_source(sid, kind="folder", location="/two", owner="team", kb=kb, replace=True).location == "/two"
        with pytest.raises(ConfigError, match="cannot move"):
            reg.add_source(sid, kind="folder", location="/two", owner="team", kb=self.fresh("other"), replace=True)


    def test_unknown_and_invalid_ids(self, reg: Registry) -> None:
        with pytest.raises(NotFoundError):
            reg.get_source(self.fresh("nope"))
        assert reg.get_document(self.fresh("nope")) is None
        assert reg.documents_for_source(self.fresh("nope")) == {}
        with pytest.raises(ConfigError):
            reg.add_source("../evil", kind="folder", location="/", owner="x", kb=self.fresh("kb"))
        with pytest.raises(ConfigError):
            reg.add_source(self.fresh("ok"), kind="folder", location="/", owner="x", kb="Not A Name")


    def test_staged_documents_appear_with_their_live_chunks(self, reg: Registry) -> None:
        source = add_source(reg, self.fresh("docs"), self.fresh("kb"))
        run, cs = reg.start_sync_run(source.id, "test")
        doc, chunks = stage(reg, run, cs, source, "a.md", ["one", "two"])
        assert set(reg.documents_for_source(source.id)) == {"a.md"}
        state = reg.get_document(doc)
        assert state is not None and (state.key, state.state, state.version) == ("a.md", DocumentState.ACTIVE, 1)
        assert reg.live_chunk_ids(doc) == chunks
        assert document_id(source.id, "a.md") == doc

    # -- the run ledger ----------------------------------------------------------------------------

    def test_concurrent_open_or_join_opens_exactly_one_run(self, reg: Registry) -> None:
        # Given a source nobody is syncing
        source = add_source(reg, self.fresh("docs"), self.fresh("kb"))
        # When eight callers ask to sync it at once
        with ThreadPoolExecutor(4) as pool:
            claims = list(pool.map(lambda _: reg.open_or_join_run(source.id, "webhook", lease_s=60), range(8)))
        # Then one opened a run and every other joined that same run
        assert sum(not c.joined for c in claims) == 1
        assert len({c.run_id for c in claims}) == 1
        assert [r.status for r in reg.sync_runs(source.id)] == [RunStatus.RUNNING]


    def test_a_follow_up_request_is_remembered_on_the_joined_run(self, reg: Registry) -> None:
        source = add_source(reg, self.fresh("docs"), self.fresh("kb"))
        first = reg.open_or_join_run(source.id, "schedule", lease_s=60)
        joined = reg.open_or_join_run(source.id, "webhook", lease_s=60, followup=True)
        assert joined.joined and joined.run_id == first.run_id
        assert reg.get_sync_run(first.run_id).followup_requested


    def test_opening_without_a_lease_abandons_the_live_run_and_adopts_its_changes(self, reg: Registry) -> None:
        source = add_source(reg, self.fresh("docs"), self.fresh("kb"))
        old_run, old_cs = reg.start_sync_run(source.id, "test")
        stage(reg, old_run, old_cs, source, "a.md", ["kept"])
        new_run, new_cs = reg.start_sync_run(source.id, "test")
        assert new_run != old_run and new_cs != old_cs
        old = reg.get_sync_run(old_run)
        assert old.status == RunStatus.FAILED and "abandoned" in (old.error or "")
        assert old_cs in reg.staged_changesets(source.kb)  # its staged document is a valid change


    def test_exactly_one_concurrent_finisher_gets_true(self, reg: Registry) -> None:
        source = add_source(reg, self.fresh("docs"), self.fresh("kb"))
        run, cs = reg.start_sync_run(source.id, "test")
        stage(reg, run, cs, source, "a.md", ["text"])
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: reg.finish_sync_run(run), range(6)))
        assert [finished for _, finished in results].count(True) == 1
        info = reg.get_sync_run(run)
        assert info.status == RunStatus.SUCCEEDED
        assert info.summary["documents"]["added"] == 1
        assert reg.staged_changesets(source.kb) == [cs]


    def test_writes_of_a_closed_run_are_refused_and_write_nothing(self, reg: Registry) -> None:
        # Given a run that has finished (its changeset staged)
        source = add_source(reg, self.fresh("docs"), self.fresh("kb"))
        run, cs = reg.start_sync_run(source.id, "test")
        stage(reg, run, cs, source, "a.md", ["first"])
        reg.finish_sync_run(run)
        # When a late task of that run tries to stage, fail or touch a document
        assert reg.run_refusal(run, cs) is not None
        with pytest.raises(StaleTaskError):
            stage(reg, run, cs, source, "late.md", ["late"])
        with pytest.raises(StaleTaskError):
            reg.record_failure(run, DocumentFailure(source_id=source.id, document_id="x", key="bad.md",
                                                    reason="unreadable", detail="late"), changeset_id=cs)
        # Then nothing of it reached the registry
        assert set(reg.documents_for_source(source.id)) == {"a.md"}
        assert reg.run_progress(run)[0] == 1
        assert reg.count_stale_task(run) == 1


    def test_a_task_naming_another_changeset_is_refused(self, reg: Registry) -> None:
        source = add_source(reg, self.fresh("docs"), self.fresh("kb"))
        run, cs = reg.start_sync_run(source.id, "test")
        assert reg.run_refusal(run, cs) is None
        assert "not the run's" in (reg.run_refusal(run, cs + 10_000) or "")


    def test_a_run_stalls_once_its_lease_runs_out_and_heartbeats_renew_it(self, reg: Registry) -> None:
        source = add_source(reg, self.fresh("docs"), self.fresh("kb"))
        run, _cs = reg.start_sync_run(source.id, "test")
        reg.set_run_planned(run, listed=2, planned=2, documents=[("a.md", "e1", 1), ("b.md", None, 2)])
        reg.heartbeat_run(run, worker="w1")
        later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=120)
        assert run not in {r.id for r in reg.stalled_runs(3600)}
        assert run in {r.id for r in reg.stalled_runs(60, now=later)}
        assert reg.unprocessed_documents(run) == [("a.md", "e1", 1, None), ("b.md", None, 2, None)]
        assert reg.record_reap(run, "resumed", documents=2) == 1
        assert reg.get_sync_run(run).summary["reaps"][0]["action"] == "resumed"


    def test_the_build_after_a_run_is_recorded(self, reg: Registry) -> None:
        source = add_source(reg, self.fresh("docs"), self.fresh("kb"))
        run, cs = reg.start_sync_run(source.id, "test")
        stage(reg, run, cs, source, "a.md", ["text"])
        info, _ = reg.finish_sync_run(run)
        assert info.build_status == BuildStatus.PENDING and not info.done
        reg.set_run_build(run, status=BuildStatus.BUILT, snapshot_id="snap-1")
        info = reg.get_sync_run(run)
        assert (info.build_status, info.snapshot_id, info.done) == (BuildStatus.BUILT, "snap-1", True)
        assert not reg.run_changeset_applied(run)
        assert reg.last_successful_sync(source.id) is not None

    # -- the locks ---------------------------------------------------------------------------------

    def test_an_unexpired_lease_has_one_owner(self, reg: Registry) -> None:
        name = self.fresh("build")
        token = reg.acquire_lock(name, "a", ttl=60)
        assert token is not None
        assert reg.acquire_lock(name, "b", ttl=60) is None
        assert reg.lock_holder(name)[0] == "a"
        assert reg.lock_holder(name)[2] == token


    def test_concurrent_acquirers_get_exactly_one_lease(self, reg: Registry) -> None:
        name = self.fresh("build")
        with ThreadPoolExecutor(4) as pool:
            tokens = list(pool.map(lambda i: reg.acquire_lock(name, f"owner-{i}", 60), range(8)))
        assert sum(t is not None for t in tokens) == 1


    def test_every_acquisition_returns_a_larger_fencing_token(self, reg: Registry) -> None:
        name = self.fresh("build")
        first = reg.acquire_lock(name, "a", ttl=60)
        assert first is not None
        reg.release_lock(name, first)
        second = reg.acquire_lock(name, "b", ttl=60)
        assert second is not None and second > first
        third = reg.acquire_lock(name, "b", ttl=60)  # the holder re-acquiring also moves the token on
        assert third is not None and third > second


    def test_an_expired_lease_can_be_taken_over_and_the_old_token_is_dead(self, reg: Registry) -> None:
        name = self.fresh("build")
        old = reg.acquire_lock(name, "a", ttl=-1.0)  # already expired: "a" stopped renewing
        assert old is not None
        new = reg.acquire_lock(name, "b", ttl=60)
        assert new is not None and new > old
        assert reg.renew_lock(name, old, 60) is False
        reg.release_lock(name, old)  # a stale release must not free the new owner's lease
        assert reg.lock_holder(name)[0] == "b"
        assert reg.renew_lock(name, new, 60) is True


    def test_a_released_lease_is_free(self, reg: Registry) -> None:
        name = self.fresh("build")
        token = reg.acquire_lock(name, "a", ttl=60)
        assert token is not None
        reg.release_lock(name, token)
        assert reg.lock_holder(name)[0] is None
        assert reg.acquire_lock(name, "b", ttl=60) is not None


    def test_an_unknown_lease_has_no_holder(self, reg: Registry) -> None:
        assert reg.lock_holder(self.fresh("never")) == (None, 0.0, 0)


__all__ = ["RegistryContract", "add_source", "draft", "stage"]
