"""Leases with fencing tokens (one builder per knowledge base, see :mod:`snapshots.lock`).

A lease is a row with an owner, an expiry (wall clock, seconds since the
epoch) and a token that grows with every acquisition.  Expiry depends on the
clocks of the processes agreeing; the token is what makes a late writer
detectable (:meth:`registry.snapshots.SnapshotStore.activate_snapshot`).
"""

from __future__ import annotations

import time

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from freshindex.registry.base import _Base
from freshindex.registry.db import affected_rows
from freshindex.registry.schema import Lock


class LockStore(_Base):
    """Acquire, renew, release and inspect named leases."""

    def acquire_lock(self, name: str, owner: str, ttl: float) -> int | None:
        """Take the lease ``name`` if it is free or expired.

        Returns a fencing token that grows with every acquisition, or None if
        someone else holds an unexpired lease.
        """
        now = time.time()
        with self.session() as s:
            self._lock_row(s, name)
            q = select(Lock).where(Lock.name == name)
            q = self._for_update(q)
            row = s.scalars(q).one()
            if row.owner is not None and row.expires_at > now and row.owner != owner:
                return None
            row.owner, row.token = owner, row.token + 1
            row.expires_at, row.acquired_at = now + ttl, now
            return row.token

    def renew_lock(self, name: str, token: int, ttl: float) -> bool:
        with self.session() as s:
            res = s.execute(
                update(Lock).where(Lock.name == name, Lock.token == token).values(expires_at=time.time() + ttl)
            )
            return affected_rows(res) == 1

    def release_lock(self, name: str, token: int) -> None:
        with self.session() as s:
            s.execute(update(Lock).where(Lock.name == name, Lock.token == token).values(owner=None, expires_at=0.0))

    def lock_holder(self, name: str) -> tuple[str | None, float, int]:
        with self.session() as s:
            row = s.get(Lock, name)
            if row is None:
                return None, 0.0, 0
            return row.owner, row.expires_at, row.token

    def _lock_row(self, s: Session, name: str) -> None:
        s.execute(self._insert(Lock).values(name=name, owner=None, token=0, expires_at=0.0).on_conflict_do_nothing())
