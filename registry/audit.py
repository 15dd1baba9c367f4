"""The alias audit trail: who moved which knowledge base's alias, from what, to what, and why.

Events are written inside the transaction that moves the snapshot records
(:mod:`registry.snapshots`), so the trail cannot miss a move the registry
recorded; it does not see a move of the store's alias the registry was never
told about.
"""

from __future__ import annotations

from typing import Any

from freshindex.registry.base import _Base
from freshindex.registry.schema import AliasEvent
from sqlalchemy import select
from sqlalchemy.orm import Session


def record_alias_move(s: Session, kb: str, from_id: str | None, to_id: str, *, actor: str, reason: str) -> None:
    """Add an alias event to ``s``, the transaction that moves the snapshot records."""
    s.add(AliasEvent(kb=kb, from_snapshot_id=from_id, to_snapshot_id=to_id, actor=actor, reason=reason))


class AuditStore(_Base):
    """Read the alias events of a knowledge base."""

    def alias_events(self, kb: str, limit: int = 20) -> list[dict[str, Any]]:
        with self.session() as s:
            rows = s.scalars(select(AliasEvent).where(AliasEvent.kb == kb).order_by(AliasEvent.id.desc()).limit(limit))
            return [{"from": r.from_snapshot_id, "to": r.to_snapshot_id, "actor": r.actor, "reason": r.reason,
                     "at": r.at.isoformat()} for r in rows]
