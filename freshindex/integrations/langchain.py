"""LangChain: :class:`FreshIndexRetriever`, a ``BaseRetriever`` over a running ``freshindex serve``.

Install ``freshindex[langchain]`` (langchain-core only)::

    from freshindex.integrations.langchain import FreshIndexRetriever
    retriever = FreshIndexRetriever(base_url="http://127.0.0.1:8080", token="...", kb="default")
    docs = retriever.invoke("How do I rotate the signing key?")

Each ``Document`` is one piece of evidence: ``page_content`` its text,
``id`` its chunk id, ``metadata`` its ``citation`` (``[n] key#anchor (vN,
snapshot S)``), its ``source`` (``key#anchor``: what the citation points at,
the key LangChain's source-citing chains and document prompts read as
``{source}``), ``snapshot_id`` and ``score`` (the service's) first, then
where it came from (:func:`~integrations.common.evidence_metadata`). The list is a
:class:`~integrations.common.Retrieved`: for a question the knowledge base
cannot answer it is empty with ``insufficient`` true and ``reason`` set
(``on_insufficient="raise"`` raises :class:`~integrations.common.InsufficientEvidence`
instead). ``ainvoke`` uses the asyncio client.

What it does not guarantee: that a chain keeps the fence. ``page_content``
is the source's text as indexed; a prompt built from it by LangChain's own
document formatting is not fenced against instructions inside a document.
Put ``docs.context`` (the packet's numbered, nonce-fenced block) in the
prompt for that. Errors are the HTTP client's (:mod:`injection.http`).
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr

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
)


class FreshIndexRetriever(BaseRetriever):
    """Cited evidence from a freshindex knowledge base as LangChain ``Document`` objects.

    Give ``base_url`` (and ``token``, the caller's own API key or JWT), or a
    ready ``client`` (a :class:`FreshIndexClient`) and/or ``async_client``
    (an :class:`AsyncFreshIndexClient`). ``groups`` narrows what the
    credential may read; ``limit`` caps the evidence (1-50).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: str | None = None
    token: SecretStr | None = None
    kb: str = "default"
    limit: int = Field(default=5, ge=1, le=50)
    groups: list[str] = Field(default_factory=list)
    on_insufficient: OnInsufficient = "empty"
    client: FreshIndexClient | None = None
    async_client: AsyncFreshIndexClient | None = None

    _sync: FreshIndexClient | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        if self.base_url is None and self.client is None and self.async_client is None:
            raise ValueError("FreshIndexRetriever needs base_url (and token), or client / async_client")

    def _token(self) -> str | None:
        return self.token.get_secret_value() if self.token is not None else None

    def _sync_client(self) -> FreshIndexClient:
        if self.client is not None:
            return self.client
        if self._sync is None:
            if self.base_url is None:
                raise ValueError("no sync client: pass client= or base_url=")
            self._sync = FreshIndexClient(self.base_url, token=self._token())
        return self._sync

    async def _aretrieve(self, query: str) -> ContextPacket:
        if self.async_client is not None:
            return await self.async_client.retrieve(query, kb=self.kb, limit=self.limit, groups=self.groups)
        if self.base_url is None:
            raise ValueError("no async client: pass async_client= or base_url=")
        # One client per call: an httpx.AsyncClient's connections belong to the event loop that opened
        # them, and a caller may run each query in a loop of its own (asyncio.run per question).
        async with AsyncFreshIndexClient(self.base_url, token=self._token()) as client:
            return await client.retrieve(query, kb=self.kb, limit=self.limit, groups=self.groups)

    def _documents(self, packet: ContextPacket) -> Retrieved:
        checked(packet, self.on_insufficient)
        return Retrieved((Document(page_content=e.text, id=e.chunk_id, metadata=evidence_metadata(e, packet))
                          for e in admitted(packet)), packet)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        packet = self._sync_client().retrieve(query, kb=self.kb, limit=self.limit, groups=self.groups)
        return self._documents(packet)

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        return self._documents(await self._aretrieve(query))


__all__ = ["FreshIndexRetriever", "InsufficientEvidence", "Retrieved"]
