"""A document's ACL, read through its source's connector: for the planner's re-tags and each document task.

An ACL that cannot be resolved is never served wider: the document task
records it as a per-document error (:func:`resolve_document_acl`), and the
planner keeps the previous ACL (``workers/planner.py``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from freshindex.acl.model import AclError, DocumentAcl
from freshindex.acl.resolution import AclResolver, AclSourceError, SourceAcl
from freshindex.core.errors import DocumentError
from freshindex.registry import SourceInfo
from freshindex.workers.connectors import Connector

if TYPE_CHECKING:
    from freshindex.workers.pipeline import PipelineContext


def acl_resolver(ctx: PipelineContext, source_acl: SourceAcl, connector: Connector, *,
                 sidecar_keys: Collection[str] | None = None) -> AclResolver:
    """An ACL resolver reading sidecars (and S3 tags) through ``connector``; one per sync or document task."""

    def read(key: str) -> bytes | None:
        try:
            return connector.fetch(key)
        except DocumentError as exc:
            if exc.reason == DocumentError.VANISHED:
                return None  # no such sidecar
            raise

    return AclResolver(source_acl, read=read, sidecar_keys=sidecar_keys, tags=getattr(connector, "acl_tags", None),
                       service=ctx.acl_service)


def resolve_document_acl(ctx: PipelineContext, source: SourceInfo, connector: Connector, key: str) -> DocumentAcl:
    """The document's ACL; a source that cannot say raises :class:`DocumentError` (never served wider).

    On the inline path (``ctx.batch``) one resolver serves the whole run: each folder's sidecar is read
    once, and with the sidecars the run's complete listing saw (``RunBatch.sidecars``) nothing
    else is read.  A document task (Celery) makes its own: its process may have listed another run.
    """
    try:
        source_acl = SourceAcl.of(source)
        if ctx.batch is not None:
            resolver = ctx.batch.acl_resolver(connector, source_acl, source.location, lambda keys: acl_resolver(
                ctx, source_acl, connector, sidecar_keys=keys))
        else:
            resolver = acl_resolver(ctx, source_acl, connector)
        return resolver.resolve(key)
    except AclSourceError as exc:
        raise DocumentError(exc.reason, exc.detail) from exc
    except AclError as exc:
        raise DocumentError(DocumentError.ACL_INVALID, str(exc)) from exc
