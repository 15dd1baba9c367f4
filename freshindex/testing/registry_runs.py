"""The registry contract's run side: the run ledger, its lease and dispatch cursor, attempts, source state.

Checks, on whatever backend: one run per source however many callers race
to open it, exactly one finisher, no write from a task whose run is closed
or whose changeset is not the run's; a run's lease (injected ``now``) keeps
it alive while renewed and lets it stall once past, and only parse work
counts as workers alive; the fair-dispatch cursor moves only from where it
is; start markers are cleared up to a time; a plan keeps media types apart
from ``planned_keys``; the poison-pill attempt counter counts a crash as an
attempt begun and never ended (under a run no longer running); a source's connector state (and its planned
cursor) is pending with its run and promoted only when the run succeeds (the
connector state also when the next run records before anyone read it).

What it does not check: the reaper's and the scheduler's decisions over
these records (``tests/registry/contract/test_lease_rule.py``), or
the Celery tasks that call them.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from freshindex.core.enums import BuildStatus, RunStatus
from freshindex.core.errors import StaleTaskError
from freshindex.core.ids import document_id
from freshindex.registry import DocumentFailure, Registry
from freshindex.registry.runs import RunClaim
from freshindex.registry.source_state import SourceStateView
from freshindex.testing.registry_base import RegistrySuite, stage


class RunLedgerContract(RegistrySuite):
    """:class:`registry.protocols.RunLedger` and :class:`~registry.protocols.DocumentStaging`'s fence."""

    def planned_run(self, reg: Registry, n: int = 6, name: str = "docs") -> int:
        run, _cs = reg.start_sync_run(self.source(reg, name).id, "test")
        reg.set_run_planned(run, listed=n, planned=n, documents=[(f"d{i}.md", None, 1) for i in range(n)])
        return run

    def test_concurrent_open_or_join_opens_exactly_one_run(self, reg: Registry) -> None:
        # Given a source nobody is syncing
        source = self.source(reg)
        url = reg.engine.url.render_as_string(hide_password=False)
        callers = 6
        barrier = threading.Barrier(callers)

        def call(_: int) -> RunClaim:
            other = Registry.open(url, auto_migrate=False)  # a connection pool of its own, like a process
            try:
                barrier.wait(30)
                return other.open_or_join_run(source.id, "webhook", lease_s=60)
            finally:
                other.close()

        # When six callers, each with its own registry, ask to sync it at once
        with ThreadPoolExecutor(callers) as pool:
            claims = list(pool.map(call, range(callers)))
        # Then one opened a run and every other joined that same run
        assert sum(not c.joined for c in claims) == 1
        assert len({c.run_id for c in claims}) == 1
        assert [r.status for r in reg.sync_runs(source.id)] == [RunStatus.RUNNING]

    def test_a_follow_up_request_is_remembered_on_the_joined_run(self, reg: Registry) -> None:
        source = self.source(reg)
        first = reg.open_or_join_run(source.id, "schedule", lease_s=60)
        joined = reg.open_or_join_run(source.id, "webhook", lease_s=60, followup=True)
        assert joined.joined and joined.run_id == first.run_id
        assert reg.get_sync_run(first.run_id).followup_requested

    def test_opening_without_a_lease_abandons_the_live_run_and_adopts_its_changes(self, reg: Registry) -> None:
        source = self.source(reg)
        old_run, old_cs = reg.start_sync_run(source.id, "test")
        stage(reg, old_run, old_cs, source, "a.md", ["kept"])
        new_run, new_cs = reg.start_sync_run(source.id, "test")
        assert new_run != old_run and new_cs != old_cs
        old = reg.get_sync_run(old_run)
        assert old.status == RunStatus.FAILED and "abandoned" in (old.error or "")
        assert old_cs in reg.staged_changesets(source.kb)  # its staged document is a valid change

    def test_exactly_one_concurrent_finisher_gets_true(self, reg: Registry) -> None:
        source = self.source(reg)
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
        source = self.source(reg)
        run, cs = reg.start_sync_run(source.id, "test")
        doc, chunks = stage(reg, run, cs, source, "a.md", ["first"])
        reg.set_run_planned(run, listed=1, planned=1)
        reg.finish_sync_run(run)
        before = (reg.get_document(doc), reg.changeset_ops([cs]), reg.run_progress(run))
        # When a late task of that run tries to stage, fail, touch or delete a document
        assert reg.run_refusal(run, cs) is not None
        with pytest.raises(StaleTaskError, match="succeeded"):
            stage(reg, run, cs, source, "a.md", ["late"])
        with pytest.raises(StaleTaskError):
            stage(reg, run, cs, source, "late.md", ["late"])
        with pytest.raises(StaleTaskError):
            reg.record_failure(run, DocumentFailure(source_id=source.id, document_id=doc, key="a.md",
                                                    reason="unreadable", detail="late"), changeset_id=cs)
        with pytest.raises(StaleTaskError):
            reg.touch_document(run, doc, etag="e2", size=1, seconds=0.1)
        with pytest.raises(StaleTaskError):
            reg.stage_deletion(run, cs, doc)
        # Then nothing of it reached the registry, and the refusal was counted once
        assert (reg.get_document(doc), reg.changeset_ops([cs]), reg.run_progress(run)) == before
        assert set(reg.documents_for_source(source.id)) == {"a.md"} and reg.live_chunk_ids(doc) == chunks
        assert reg.document_errors(run) == []
        assert reg.count_stale_task(run) == 1

    def test_a_task_naming_another_changeset_is_refused_even_while_the_run_runs(self, reg: Registry) -> None:
        source = self.source(reg)
        old_run, old_cs = reg.start_sync_run(source.id, "test")
        run, cs = reg.start_sync_run(source.id, "test")
        assert reg.run_refusal(run, cs) is None
        assert "not the run's" in (reg.run_refusal(run, cs + 10_000) or "")
        with pytest.raises(StaleTaskError, match="not the run's"):
            stage(reg, run, old_cs, source, "a.md", ["three"])
        assert reg.documents_for_source(source.id) == {} and reg.changeset_ops([old_cs, cs]) == {}
        assert old_run != run

    def test_a_run_past_its_lease_is_not_joined_but_adopted(self, reg: Registry) -> None:
        source = self.source(reg)
        first = reg.open_or_join_run(source.id, "test", lease_s=120)
        # Its lease ran out (no heartbeat within lease_s): the next request opens a run and adopts its changes
        second = reg.open_or_join_run(source.id, "test", lease_s=0)
        assert not second.joined and second.run_id != first.run_id
        assert reg.get_sync_run(first.run_id).status == RunStatus.FAILED
        assert reg.open_or_join_run(source.id, "test", lease_s=120, followup=True).run_id == second.run_id
        assert reg.get_sync_run(second.run_id).followup_requested

    def test_a_failed_document_is_recorded_against_it_and_counts_as_done(self, reg: Registry) -> None:
        source = self.source(reg)
        run, cs = reg.start_sync_run(source.id, "test")
        reg.set_run_planned(run, listed=1, planned=1, documents=[("bad.md", "e1", 3)])
        doc = document_id(source.id, "bad.md")
        reg.record_failure(run, DocumentFailure(source_id=source.id, document_id=doc, key="bad.md",
                                                reason="permanent_error", detail="no text", etag="e1", size=3),
                           changeset_id=cs)
        assert reg.run_progress(run) == (1, 1)
        assert [(e.key, e.reason) for e in reg.document_errors(run)] == [("bad.md", "permanent_error")]
        assert reg.unprocessed_documents(run) == []

    def test_a_run_stalls_once_its_lease_runs_out_and_heartbeats_renew_it(self, reg: Registry) -> None:
        source = self.source(reg)
        run, _cs = reg.start_sync_run(source.id, "test")
        reg.set_run_planned(run, listed=2, planned=2, documents=[("a.md", "e1", 1), ("b.md", None, 2)])
        t0 = dt.datetime.now(dt.UTC)
        reg.heartbeat_run(run, worker="w1", now=t0)
        # Within the lease it is alive; one second past it, stalled; a heartbeat then renews it
        assert run not in {r.id for r in reg.stalled_runs(60, now=t0 + dt.timedelta(seconds=59))}
        assert run in {r.id for r in reg.stalled_runs(60, now=t0 + dt.timedelta(seconds=61))}
        reg.heartbeat_run(run, worker="w1", now=t0 + dt.timedelta(seconds=61))
        assert run not in {r.id for r in reg.stalled_runs(60, now=t0 + dt.timedelta(seconds=62))}
        assert reg.unprocessed_documents(run) == [("a.md", "e1", 1, None), ("b.md", None, 2, None)]
        assert reg.record_reap(run, "resumed", documents=2) == 1
        assert reg.get_sync_run(run).summary["reaps"][0]["action"] == "resumed"

    def test_the_build_after_a_run_is_recorded(self, reg: Registry) -> None:
        source = self.source(reg)
        run, cs = reg.start_sync_run(source.id, "test")
        stage(reg, run, cs, source, "a.md", ["text"])
        info, _ = reg.finish_sync_run(run)
        assert info.build_status == BuildStatus.PENDING and not info.done
        reg.set_run_build(run, status=BuildStatus.BUILT, snapshot_id="snap-1")
        info = reg.get_sync_run(run)
        assert (info.build_status, info.snapshot_id, info.done) == (BuildStatus.BUILT, "snap-1", True)
        assert not reg.run_changeset_applied(run)
        assert reg.last_successful_sync(source.id) is not None

    # -- the fair-dispatch cursor and the evidence that workers are alive --------------------------

    def test_the_dispatch_cursor_moves_only_from_where_it_is(self, reg: Registry) -> None:
        run = self.planned_run(reg)
        assert reg.advance_dispatch(run, 0, 2)  # the first batch
        assert not reg.advance_dispatch(run, 0, 2)  # sync_source redelivered
        assert reg.advance_dispatch(run, 2, 4)
        assert not reg.advance_dispatch(run, 2, 4)  # a second copy of the continuation
        assert reg.get_sync_run(run).summary["dispatched"] == 4
        assert reg.get_sync_run(run).summary["planned_keys"][0][0] == "d0.md"  # the plan is kept

    def test_racing_copies_of_a_continuation_advance_the_cursor_once(self, reg: Registry) -> None:
        run = self.planned_run(reg)
        assert reg.advance_dispatch(run, 0, 2)
        with ThreadPoolExecutor(4) as pool:
            won = list(pool.map(lambda _: reg.advance_dispatch(run, 2, 4), range(8)))
        assert won.count(True) == 1
        assert reg.get_sync_run(run).summary["dispatched"] == 4

    def test_a_closed_run_takes_no_more_batches(self, reg: Registry) -> None:
        run = self.planned_run(reg)
        assert reg.advance_dispatch(run, 0, 2)
        reg.finish_sync_run(run, error="closed by the test")
        assert not reg.advance_dispatch(run, 2, 4)

    def test_advancing_renews_the_lease_and_counts_as_worked_on(self, reg: Registry) -> None:
        run = self.planned_run(reg)
        later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=120)
        assert run in {r.id for r in reg.stalled_runs(60, now=later)}
        assert reg.advance_dispatch(run, 0, 2)
        assert run not in {r.id for r in reg.stalled_runs(3600)}
        assert run in reg.worked_runs(3600)
        assert run not in reg.worked_runs(60, now=later)
        # A lease renewed by the reaper is no evidence that a worker is alive
        reg.record_reap(run, "redispatched", missing=6)
        assert run not in reg.worked_runs(3600)

    def test_start_markers_are_kept_per_document_and_cleared_up_to_a_time(self, reg: Registry) -> None:
        run = self.planned_run(reg, 4)
        assert reg.started_documents(run) == {}
        reg.mark_document_started(run, "d0.md", "w1")
        reg.mark_document_started(run, "d1.md", "w1")
        first = reg.started_documents(run)
        assert set(first) == {"d0.md", "d1.md"} and all(t.tzinfo is not None for t in first.values())
        reg.mark_document_started(run, "d1.md", "w2")  # a redelivery renews its marker
        assert set(reg.started_documents(run)) == {"d0.md", "d1.md"}
        # Cleared up to the time read: a marker written since then stays
        later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
        assert reg.clear_started(run, ["d0.md"], up_to=first["d0.md"]) == 1
        assert reg.clear_started(run, ["d1.md"], up_to=first["d1.md"] - dt.timedelta(seconds=1)) == 0
        assert set(reg.started_documents(run)) == {"d1.md"}
        assert reg.clear_started(run, ["d1.md"], up_to=later) == 1
        assert reg.clear_started(run, [], up_to=later) == 0

    def test_no_marker_for_a_closed_run_and_none_left_when_it_finishes(self, reg: Registry) -> None:
        run = self.planned_run(reg, 4)
        reg.mark_document_started(run, "d0.md")
        reg.finish_sync_run(run, error="closed by the test")
        assert reg.started_documents(run) == {}
        reg.mark_document_started(run, "d1.md")  # a late task of the closed run
        assert reg.started_documents(run) == {}

    def test_only_parse_work_counts_as_workers_alive(self, reg: Registry) -> None:
        run = self.planned_run(reg, 4)
        later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=120)
        # The planner's renewals, its first batch, a plain heartbeat: no evidence
        assert reg.advance_dispatch(run, 0, 2, worked=False)
        reg.heartbeat_run(run, worker="sync-worker")
        assert run not in reg.worked_runs(3600)
        # A document started: evidence, for one lease
        reg.mark_document_started(run, "d0.md", "w1")
        assert run in reg.worked_runs(3600)
        assert run not in reg.worked_runs(60, now=later)
        # A continuation's batch: evidence too, until the reaper renews the run
        other = self.planned_run(reg, 4, "other")
        assert reg.advance_dispatch(other, 0, 2, worked=False) and other not in reg.worked_runs(3600)
        assert reg.advance_dispatch(other, 2, 4)
        assert other in reg.worked_runs(3600)
        reg.record_reap(other, "redispatched", missing=4)
        assert other not in reg.worked_runs(3600)
        # A finished run is no evidence
        reg.finish_sync_run(run)
        assert run not in reg.worked_runs(3600)

    def test_a_plan_keeps_media_types_apart_and_gives_them_back(self, reg: Registry) -> None:
        # A worker of the previous release reads planned_keys rows as (key, etag, size): they stay three long
        run, _cs = reg.start_sync_run(self.source(reg).id, "test")
        reg.set_run_planned(run, listed=3, planned=3, documents=[
            ("pages/ferry", "e1", 10, "text/html; charset=utf-8"), ("a.md", "e2", 2, None), ("b.md", None, 3)])
        info = reg.get_sync_run(run)
        assert info.summary["planned_keys"] == [["pages/ferry", "e1", 10], ["a.md", "e2", 2], ["b.md", None, 3]]
        assert info.summary["planned_media"] == {"pages/ferry": "text/html; charset=utf-8"}
        assert reg.unprocessed_documents(run) == [
            ("pages/ferry", "e1", 10, "text/html; charset=utf-8"), ("a.md", "e2", 2, None), ("b.md", None, 3, None)]


