"""What the retrievers share: the refusal, the per-source metadata, the result list, the 0-1 scores.

No framework is imported here: the LangChain and LlamaIndex modules build
their own types from :func:`evidence_metadata` and wrap them in
:class:`Retrieved`. What it does not do: give a score a meaning across
questions (:func:`relative_scores` compares the sources of one packet only).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from freshindex.core.errors import FreshIndexError
from freshindex.injection.types import ContextPacket, Evidence

#: What a retriever does with an insufficient-evidence packet: an empty :class:`Retrieved` carrying the
#: reason (the default), or :class:`InsufficientEvidence` raised.
OnInsufficient = Literal["empty", "raise"]


class InsufficientEvidence(FreshIndexError):
    """The service found nothing that supports an answer (raised only with ``on_insufficient="raise"``).

    ``reason`` is the packet's reason (``no snapshot yet``, ``nothing above the relevance threshold``,
    ...), ``next_actions`` what it proposes (refresh a named source, ask its owner), ``packet`` the whole
    :class:`~injection.types.ContextPacket` (its ``rendered`` block tells a model to say it cannot answer).
    """

    def __init__(self, packet: ContextPacket) -> None:
        super().__init__(f"insufficient evidence in {packet.kb!r}: {packet.reason or 'no reason given'}")
        self.packet = packet
        self.reason = packet.reason
        self.next_actions = [a.as_dict() for a in packet.search.next_actions] if packet.search else []


class Retrieved(list):  # list[Document] or list[NodeWithScore]
    """A retriever's result: the framework's documents in evidence order, plus the packet's verdict.

    It is a ``list`` (what the frameworks expect) with attributes: ``insufficient`` (true: the list is
    empty and ``reason`` says why; nothing was made up to fill it), ``reason``, ``snapshot_id`` (the one
    snapshot every document came from), ``context`` (the packet's numbered, fenced block, ready for a
    prompt), ``citations`` and ``next_actions``, and ``packet`` itself.
    """

    def __init__(self, items: Iterable[Any], packet: ContextPacket) -> None:
        super().__init__(items)
        self.packet = packet
        self.insufficient = packet.insufficient
        self.reason = packet.reason
        self.snapshot_id = packet.snapshot_id
        self.context = packet.rendered
        self.citations = packet.citations
        self.next_actions = [a.as_dict() for a in packet.search.next_actions] if packet.search else []


def checked(packet: ContextPacket, on_insufficient: OnInsufficient) -> ContextPacket:
    """``packet``, or :class:`InsufficientEvidence` raised when it refuses and the caller asked for that."""
    if packet.insufficient and on_insufficient == "raise":
        raise InsufficientEvidence(packet)
    return packet


def admitted(packet: ContextPacket) -> tuple[Evidence, ...]:
    """The evidence a retriever returns: none at all for a refusal (whatever the packet carries)."""
    return () if packet.insufficient else packet.evidence


def citation_source(e: Evidence) -> str:
    """Where the citation points: ``key#anchor``, or the key alone for a chunk without an anchor.

    A web source's key is the page's URL, so this is the URL of the cited section; other kinds' keys are
    their path or object key in the source. It is the citation without its number, version and snapshot.
    """
    return f"{e.key}#{e.anchor}" if e.anchor else e.key


def evidence_metadata(e: Evidence, packet: ContextPacket) -> dict[str, Any]:
    """One source's metadata: its citation, ``source`` (:func:`citation_source`, the key LangChain's
    source-citing chains read), snapshot and raw score first, then where it came from."""
    return {
        "citation": e.citation, "source": citation_source(e), "snapshot_id": e.snapshot_id, "score": e.score,
        "n": e.n, "kb": packet.kb,
        "key": e.key, "anchor": e.anchor, "title": e.title, "heading_path": list(e.heading_path),
        "page": e.page, "page_end": e.page_end, "doc_version": e.doc_version, "source_id": e.source_id,
        "chunk_id": e.chunk_id, "date": e.date, "stale": e.stale, "verified_at": e.verified_at, "ocr": e.ocr,
        "also_in": [m.citation for m in e.also_in],
    }


def relative_scores(scores: Sequence[float]) -> list[float]:
    """The scores of one packet's sources mapped onto 0-1, order kept: ``score / best``.

    The service's score orders the sources of one answer; its scale depends on how the server ranks
    (by default the coverage reranker's share of the question's terms plus a rank prior, 0 to 1.2; with
    ``context.lexical_rerank`` off, a rank-fusion score; an application's reranker, any number). So the
    mapping is relative: the strongest source is 1.0 and each other is its share of the strongest. Should
    a score be negative (a reranker's), the lowest becomes 0: ``(score - low) / (best - low)`` with
    ``low = min(0, lowest)``.
    Equal scores (or a single one) are all 1.0. Whether to answer at all is the packet's decision
    (``insufficient``), not a threshold on these numbers: they say nothing across questions.
    """
    if not scores:
        return []
    low, best = min(0.0, *scores), max(scores)
    if best <= low:
        return [1.0] * len(scores)
    return [min(1.0, max(0.0, (s - low) / (best - low))) for s in scores]


__all__ = ["InsufficientEvidence", "OnInsufficient", "Retrieved", "admitted", "checked", "citation_source",
           "evidence_metadata", "relative_scores"]
