"""Audit trails: alias moves (who moved which alias, from what, to what, why) and access denials.

Denials (``acl_denials``) are written by the query path for every hit it
denied after the vector query (:mod:`acl.access`): principal, document,
reason and the ACL version that decided it. ``freshindex audit denials``
reads them.

Events are written inside the transaction that moves the snapshot records
(:mod:`registry.snapshots`), so the trail cannot miss a move the registry
recorded; it does not see a move of the store's alias the registry was never
told about.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from freshindex.registry.base import _Base
from freshindex.registry.schema import AclDenial, AliasEvent


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

    def record_denials(self, denials: Sequence[Any]) -> None:
        """Append the denials of one query (:class:`acl.access.DenialRecord`-like objects) to ``acl_denials``."""
        if not denials:
            return
        with self.session() as s:
            s.add_all(AclDenial(kb=d.kb, principal=d.principal[:255], tenant=d.tenant[:63],
                                document_id=d.document_id or None, chunk_id=d.chunk_id or None,
                                reason=str(d.reason), policy_version=d.policy_version, detail=d.detail or None)
                      for d in denials)

    def denials(self, kb: str | None = None, *, principal: str | None = None, reason: str | None = None,
                since: dt.datetime | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The newest denials first, optionally of one knowledge base, principal or reason, from ``since`` on."""
        with self.session() as s:
            q = select(AclDenial)
            if kb:
                q = q.where(AclDenial.kb == kb)
            if principal:
                q = q.where(AclDenial.principal == principal)
            if reason:
                q = q.where(AclDenial.reason == reason)
            if since is not None:
                q = q.where(AclDenial.at >= since)
            rows = s.scalars(q.order_by(AclDenial.id.desc()).limit(limit))
            return [{"id": r.id, "at": r.at.isoformat() if r.at else None, "kb": r.kb, "principal": r.principal,
                     "tenant": r.tenant, "document_id": r.document_id, "chunk_id": r.chunk_id, "reason": r.reason,
                     "policy_version": r.policy_version, "detail": r.detail} for r in rows]
