"""The injection client: a question and a principal in, a cited context block out.

First cut: dense retrieval on the knowledge base's alias with the ACL filter
inside the query, a recheck of every hit against the registry (tombstoned or
orphaned chunks are dropped even before the next swap), a per-document
quota, a character budget, and rendering.  Below ``min_score`` the answer is
an *insufficient evidence* packet rather than weak context.

The client does not import the pipeline: its store, embedder and (optional)
recheck are passed in, so it runs next to the service or inside an app.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from freshindex.acl import Principal, query_filter, visible
from freshindex.core.errors import NotFoundError
from freshindex.core.naming import Naming
from freshindex.core.payload import PayloadError, PointPayload
from freshindex.core.types import Embedder
from freshindex.injection.types import ContextPacket, Evidence, insufficient_context, render_context
from freshindex.vectorstore.base import ScoredHit, VectorStore


class ChunkStatusLike(Protocol):
    """What the recheck says of one chunk (the registry's ``ChunkStatus`` is one)."""

    @property
    def tombstoned(self) -> bool: ...


#: chunk ids -> their status; ids missing from the mapping are orphans.
Recheck = Callable[[Sequence[str]], Mapping[str, ChunkStatusLike]]


class RecheckReason(StrEnum):
    """Why the recheck keeps or drops a hit (the drop reasons are ``ContextPacket.dropped`` keys)."""

    SERVABLE = "servable"
    TOMBSTONED = "tombstoned"  # the registry has retired the chunk since the snapshot was built
    ORPHAN = "orphan"  # the registry has no row for the point at all


@dataclass(frozen=True)
class RecheckVerdict:
    """The recheck's answer for one hit.

    It does not prove the chunk is current at its source: only that the
    registry, at the moment of the query, still serves it.
    """

    chunk_id: str
    reason: RecheckReason

    @property
    def servable(self) -> bool:
        return self.reason is RecheckReason.SERVABLE

    @classmethod
    def of(cls, chunk_id: str, status: ChunkStatusLike | None) -> RecheckVerdict:
        if status is None:
            return cls(chunk_id, RecheckReason.ORPHAN)
        if status.tombstoned:
            return cls(chunk_id, RecheckReason.TOMBSTONED)
        return cls(chunk_id, RecheckReason.SERVABLE)


def recheck_hits(recheck: Recheck, ids: Sequence[str]) -> dict[str, RecheckVerdict]:
    """One registry round trip for ``ids``: a verdict for each."""
    statuses = recheck(ids)
    return {cid: RecheckVerdict.of(cid, statuses.get(cid)) for cid in ids}


class InjectionClient:
    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        *,
        naming: Naming = Naming(),
        recheck: Recheck | None = None,
        min_score: float = 0.25,
        per_document: int = 2,
        max_chars: int = 6000,
    ) -> None:
        self.store, self.embedder, self.naming = store, embedder, naming
        self.recheck = recheck
        self.min_score, self.per_document, self.max_chars = min_score, per_document, max_chars

    def resolve(self, kb: str) -> tuple[str, str] | None:
        """(collection, snapshot id) the alias of ``kb`` points at now."""
        collection = self.store.get_alias(self.naming.alias(kb))
        if collection is None:
            return None
        return collection, self.naming.snapshot_of(collection) or collection

    def retrieve(self, question: str, *, kb: str, principal: Principal = Principal(), limit: int = 5) -> ContextPacket:
        vector = self.embedder.embed([question])[0].tolist()
        hits: list[ScoredHit] = []
        target = None
        for _attempt in range(2):
            target = self.resolve(kb)
            if target is None:
                return self._insufficient(question, kb, None, "the knowledge base has no snapshot yet")
            try:
                # One alias resolution, one collection: every hit comes from one snapshot.
                hits = self.store.search(target[0], vector, limit=limit * 4, flt=query_filter(principal))
                break
            except NotFoundError:
                continue  # the collection was pruned between resolve and search: resolve again
        assert target is not None
        _collection, snapshot_id = target
        dropped: dict[str, int] = {}
        verdicts = recheck_hits(self.recheck, [h.id for h in hits]) if (self.recheck and hits) else None
        kept: list[tuple[ScoredHit, PointPayload]] = []
        per_doc: dict[str, int] = {}
        for h in hits:
            if not visible(principal, h.payload):
                dropped["acl"] = dropped.get("acl", 0) + 1
                continue
            if verdicts is not None and not verdicts[h.id].servable:
                why = str(verdicts[h.id].reason)
                dropped[why] = dropped.get(why, 0) + 1
                continue
            if h.score < self.min_score:
                dropped["low_score"] = dropped.get("low_score", 0) + 1
                continue
            try:
                p = PointPayload.from_dict(h.payload)
            except PayloadError:
                # Not a point the builder wrote: nothing to cite it by.
                dropped["bad_payload"] = dropped.get("bad_payload", 0) + 1
                continue
            if per_doc.get(p.document_id, 0) >= self.per_document:
                dropped["per_document"] = dropped.get("per_document", 0) + 1
                continue
            per_doc[p.document_id] = per_doc.get(p.document_id, 0) + 1
            kept.append((h, p))
            if len(kept) >= limit:
                break
        evidence: list[Evidence] = []
        used = 0
        for h, p in kept:
            if evidence and used + len(p.text) > self.max_chars:
                dropped["budget"] = dropped.get("budget", 0) + 1
                continue
            used += len(p.text)
            evidence.append(
                Evidence(
                    n=len(evidence) + 1, chunk_id=h.id, score=h.score, text=p.text, title=p.title or "",
                    key=p.key, source_id=p.source_id, heading_path=p.heading_path, anchor=p.anchor, page=p.page,
                    doc_version=p.doc_version, snapshot_id=snapshot_id, written_in=p.snapshot_id, ocr=p.ocr,
                )
            )
        if not evidence:
            return self._insufficient(question, kb, snapshot_id, "no evidence above the relevance threshold", dropped)
        rendered = render_context(question, kb, snapshot_id, evidence)
        return ContextPacket(question, kb, snapshot_id, tuple(evidence), False, None, rendered, dropped)

    def _insufficient(self, question: str, kb: str, snapshot_id: str | None, reason: str,
                      dropped: dict[str, int] | None = None) -> ContextPacket:
        rendered = insufficient_context(kb, snapshot_id)
        return ContextPacket(question, kb, snapshot_id, (), True, reason, rendered, dropped or {})


#: The evidence types live in :mod:`injection.types` (importable by the thin HTTP client); re-exported here.
__all__ = ["ChunkStatusLike", "ContextPacket", "Evidence", "InjectionClient", "Recheck", "RecheckReason",
           "RecheckVerdict", "recheck_hits", "render_context"]
