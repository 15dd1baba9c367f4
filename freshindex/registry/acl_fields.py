"""A document row's ACL fields: what a resolved ACL writes on a ``documents`` row, and when its version moves.

Shared by :mod:`registry.staging` (a document staged with its ACL) and
:mod:`registry.document_acl` (a permission change without a new version), so
neither imports the other.  It does not resolve an ACL (that is
:mod:`acl.resolution`, which the registry does not import), stage a re-tag or
open a session: the caller's session holds the row.
"""

from __future__ import annotations

from typing import Protocol

from freshindex.registry.schema import Document

#: The error reason recorded against a document whose ACL source could not be read or parsed.
ACL_INVALID = "acl_invalid"


class AclLike(Protocol):
    """What the registry needs of a resolved ACL (``acl.model.DocumentAcl`` is one)."""

    # read-only: a frozen dataclass (DocumentAcl) provides them
    @property
    def tokens(self) -> tuple[str, ...]: ...
    @property
    def tenant(self) -> str: ...
    @property
    def sensitivity(self) -> str: ...
    @property
    def origin(self) -> str: ...

    def fingerprint(self) -> str: ...


def apply_acl(doc: Document, acl: AclLike, *, floor: int) -> bool:
    """Store ``acl`` on ``doc`` if its fingerprint changed; True when ``acl_version`` moved.

    A document never resolved before (``acl`` null, as after the upgrade to
    this schema) counts as changed: what its points carry is not known, so
    they are re-tagged once.
    """
    fingerprint = acl.fingerprint()
    if doc.error_reason == ACL_INVALID:
        doc.error_reason = doc.error_detail = None
    if doc.acl_fingerprint == fingerprint and doc.acl is not None:  # a cleared fingerprint never matches
        return False
    doc.acl, doc.tenant, doc.sensitivity = list(acl.tokens), acl.tenant, str(acl.sensitivity)
    doc.acl_fingerprint, doc.acl_origin = fingerprint, acl.origin[:16]
    doc.acl_version = max((doc.acl_version or 0) + 1, floor)
    return True


__all__ = ["ACL_INVALID", "AclLike", "apply_acl"]
