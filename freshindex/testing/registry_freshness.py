"""The registry contract's freshness: stale labels from runs, the policy, withdrawals past their expiry, pause.

Every expiry is crossed with an injected ``now`` (``withdraw_due_documents``),
never by sleeping.  Checks, on whatever backend: a source never synced is not
stale, one whose last listing failed is (unreachable) with its last verified
time kept; a freshness policy takes positive seconds only; a document past
its ``valid_until`` is withdrawn as expired, one superseded by a valid newer
version as superseded, and, past the source's hard expiry without a verified
listing, as unverified (re-read when the source is back), each once; a
paused source's webhook tickets wait until it resumes.

What it does not check: the sweep's schedule or the health labels built on
these (``tests/schedules``).
"""

from __future__ import annotations

import datetime as dt

import pytest

from freshindex.core.errors import ConfigError
from freshindex.registry import Registry
from freshindex.registry.records import SourceSetup
from freshindex.testing.registry_base import RegistrySuite


class FreshnessContract(RegistrySuite):
    """:class:`registry.freshness.FreshnessStore`."""

    def document(self, reg: Registry, sid: str, kb: str, key: str, now: dt.datetime, **fields: object) -> str:
        """A live document of two chunks written as a build leaves it; returns its id."""
        from freshindex.registry.schema import Chunk, Document

        doc = f"{sid}-{key}"
        with reg.session() as s:
            s.add(Document(id=doc, source_id=sid, key=key, etag="e", content_hash=f"h-{doc}", state="active",
                           version=1, first_seen_at=now - dt.timedelta(days=10), **fields))
            s.flush()
            for i in range(2):
                s.add(Chunk(id=f"{doc}-{i}", document_id=doc, source_id=sid, kb=kb, ordinal=i,
                            content_hash=f"c-{doc}-{i}", text="t", kind="paragraph", anchor="a", state="live"))
        return doc

    def finished_run(self, reg: Registry, sid: str, *, error: str | None = None) -> None:
        run_id, _cs = reg.start_sync_run(sid, "cli")
        reg.set_run_planned(run_id, listed=1, planned=0, documents=[])
        reg.finish_sync_run(run_id, error=error)

    def test_a_failed_listing_makes_a_source_stale_and_the_policy_takes_positive_seconds(self, reg: Registry) -> None:
        sid, kb = self.fresh("docs"), self.fresh("kb")
        reg.add_source(sid, kind="folder", location="/nowhere", owner="t", kb=kb, setup=SourceSetup(poll_interval_s=60))
        # Never synced: not stale, nothing to label
        assert reg.source_freshness(kb)[0].stale is False
        self.finished_run(reg, sid)
        verified = reg.source_freshness(source_id=sid)[0].last_verified_at
        assert verified is not None
        # A failed listing afterwards: stale (unreachable) with the last verified time kept
        self.finished_run(reg, sid, error="folder /nowhere does not exist")
        label = reg.stale_sources(kb)[sid]
        assert (label.stale_reason, label.last_verified_at, label.last_error) == (
            "unreachable", verified, "folder /nowhere does not exist")
        with pytest.raises(ConfigError):
            reg.set_freshness_policy(sid, hard_expiry_s=0)
        assert reg.set_freshness_policy(sid, hard_expiry_s=3600).hard_expiry_s == 3600

    def test_expired_superseded_and_unverified_documents_are_withdrawn_once_each(self, reg: Registry) -> None:
        from sqlalchemy import func, select

        from freshindex.registry.schema import Document, Tombstone

        sid, kb = self.fresh("docs"), self.fresh("kb")
        reg.add_source(sid, kind="folder", location="/nowhere", owner="t", kb=kb)
        self.finished_run(reg, sid)
        verified = reg.source_freshness(source_id=sid)[0].last_verified_at
        assert verified is not None
        reg.set_freshness_policy(sid, hard_expiry_s=3600)
        now = verified
        old = self.document(reg, sid, kb, "old.md", now, valid_until=now - dt.timedelta(minutes=1))
        v3 = self.document(reg, sid, kb, "v3.md", now)
        v4 = self.document(reg, sid, kb, "v4.md", now, supersedes="v3.md", valid_from=now - dt.timedelta(seconds=1))
        # Within the hard expiry: the expired and the superseded documents go
        mine = lambda ws: sorted((w.key, w.reason, w.chunks) for w in ws if w.source_id == sid)  # noqa: E731
        assert mine(reg.withdraw_due_documents(verified + dt.timedelta(minutes=1))) == [
            ("old.md", "expired", 2), ("v3.md", "superseded", 2)]
        # One hour later without a verified listing: the rest is unverified; then nothing is left to withdraw
        assert mine(reg.withdraw_due_documents(verified + dt.timedelta(seconds=3601))) == [("v4.md", "unverified", 2)]
        assert mine(reg.withdraw_due_documents(verified + dt.timedelta(hours=3))) == []
        status = reg.chunk_status([f"{old}-0", f"{v3}-0", f"{v4}-0"])
        assert all(st.tombstoned for st in status.values())
        assert status[f"{old}-0"].expired and status[f"{v3}-0"].superseded and status[f"{v4}-0"].expired
        with reg.session() as s:
            reasons = dict(s.execute(select(Tombstone.reason, func.count()).where(Tombstone.kb == kb)
                                     .group_by(Tombstone.reason)).all())
            assert reasons == {"expired": 4, "superseded": 2}
            row = s.get(Document, v4)
            assert row is not None and row.etag is None  # re-read when the source is back

    def test_a_paused_sources_tickets_wait_until_it_resumes(self, reg: Registry) -> None:
        sid = self.source(reg).id
        reg.set_source_paused(sid, True)
        ticket = reg.accept_delivery(sid, "x-1", ["a.md"]).ticket_id
        cutoff = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
        assert ticket not in {t.id for t in reg.claim_due_tickets(cutoff)}
        assert reg.source_freshness(source_id=sid)[0].paused
        reg.set_source_paused(sid, False)
        assert ticket in {t.id for t in reg.claim_due_tickets(cutoff)}


__all__ = ["FreshnessContract"]
