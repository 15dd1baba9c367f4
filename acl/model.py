"""ACL tokens and a document's effective ACL: the one vocabulary of ingest and query.

A token is what an ``acl`` list holds, in the registry and in a point's
payload: ``public`` (everyone), a group name as is (``hr``), or a user as
``user:<id>``.  Group names and user ids share one pattern that has no
``:``, so a group can never pass for a user token.  :class:`DocumentAcl` is
what resolution (:mod:`acl.resolution`) yields for one document; its
:meth:`~DocumentAcl.fingerprint` decides whether the registry's copy changed.

Pure standard library: the registry, the workers and the thin client may all
use it.  What it does not do: decide who is in a group (that is
:class:`acl.resolution.PermissionService` or the caller's credential).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

PUBLIC = "public"
USER_PREFIX = "user:"

#: Group names and user ids: no ':' (so never ``user:...``), no spaces, no control characters.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")

#: Sidecar file names: one per folder, or ``<name>.acl.json`` beside a document.
FOLDER_SIDECAR = ".freshindex-acl.json"
DOCUMENT_SIDECAR_SUFFIX = ".acl.json"


class AclError(ValueError):
    """A group name, user id, sensitivity or ACL document that cannot be used."""


class Sensitivity(StrEnum):
    """How sensitive a document is; ``confidential`` and ``restricted`` are rechecked at query time."""

    PUBLIC = "public"
    INTERNAL = "internal"
    CONFIDENTIAL = "confidential"
    RESTRICTED = "restricted"

    @property
    def sensitive(self) -> bool:
        return self in (Sensitivity.CONFIDENTIAL, Sensitivity.RESTRICTED)

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Sensitivity.PUBLIC: 0, Sensitivity.INTERNAL: 1, Sensitivity.CONFIDENTIAL: 2, Sensitivity.RESTRICTED: 3}


def sensitivity(value: str | None, default: str = Sensitivity.INTERNAL) -> Sensitivity:
    """Parse a sensitivity (case-insensitive); None or empty gives ``default``."""
    if value is None or not str(value).strip():
        return Sensitivity(default)
    try:
        return Sensitivity(str(value).strip().lower())
    except ValueError:
        raise AclError(f"unknown sensitivity {value!r}; known: {', '.join(s.value for s in Sensitivity)}") from None


def is_sensitive(value: str) -> bool:
    """Whether the query path must recheck a chunk of this sensitivity (unknown values count as sensitive)."""
    try:
        return Sensitivity(value).sensitive
    except ValueError:
        return True


def validate_group(name: str) -> str:
    """``name`` if it is a valid group name (``public`` included), else :class:`AclError`."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise AclError(f"invalid group name {name!r} (letters, digits, '_.@-', at most 128, no ':')")
    return name


def validate_user(user_id: str) -> str:
    if not isinstance(user_id, str) or not NAME_PATTERN.fullmatch(user_id):
        raise AclError(f"invalid user id {user_id!r} (letters, digits, '_.@-', at most 128, no ':')")
    return user_id


def user_token(user_id: str) -> str:
    """The ACL token of one user: ``user:<id>``."""
    return USER_PREFIX + validate_user(user_id)


def normalise_acl(groups: Iterable[str] = (), users: Iterable[str] = ()) -> tuple[str, ...]:
    """Groups and users as one sorted, deduplicated token tuple; any invalid name raises :class:`AclError`."""
    tokens = {validate_group(g) for g in groups} | {user_token(u) for u in users}
    return tuple(sorted(tokens))


def split_names(value: str | Iterable[str] | None) -> list[str]:
    """``"a, b,,c"`` or ``["a", " b"]`` -> ``["a", "b", "c"]`` (unvalidated)."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        if not isinstance(item, str):
            raise AclError(f"expected a name, got {item!r}")
        if item.strip():
            out.append(item.strip())
    return out


def is_sidecar(key: str) -> bool:
    """Whether a source key is an ACL sidecar (never indexed as a document)."""
    name = key.rsplit("/", 1)[-1]
    return name == FOLDER_SIDECAR or (name.endswith(DOCUMENT_SIDECAR_SUFFIX) and name != DOCUMENT_SIDECAR_SUFFIX)


@dataclass(frozen=True)
class DocumentAcl:
    """The effective ACL of one document: who may read it, in which tenant, how sensitive.

    ``tokens`` empty means nobody (deny-all).  ``origin`` says which ACL
    source decided last (``source``, ``rule``, ``sidecar``, ``s3``, ``http``,
    ``previous``); it is not part of the fingerprint.
    """

    tokens: tuple[str, ...]
    tenant: str = "default"
    sensitivity: str = Sensitivity.INTERNAL
    origin: str = "source"

    def fingerprint(self) -> str:
        """sha256 (hex) over tokens, tenant and sensitivity: equal fingerprints, equal permissions."""
        body = json.dumps([sorted(self.tokens), self.tenant, str(self.sensitivity)], separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()

    def as_dict(self) -> dict[str, object]:
        return {"acl": list(self.tokens), "tenant": self.tenant, "sensitivity": str(self.sensitivity),
                "origin": self.origin, "fingerprint": self.fingerprint()}


__all__ = [
    "DOCUMENT_SIDECAR_SUFFIX", "FOLDER_SIDECAR", "NAME_PATTERN", "PUBLIC", "USER_PREFIX", "AclError", "DocumentAcl",
    "Sensitivity", "is_sensitive", "is_sidecar", "normalise_acl", "sensitivity", "split_names", "user_token",
    "validate_group", "validate_user",
]
