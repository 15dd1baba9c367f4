"""The freshness registry calls on SQLite and PostgreSQL: stale labels from runs, withdrawals, pause, policy."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select

from freshindex.core.errors import ConfigError
from freshindex.registry import Registry
from freshindex.registry.schema import Chunk, Document, Tombstone

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def _doc(reg: Registry, doc_id: str, key: str, *, chunks: int = 2, **fields) -> None:
    with reg.session() as s:
        s.add(Document(id=doc_id, source_id="docs", key=key, etag="e", content_hash=f"h-{doc_id}", state="active",
                       version=1, first_seen_at=NOW - dt.timedelta(days=10), **fields))
        s.flush()
        for i in range(chunks):
            s.add(Chunk(id=f"{doc_id}-{i}", document_id=doc_id, source_id="docs", kb="default", ordinal=i,
                        content_hash=f"c-{doc_id}-{i}", text="t", kind="paragraph", anchor="a", state="live"))


def _finished_run(reg: Registry, *, error: str | None = None) -> None:
    run_id, _cs = reg.start_sync_run("docs", "cli")
    reg.set_run_planned(run_id, listed=1, planned=0, documents=[])
    reg.finish_sync_run(run_id, error=error)


def test_freshness_withdrawals_and_pause_on_both_databases(registry: Registry) -> None:
    registry.add_source("docs", kind="folder", location="/nowhere", owner="t", kb="default", poll_interval_s=60)
    # Never synced: not stale, nothing to label
    assert registry.source_freshness("default")[0].stale is False
    _finished_run(registry)
    verified = registry.source_freshness(source_id="docs")[0].last_verified_at
    assert verified is not None
    # A failed listing afterwards: stale (unreachable) with the last verified time kept
    _finished_run(registry, error="folder /nowhere does not exist")
    fresh = registry.stale_sources("default")["docs"]
    assert (fresh.stale_reason, fresh.last_verified_at, fresh.last_error) == (
        "unreachable", verified, "folder /nowhere does not exist")
    # Policy: positive seconds only
    with pytest.raises(ConfigError):
        registry.set_freshness_policy("docs", hard_expiry_s=0)
    assert registry.set_freshness_policy("docs", hard_expiry_s=3600).hard_expiry_s == 3600
    # Withdrawals: expired, superseded and (hard expiry) unverified, once each
    _doc(registry, "d-old", "old.md", valid_until=NOW - dt.timedelta(minutes=1))
    _doc(registry, "d-v3", "v3.md")
    _doc(registry, "d-v4", "v4.md", supersedes="v3.md", valid_from=NOW - dt.timedelta(seconds=1))
    early = registry.withdraw_due_documents(verified + dt.timedelta(minutes=1))
    assert sorted((w.key, w.reason) for w in early) == [("old.md", "expired"), ("v3.md", "superseded")]
    late = registry.withdraw_due_documents(verified + dt.timedelta(hours=2))
    assert [(w.key, w.reason, w.chunks) for w in late] == [("v4.md", "unverified", 2)]
    assert registry.withdraw_due_documents(verified + dt.timedelta(hours=3)) == []
    status = registry.chunk_status(["d-old-0", "d-v3-0", "d-v4-0"])
    assert all(st.tombstoned for st in status.values())
    assert status["d-old-0"].expired and status["d-v3-0"].superseded and status["d-v4-0"].expired
    with registry.session() as s:
        reasons = dict(s.execute(select(Tombstone.reason, func.count()).group_by(Tombstone.reason)).all())
        assert reasons == {"expired": 4, "superseded": 2}
        assert s.get(Document, "d-v4").etag is None  # re-read when the source is back
    # Pause holds webhook tickets; resume releases them
    registry.set_source_paused("docs", True)
    ticket = registry.accept_delivery("docs", "x-1", ["a.md"])
    assert registry.claim_due_tickets(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)) == []
    registry.set_source_paused("docs", False)
    claimed = registry.claim_due_tickets(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5))
    assert [t.id for t in claimed] == [ticket.ticket_id]