class AttemptsContract(RegistrySuite):
    """The poison-pill counter: a crash is an attempt begun and never ended."""

    def runs(self, reg: Registry) -> Iterator[int]:
        """Sync runs of one new source one after another, each finished when the next starts (a run that
        died and was closed): an attempt open under a finished run is a crash, under a running one it is not."""
        sid, run = self.source(reg).id, None
        while True:
            if run is not None:
                reg.finish_sync_run(run)
            run, _cs = reg.start_sync_run(sid, "test")
            yield run

    def test_a_crash_is_an_attempt_begun_and_never_ended(self, reg: Registry) -> None:
        doc, runs = self.fresh("doc"), self.runs(reg)
        r1 = next(runs)
        # Given a document begun for the first time
        assert reg.begin_document_attempt(doc, etag="e1", run_id=r1) == (0, False)
        # When its process dies (no end) and the next attempt begins, that is one crash; two in a row, two
        assert reg.begin_document_attempt(doc, etag="e1", run_id=r1) == (1, True)
        r2 = next(runs)
        assert reg.begin_document_attempt(doc, etag="e1", run_id=r2) == (2, True)
        assert reg.document_crashes(doc) == 2
        # An attempt that ends alive without an outcome (a retried error) keeps the count and adds nothing
        reg.end_document_attempt(doc, outcome=False)
        assert reg.begin_document_attempt(doc, etag="e1", run_id=r2) == (2, False)
        # A new version starts again; an outcome resets it
        r3 = next(runs)
        assert reg.begin_document_attempt(doc, etag="e2", run_id=r3) == (0, False)
        assert reg.begin_document_attempt(doc, etag="e2", run_id=r3) == (1, True)
        reg.end_document_attempt(doc, outcome=True)
        assert reg.document_crashes(doc) == 0
        assert reg.begin_document_attempt(doc, etag="e2", run_id=next(runs)) == (0, False)

    def test_an_attempt_opened_ahead_is_refused_for_a_document_a_process_died_on(self, reg: Registry) -> None:
        doc, other, runs = self.fresh("doc"), self.fresh("other"), self.runs(reg)
        # Given a document never begun: opened ahead, and the crash counter sees it open
        assert reg.begin_attempt_ahead(doc, etag="e1", run_id=next(runs)) is True
        # When its process dies with it open, the next opening ahead is refused (nothing changed) ...
        r2 = next(runs)
        assert reg.begin_attempt_ahead(doc, etag="e1", run_id=r2) is False
        # ... and the loop's own attempt counts the crash
        assert reg.begin_document_attempt(doc, etag="e1", run_id=r2) == (1, True)
        reg.end_document_attempt(doc, outcome=False)
        assert reg.begin_attempt_ahead(doc, etag="e1", run_id=r2) is False  # closed, but a crash is counted
        # An outcome resets it: working ahead is allowed again
        reg.end_document_attempt(doc, outcome=True)
        r3 = next(runs)
        assert reg.begin_attempt_ahead(doc, etag="e1", run_id=r3) is True
        # A retried error with no crash keeps no one from working ahead
        assert reg.begin_document_attempt(other, etag="e1", run_id=r3) == (0, False)
        reg.end_document_attempt(other, outcome=False)
        assert reg.begin_attempt_ahead(other, etag="e1", run_id=r3) is True
        assert reg.document_crashes(other) == 0


