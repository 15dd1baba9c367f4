"""LlamaIndex: :class:`FreshIndexRetriever`, a ``BaseRetriever`` over a running ``freshindex serve``.

Install ``freshindex[llamaindex]`` (llama-index-core only)::

    from freshindex.integrations.llamaindex import FreshIndexRetriever
    retriever = FreshIndexRetriever("http://127.0.0.1:8080", token="...", kb="default")
    nodes = retriever.retrieve("How do I rotate the signing key?")

Each ``NodeWithScore`` is one piece of evidence: its ``score`` a similarity
in 0-1, the service's score relative to the packet's best (the strongest
source 1.0, each other its share of it:
:func:`~integrations.common.relative_scores`), its ``TextNode`` the text
(``id_`` the chunk id) with the citation, ``source``, snapshot and the
service's raw ``score`` first in ``metadata``
(:func:`~integrations.common.evidence_metadata`); only ``citation`` is shown
to the model by LlamaIndex's own formatting, and no metadata is embedded.
``retrieve`` and ``aretrieve`` return a :class:`~integrations.common.Retrieved`:
for a question the knowledge base cannot answer it is empty with
``insufficient`` true and ``reason`` set (``on_insufficient="raise"``
raises :class:`~integrations.common.InsufficientEvidence` instead). A query
engine over it answers "Empty Response" then; it never sees made-up nodes.

What it does not guarantee: the fence (LlamaIndex formats node text itself;
``nodes.context`` is the packet's fenced block), nor the verdict attributes
when ``_retrieve`` is called directly (the list is then a plain list), nor
that a node's 0-1 score means the same across questions (a
``similarity_cutoff`` keeps the sources close to the best one; whether there
is an answer at all is ``nodes.insufficient``).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType, TextNode

from freshindex.injection.async_http import AsyncFreshIndexClient
from freshindex.injection.http import FreshIndexClient
from freshindex.injection.types import ContextPacket
from freshindex.integrations.common import (
    InsufficientEvidence,
    OnInsufficient,
    Retrieved,
    admitted,
    checked,
    evidence_metadata,
    relative_scores,
)

# The packets of the retrieve() call running in this context. A list, not the packet: LlamaIndex runs
# aretrieve's body in a task of its own (a copy of the context), which can fill a list it was handed but
# not set a variable its caller sees.
_PACKETS: ContextVar[list[ContextPacket] | None] = ContextVar("freshindex_llamaindex_packets", default=None)


class FreshIndexRetriever(BaseRetriever):
    """Cited evidence from a freshindex knowledge base as LlamaIndex ``NodeWithScore`` objects.

    ``base_url`` and ``token`` (the caller's own API key or JWT), or a ready
    ``client`` and/or ``async_client``; ``groups`` narrows what the
    credential may read; ``limit`` caps the evidence (1-50).
    """

    def __init__(self, base_url: str | None = None, *, token: str | None = None, kb: str = "default",
                 limit: int = 5, groups: list[str] | tuple[str, ...] = (),
                 on_insufficient: OnInsufficient = "empty", client: FreshIndexClient | None = None,
                 async_client: AsyncFreshIndexClient | None = None, **kwargs: Any) -> None:
        if base_url is None and client is None and async_client is None:
            raise ValueError("FreshIndexRetriever needs base_url (and token), or client / async_client")
        super().__init__(**kwargs)
        self.kb, self.limit, self.groups, self.on_insufficient = kb, limit, list(groups), on_insufficient
        self._base_url, self._token = base_url, token
        self._client, self._async_client = client, async_client

    def __repr__(self) -> str:  # never the token
        return f"FreshIndexRetriever(kb={self.kb!r}, base_url={self._base_url!r})"

    def _sync(self) -> FreshIndexClient:
        if self._client is None:
            if self._base_url is None:
                raise ValueError("no sync client: pass client= or base_url=")
            self._client = FreshIndexClient(self._base_url, token=self._token)
        return self._client

    async def _apacket(self, query: str) -> ContextPacket:
        if self._async_client is not None:
            return await self._async_client.retrieve(query, kb=self.kb, limit=self.limit, groups=self.groups)
        if self._base_url is None:
            raise ValueError("no async client: pass async_client= or base_url=")
        # One client per call: an httpx.AsyncClient's connections belong to the event loop that opened them.
        async with AsyncFreshIndexClient(self._base_url, token=self._token) as client:
            return await client.retrieve(query, kb=self.kb, limit=self.limit, groups=self.groups)

    def _nodes(self, packet: ContextPacket) -> list[NodeWithScore]:
        sink = _PACKETS.get()
        if sink is not None:
            sink.append(packet)
        checked(packet, self.on_insufficient)
        evidence = admitted(packet)
        nodes = []
        for e, similarity in zip(evidence, relative_scores([e.score for e in evidence]), strict=True):
            meta = evidence_metadata(e, packet)  # "score": the service's own, unmapped
            hidden = [k for k in meta if k != "citation"]
            node = TextNode(id_=e.chunk_id, text=e.text, metadata=meta, excluded_llm_metadata_keys=hidden,
                            excluded_embed_metadata_keys=list(meta))
            nodes.append(NodeWithScore(node=node, score=similarity))
        return nodes

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        packet = self._sync().retrieve(query_bundle.query_str, kb=self.kb, limit=self.limit, groups=self.groups)
        return self._nodes(packet)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(await self._apacket(query_bundle.query_str))

    def retrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        """LlamaIndex's retrieve (callbacks, instrumentation), answered as a :class:`Retrieved`."""
        sink: list[ContextPacket] = []
        token = _PACKETS.set(sink)
        try:
            nodes = super().retrieve(str_or_query_bundle)
        finally:
            _PACKETS.reset(token)
        return Retrieved(nodes, sink[-1]) if sink else nodes

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        """LlamaIndex's aretrieve, answered as a :class:`Retrieved`."""
        sink: list[ContextPacket] = []
        token = _PACKETS.set(sink)
        try:
            nodes = await super().aretrieve(str_or_query_bundle)
        finally:
            _PACKETS.reset(token)
        return Retrieved(nodes, sink[-1]) if sink else nodes


__all__ = ["FreshIndexRetriever", "InsufficientEvidence", "Retrieved"]
