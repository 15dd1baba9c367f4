"""The access decision after the vector query: the registry's current ACL, then a recheck for sensitive sources.

The filter inside the vector query (:func:`acl.principal.query_filter`)
matches what each *point* says. A point's ACL can be older than the
registry's: ``sources update --acl`` (or a changed sidecar, rule or S3 tag)
bumps the document's ``acl_version`` in the registry at once, and the points
are re-tagged only by the next build. So every hit is decided again here
against the registry's row of its document, which makes a revocation effective
on the very next query, and makes a rollback to an older snapshot unable to
bring old ACLs back:

1. no registry row: ``orphan``; a tombstoned chunk: ``tombstoned``;
2. the registry's tenant and ACL for the document must allow the principal
   (:func:`acl.principal.allows`); when they do not, the denial reason is
   ``acl_version`` if the point was written under an older ACL version (the
   case this step exists for) and ``acl`` or ``tenant`` otherwise;
3. for a sensitive document (:func:`acl.model.is_sensitive`), when an
   external ACL source is configured (the HTTP permission service), it is
   asked again (:class:`SensitiveRecheck`), through a short cache whose key
   includes the principal's whole scope; no answer denies
   (``recheck_unavailable``), fail closed. Without one, the registry row of
   step 2 is the ACL source's own answer;
4. last, a document past its validity (``valid_until``, its source's hard
   expiry) or superseded is ``expired``: withdrawn at once, removed by the
   next build. Only a document the principal may read gets this far, so
   ``expired`` may be told to the caller.

Denials are returned as :class:`DenialRecord` for the audit trail and the
metric; the caller-facing packet never tells them apart from "not found".

What this does not guarantee: that the registry row is newer than the ACL
source itself (a permission changed at the source reaches the registry on
the next sync, or on the next recheck for sensitive documents).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from freshindex.acl.model import is_sensitive
from freshindex.acl.principal import Principal, allows


class Verdict(StrEnum):
    """What happens to one hit. The non-servable values are audit and metric labels (a bounded set)."""

    SERVABLE = "servable"
    TOMBSTONED = "tombstoned"  # the registry has retired the chunk since the snapshot was built
    ORPHAN = "orphan"  # the registry has no row for the point at all
    ACL_VERSION = "acl_version"  # written under an older ACL that allowed it; the current one does not
    ACL = "acl"  # the current ACL denies it (the query filter should already have)
    TENANT = "tenant"  # another tenant's document
    RECHECK = "recheck"  # a sensitive document the ACL source now denies
    RECHECK_UNAVAILABLE = "recheck_unavailable"  # a sensitive document the ACL source could not confirm
    EXPIRED = "expired"  # past its valid_until or hard expiry, or superseded: withdrawn before the next build

    @property
    def denial(self) -> bool:
        return self in _DENIALS


_DENIALS = frozenset({Verdict.ACL_VERSION, Verdict.ACL, Verdict.TENANT, Verdict.RECHECK,
                      Verdict.RECHECK_UNAVAILABLE})


class DocumentStatus(Protocol):
    """What the registry says of one chunk and its document (``registry.records.ChunkStatus`` is one)."""

    @property
    def tombstoned(self) -> bool: ...

    @property
    def document_id(self) -> str: ...

    @property
    def source_id(self) -> str: ...

    @property
    def acl(self) -> tuple[str, ...]: ...

    @property
    def tenant(self) -> str: ...

    @property
    def sensitivity(self) -> str: ...

    @property
    def acl_version(self) -> int: ...


class SensitiveRecheck(Protocol):
    """Asks the ACL source whether ``principal`` may read one document now; None when it cannot tell."""

    def allows(self, principal: Principal, *, source_id: str, key: str, document_id: str) -> bool | None: ...


@dataclass(frozen=True)
class DenialRecord:
    """One denial, for the audit trail (``acl_denials``) and ``freshindex_acl_denials_total``."""

    kb: str
    principal: str
    tenant: str
    document_id: str
    chunk_id: str
    reason: Verdict
    policy_version: int | None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"kb": self.kb, "principal": self.principal, "tenant": self.tenant, "document_id": self.document_id,
                "chunk_id": self.chunk_id, "reason": str(self.reason), "policy_version": self.policy_version,
                "detail": self.detail}


@dataclass(frozen=True)
class PointAcl:
    """What a hit's point says that :func:`decide` reads: the ACL version it was written under, and its key.

    Built from the point's payload with :meth:`of`; a payload without an ACL
    version (or with one that is not a number) was written before versions
    existed: version 0, older than any the registry holds.
    """

    acl_version: int = 0
    key: str = ""

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> PointAcl:
        return cls(acl_version=_int(payload.get("acl_version")), key=str(payload.get("key") or ""))


def decide(principal: Principal, point: PointAcl, status: DocumentStatus | None,
           recheck: SensitiveRecheck | None = None) -> Verdict:
    """The verdict for one hit (see the module docstring for the order)."""
    if status is None:
        return Verdict.ORPHAN
    if status.tombstoned:
        return Verdict.TOMBSTONED
    if status.tenant != principal.tenant:
        return Verdict.TENANT
    if not allows(principal, status.acl, status.tenant):
        return Verdict.ACL_VERSION if point.acl_version < status.acl_version else Verdict.ACL
    if recheck is not None and is_sensitive(status.sensitivity):
        answer = recheck.allows(principal, source_id=status.source_id, key=point.key,
                                document_id=status.document_id)
        if answer is None:
            return Verdict.RECHECK_UNAVAILABLE
        if not answer:
            return Verdict.RECHECK
    # After every access check, so only a document the principal may read is ever reported as expired.
    if getattr(status, "expired", False) or getattr(status, "superseded", False):
        return Verdict.EXPIRED
    return Verdict.SERVABLE


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


class CachedRecheck:
    """A :class:`SensitiveRecheck` behind a TTL cache keyed by the principal's scope and the document.

    The key holds the principal's tenant, id *and* groups, so a caller who
    narrows its groups never reads an answer computed for its wider scope.
    Only definite answers are cached; "cannot tell" is asked again next time.
    """

    def __init__(self, inner: SensitiveRecheck, *, ttl_s: float = 5.0, max_entries: int = 10_000) -> None:
        self._inner, self._ttl, self._max = inner, ttl_s, max_entries
        self._entries: OrderedDict[tuple[str, str, str], tuple[float, bool]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def allows(self, principal: Principal, *, source_id: str, key: str, document_id: str) -> bool | None:
        cache_key = (principal.scope, source_id, document_id)
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(cache_key)
            if entry is not None and now - entry[0] < self._ttl:
                self._entries.move_to_end(cache_key)
                self.hits += 1
                return entry[1]
            self.misses += 1
        answer = self._inner.allows(principal, source_id=source_id, key=key, document_id=document_id)
        if answer is not None:
            with self._lock:
                self._entries[cache_key] = (now, answer)
                self._entries.move_to_end(cache_key)
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
        return answer


class PermissionServiceLike(Protocol):
    """What :class:`ServiceRecheck` needs of :class:`acl.resolution.PermissionService`."""

    def check(self, source_id: str, key: str) -> Any: ...  # a DocumentAcl (tokens, tenant), None if unknown

    def groups_of(self, principal_id: str) -> frozenset[str]: ...


class ServiceRecheck:
    """:class:`SensitiveRecheck` against the HTTP permission service, for sources that take ACLs from it.

    For a source whose ``acl_sources`` does not include ``http`` the
    registry row already is the ACL source's answer: allowed. Otherwise the
    service decides, with the principal's groups narrowed to those the
    service still lists for it (a group removed from the directory stops
    counting before the credential that claims it expires). A service error
    is "cannot tell" (denied by :func:`decide`); a document the service does
    not know is denied.
    """

    def __init__(self, service: PermissionServiceLike, uses_service: Any) -> None:
        self._service, self._uses_service = service, uses_service

    def allows(self, principal: Principal, *, source_id: str, key: str, document_id: str) -> bool | None:
        if not self._uses_service(source_id):
            return True
        try:
            acl = self._service.check(source_id, key)
        except Exception:  # AclSourceError, or anything the transport raised: fail closed
            return None
        if acl is None:
            return False
        groups = principal.groups & self._service.groups_of(principal.id) if not principal.anonymous else frozenset()
        current = Principal(principal.id, frozenset(groups), principal.tenant)
        return allows(current, acl.tokens, getattr(acl, "tenant", None) or principal.tenant)


def denial_records(kb: str, principal: Principal, denied: Sequence[tuple[str, Verdict, DocumentStatus | None]]
                   ) -> list[DenialRecord]:
    """Audit records for ``(chunk id, verdict, status)`` denials of one query."""
    return [
        DenialRecord(kb=kb, principal=principal.id, tenant=principal.tenant,
                     document_id=status.document_id if status is not None else "", chunk_id=cid, reason=verdict,
                     policy_version=status.acl_version if status is not None else None)
        for cid, verdict, status in denied
    ]


__all__ = ["CachedRecheck", "DenialRecord", "DocumentStatus", "PermissionServiceLike", "PointAcl",
           "SensitiveRecheck", "ServiceRecheck", "Verdict", "decide", "denial_records"]