class SourceStateContract(RegistrySuite):
    """A source's connector state and planned cursor: pending with their run, promoted when it succeeds."""

    def finish(self, reg: Registry, run: int, *, error: str | None = None) -> None:
        reg.set_run_planned(run, listed=0, planned=0)
        reg.finish_sync_run(run, error=error)

    def test_state_is_promoted_when_its_run_succeeds_and_dropped_when_it_fails(self, reg: Registry) -> None:
        sid = self.source(reg).id
        view = SourceStateView(reg, sid)
        assert view.get() == {}
        # Given a run that recorded a cursor in two steps (merged), Then only that run sees it while open
        run, _ = reg.start_sync_run(sid, "test")
        view.set_pending({"listing": {"seq": 1}})
        view.set_pending({"pages": {"a": 1}})
        assert view.planned(run) == {"listing": {"seq": 1}, "pages": {"a": 1}}
        assert view.planned(run + 1) is None
        assert view.get() == {}  # not promoted while the run is open
        # When it succeeds, Then the next read promotes it
        self.finish(reg, run)
        assert view.get() == {"listing": {"seq": 1}, "pages": {"a": 1}}
        assert view.planned(run) is None
        # Given a later run that recorded a newer cursor and removed a key, When it fails, Then the old state stays
        failed, _ = reg.start_sync_run(sid, "test")
        view.set_pending({"listing": {"seq": 2}, "pages": None})
        self.finish(reg, failed, error="boom")
        assert view.get() == {"listing": {"seq": 1}, "pages": {"a": 1}}
        # Given a run killed after recording (still running), When a new run opens and abandons it, Then dropped
        killed = reg.open_or_join_run(sid, "test", lease_s=0).run_id
        view.set_pending({"listing": {"seq": 3}})
        after = reg.open_or_join_run(sid, "test", lease_s=0)
        assert after.run_id != killed and not after.joined
        assert view.get() == {"listing": {"seq": 1}, "pages": {"a": 1}}
        # And a succeeded run's removal of a key is applied
        view.set_pending({"listing": {"seq": 4}, "pages": None})
        self.finish(reg, after.run_id)
        assert view.get() == {"listing": {"seq": 4}}

    def test_a_finished_runs_unread_state_is_settled_before_the_next_run_records(self, reg: Registry) -> None:
        sid = self.fresh("docs")
        reg.add_source(sid, kind="folder", location="/srv/docs", owner="t", kb=self.fresh("kb"))
        # Given a run that recorded a cursor and succeeded, its state never read (so not yet promoted)
        ok, _ = reg.start_sync_run(sid, "test")
        reg.set_pending_state(sid, {"listing": {"seq": 1}, "pages": {"a": 1}})
        self.finish(reg, ok)
        # When the next run records first, Then the finished run's state is promoted, not replaced
        nxt, _ = reg.start_sync_run(sid, "test")
        reg.set_pending_state(sid, {"pages": None})
        assert reg.planned_state(sid, nxt) == {"pages": None}
        assert reg.planned_state(sid, ok) is None
        # Given that run failing, its pending unread, When a third run records, Then it is dropped
        self.finish(reg, nxt, error="boom")
        third, _ = reg.start_sync_run(sid, "test")
        reg.set_pending_state(sid, {"listing": {"seq": 3}})
        assert reg.planned_state(sid, third) == {"listing": {"seq": 3}}
        self.finish(reg, third, error="boom")
        assert reg.source_state(sid) == {"listing": {"seq": 1}, "pages": {"a": 1}}

    def test_nothing_is_recorded_without_an_open_run_and_a_replaced_source_forgets(self, reg: Registry) -> None:
        sid, kb = self.fresh("docs"), self.fresh("kb")
        reg.add_source(sid, kind="folder", location="/srv/docs", owner="t", kb=kb)
        reg.set_pending_state(sid, {"listing": {"seq": 1}})  # no run open: nothing
        assert reg.source_state(sid) == {}
        run, _ = reg.start_sync_run(sid, "test")
        reg.set_pending_state(sid, {"listing": {"seq": 1}}, run_id=run + 7)  # not that run: nothing
        assert reg.planned_state(sid, run) is None
        reg.set_pending_state(sid, {"listing": {"seq": 1}}, run_id=run)
        self.finish(reg, run)
        assert reg.source_state(sid) == {"listing": {"seq": 1}}
        reg.add_source(sid, kind="folder", location="/srv/other", owner="t", kb=kb, replace=True)
        assert reg.source_state(sid) == {}

    def test_the_planned_cursor_belongs_to_its_run_only(self, reg: Registry) -> None:
        # Given a git source with an open run that listed commit c1
        sid = self.fresh("repo")
        reg.add_source(sid, kind="git", location="/srv/repo", owner="t", kb=self.fresh("kb"))
        run, _ = reg.start_sync_run(sid, "test")
        reg.set_pending_cursor(sid, {"commit": "c1", "ref": "main"})
        # Then that run reads c1, another run id reads nothing
        assert reg.planned_cursor(sid, run) == {"commit": "c1", "ref": "main"}
        assert reg.planned_cursor(sid, run + 1) is None
        assert reg.planned_cursor(self.fresh("nosuch"), run) is None
        # When the run finishes the cursor is promoted, and its planned value is offered to no one
        self.finish(reg, run)
        assert reg.source_cursor(sid) == {"commit": "c1", "ref": "main"}
        assert reg.planned_cursor(sid, run) is None

    def test_a_finished_runs_unread_cursor_is_settled_before_the_next_run_records(self, reg: Registry) -> None:
        # Given a git source whose run listed c1 and succeeded, its cursor read by no one yet
        sid = self.fresh("repo")
        reg.add_source(sid, kind="git", location="/srv/repo", owner="t", kb=self.fresh("kb"))
        first, _ = reg.start_sync_run(sid, "test")
        reg.set_pending_cursor(sid, {"commit": "c1", "ref": "main"})
        self.finish(reg, first)
        # When the next run records c2 before anything reads the cursor
        second, _ = reg.start_sync_run(sid, "test")
        reg.set_pending_cursor(sid, {"commit": "c2", "ref": "main"})
        # Then c1 was promoted, not overwritten: the open run diffs against it, and plans c2
        assert reg.source_cursor(sid) == {"commit": "c1", "ref": "main"}
        assert reg.planned_cursor(sid, second) == {"commit": "c2", "ref": "main"}


__all__ = ["AttemptsContract", "RunLedgerContract", "SourceStateContract"]
