"""API keys: credentials bound to a principal, stored as hashes.

A key is ``fik_<key_id>_<secret>``. ``key_id`` (16 hex characters) names the
row and may be shown and logged; the secret (32 random bytes, URL-safe
base64) is returned once by :meth:`KeyStore.create_api_key` and never stored:
the row keeps its sha256, which is enough for a random secret (no salt or
stretching needed, unlike a password).

What this does not guarantee: that a key is used by whom it was issued to
(it is a bearer credential), nor that ``last_used_at`` is exact (it is
written at most once a minute per key, so a busy key costs one write a minute).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update

from freshindex.core.errors import NotFoundError
from freshindex.registry.base import _Base
from freshindex.registry.schema import ApiKey, utcnow

PREFIX = "fik_"
#: How stale ``last_used_at`` may get before a verification writes it again.
TOUCH_INTERVAL = dt.timedelta(seconds=60)
# Compared against when the key id is unknown, so an unknown id costs the same hash compare as a known one.
_DUMMY_HASH = hashlib.sha256(b"freshindex-no-such-key").hexdigest()


@dataclass(frozen=True)
class ApiKeyInfo:
    """A key's public record: everything but the secret (and its hash)."""

    key_id: str
    principal: str
    groups: tuple[str, ...]
    tenant: str | None
    description: str | None
    created_at: dt.datetime
    revoked_at: dt.datetime | None
    last_used_at: dt.datetime | None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def as_dict(self) -> dict[str, Any]:
        return {"key_id": self.key_id, "principal": self.principal, "groups": list(self.groups),
                "tenant": self.tenant, "description": self.description,
                "created_at": self.created_at.isoformat(),
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
                "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None}


@dataclass(frozen=True)
class NewApiKey:
    """What :meth:`KeyStore.create_api_key` returns: the record and the full key, which exists only here."""

    info: ApiKeyInfo
    key: str


class ApiKeyRejected(Exception):
    """A presented key is not valid; ``reason`` is one of :data:`REJECT_REASONS` (a metric label)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: Why :meth:`KeyStore.verify_api_key` rejects a key (a bounded set: they become metric labels).
REJECT_REASONS = ("malformed_key", "unknown_key", "wrong_secret", "revoked_key")


def split_key(key: str) -> tuple[str, str] | None:
    """``(key_id, secret)`` of a well-formed key, else None (the secret may itself contain ``_``)."""
    if not key.startswith(PREFIX):
        return None
    key_id, sep, secret = key[len(PREFIX):].partition("_")
    if not sep or not key_id or not secret or len(key_id) > 32 or len(secret) > 256:
        return None
    return key_id, secret


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _info(r: ApiKey) -> ApiKeyInfo:
    return ApiKeyInfo(key_id=r.key_id, principal=r.principal, groups=tuple(r.groups or ()), tenant=r.tenant,
                      description=r.description, created_at=r.created_at,
                      revoked_at=r.revoked_at, last_used_at=r.last_used_at)


class KeyStore(_Base):
    """Create, list, revoke and verify API keys. Each call is one transaction; nothing is cached."""

    def create_api_key(self, principal: str, groups: Sequence[str] = (), *, tenant: str | None = None,
                       description: str | None = None) -> NewApiKey:
        """Issue a key for ``principal`` with ``groups``; the returned ``key`` is the only copy of the secret."""
        if not principal:
            raise ValueError("an API key needs a principal")
        key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        clean = sorted({g for g in groups if g})
        row = ApiKey(key_id=key_id, secret_hash=_hash(secret), principal=principal, groups=clean, tenant=tenant,
                     description=description, created_at=utcnow())
        with self.session() as s:
            s.add(row)
            s.flush()
            info = _info(row)
        return NewApiKey(info=info, key=f"{PREFIX}{key_id}_{secret}")

    def list_api_keys(self, *, include_revoked: bool = True) -> list[ApiKeyInfo]:
        """Every key's record (never a secret), oldest first."""
        with self.session() as s:
            q = select(ApiKey).order_by(ApiKey.created_at, ApiKey.key_id)
            if not include_revoked:
                q = q.where(ApiKey.revoked_at.is_(None))
            return [_info(r) for r in s.scalars(q)]

    def revoke_api_key(self, key_id: str) -> ApiKeyInfo:
        """Revoke a key: the next verification of it fails. Revoking twice keeps the first time."""
        with self.session() as s:
            row = s.get(ApiKey, key_id)
            if row is None:
                raise NotFoundError(f"no API key {key_id!r} (see `freshindex keys list`)")
            if row.revoked_at is None:
                row.revoked_at = utcnow()
            s.flush()
            return _info(row)

    def verify_api_key(self, key: str, *, now: dt.datetime | None = None) -> ApiKeyInfo:
        """The record of a valid, unrevoked ``key``; raises :class:`ApiKeyRejected` otherwise.

        The secret is compared in constant time with the stored hash. Reads
        the row on every call (no cache), so a revocation takes effect on the
        next request. Touches ``last_used_at`` when it is older than
        :data:`TOUCH_INTERVAL` (``now`` is the clock, injectable for tests).
        """
        parts = split_key(key)
        if parts is None:
            raise ApiKeyRejected("malformed_key")
        key_id, secret = parts
        now = now or utcnow()
        with self.session() as s:
            row = s.get(ApiKey, key_id)
            matches = hmac.compare_digest(_hash(secret), row.secret_hash if row is not None else _DUMMY_HASH)
            if row is None:
                raise ApiKeyRejected("unknown_key")
            if not matches:
                raise ApiKeyRejected("wrong_secret")
            if row.revoked_at is not None:
                raise ApiKeyRejected("revoked_key")
            info = _info(row)
            last = row.last_used_at
            if last is None or now - last >= TOUCH_INTERVAL:
                # Conditional, so concurrent verifications of one key write once.
                s.execute(update(ApiKey).where(ApiKey.key_id == key_id)
                          .where((ApiKey.last_used_at.is_(None)) | (ApiKey.last_used_at < now - TOUCH_INTERVAL))
                          .values(last_used_at=now))
        return info
