"""What the retrievers share: the refusal, the per-source metadata, the result list.

No framework is imported here: the LangChain and LlamaIndex modules build
their own types from :func:`evidence_metadata` and wrap them in
:class:`Retrieved`.
"""

from __future__ import annotations

from collections.abc import Iterable
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


def evidence_metadata(e: Evidence, packet: ContextPacket) -> dict[str, Any]:
    """One source's metadata: its citation, snapshot and score first, then where it came from."""
    return {
        "citation": e.citation, "snapshot_id": e.snapshot_id, "score": e.score, "n": e.n, "kb": packet.kb,
        "key": e.key, "anchor": e.anchor, "title": e.title, "heading_path": list(e.heading_path),
        "page": e.page, "page_end": e.page_end, "doc_version": e.doc_version, "source_id": e.source_id,
        "chunk_id": e.chunk_id, "date": e.date, "stale": e.stale, "verified_at": e.verified_at, "ocr": e.ocr,
        "also_in": [m.citation for m in e.also_in],
    }


__all__ = ["InsufficientEvidence", "OnInsufficient", "Retrieved", "admitted", "checked", "evidence_metadata"]
