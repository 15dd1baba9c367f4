"""The LangChain and LlamaIndex retrievers against a real ``freshindex serve``: cited documents, and a refusal
passed through as an empty result with its reason."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.documents import Document
from llama_index.core.schema import MetadataMode, NodeWithScore

from freshindex.injection.http import Unauthorized
from freshindex.integrations import langchain as lc
from freshindex.integrations import llamaindex as li
from freshindex.integrations.common import InsufficientEvidence, Retrieved
from tests.integrations.conftest import ANSWERABLE, UNANSWERABLE, KbServer

#: The migration section's citation without its number: the hashing embedder the served kb uses ties the page's
#: deployment and migration sections (one first dense, the other first lexical), so either may be [1].
CITED = "guides/release.md#database-migration (v1, snapshot default-v1)"


def _cites(n: int) -> str:
    return f"[{n}] {CITED}"


def test_langchain_retriever_returns_cited_documents(kb_server: KbServer) -> None:
    # Given a retriever with ana's own key, When LangChain invokes it with a question the kb answers
    retriever = lc.FreshIndexRetriever(base_url=kb_server.url, token=kb_server.key, kb="default", limit=3)
    docs = retriever.invoke(ANSWERABLE)
    # Then the documents are the evidence, in order, each with its citation, snapshot and score
    assert isinstance(docs, Retrieved) and not docs.insufficient and docs.reason is None
    assert 1 <= len(docs) <= 3 and all(isinstance(d, Document) for d in docs)
    first = next(d for d in docs[:2] if d.metadata["source"] == "guides/release.md#database-migration")
    assert first.metadata["citation"] == _cites(first.metadata["n"]) and first.metadata["snapshot_id"] == "default-v1"
    assert isinstance(first.metadata["score"], float) and first.metadata["score"] > 0
    assert first.metadata["key"] == "guides/release.md" and "migrate down" in first.page_content
    assert first.metadata["source"] == "guides/release.md#database-migration"  # what source-citing chains read
    assert [d.metadata["n"] for d in docs] == list(range(1, len(docs) + 1)) and first.id == first.metadata["chunk_id"]
    cited = _cites(first.metadata["n"])
    assert docs.snapshot_id == "default-v1" and docs.citations[first.metadata["n"] - 1] == cited and cited in docs.context
    assert "token" not in repr(retriever) or "**" in repr(retriever)  # the key is a SecretStr


def test_langchain_refusal_is_an_empty_list_with_the_reason_or_raised(kb_server: KbServer) -> None:
    retriever = lc.FreshIndexRetriever(base_url=kb_server.url, token=kb_server.key)
    docs = retriever.invoke(UNANSWERABLE)
    assert docs == [] and isinstance(docs, Retrieved)
    assert docs.insufficient is True and docs.reason.startswith("insufficient evidence")
    assert "1974" in docs.reason and docs.snapshot_id == "default-v1"
    # (asked for) the same refusal as an exception carrying the reason and the packet
    raising = lc.FreshIndexRetriever(base_url=kb_server.url, token=kb_server.key, on_insufficient="raise")
    with pytest.raises(InsufficientEvidence) as info:
        raising.invoke(UNANSWERABLE)
    assert info.value.reason == docs.reason and info.value.packet.evidence == ()


def test_langchain_ainvoke_uses_the_async_client_and_agrees(kb_server: KbServer) -> None:
    retriever = lc.FreshIndexRetriever(base_url=kb_server.url, token=kb_server.key, limit=3)
    docs = asyncio.run(retriever.ainvoke(ANSWERABLE))
    assert [d.metadata["citation"] for d in docs] == retriever.invoke(ANSWERABLE).citations
    refused = asyncio.run(retriever.ainvoke(UNANSWERABLE))
    assert refused == [] and refused.insufficient


def test_langchain_wrong_key_is_the_clients_unauthorized(kb_server: KbServer) -> None:
    with pytest.raises(Unauthorized) as info:
        lc.FreshIndexRetriever(base_url=kb_server.url, token="fik_nope_nope").invoke(ANSWERABLE)
    assert info.value.status == 401


def test_llamaindex_retriever_returns_scored_cited_nodes(kb_server: KbServer) -> None:
    retriever = li.FreshIndexRetriever(kb_server.url, token=kb_server.key, kb="default", limit=3)
    nodes = retriever.retrieve(ANSWERABLE)
    assert isinstance(nodes, Retrieved) and not nodes.insufficient
    assert 1 <= len(nodes) <= 3 and all(isinstance(n, NodeWithScore) for n in nodes)
    top = nodes[0]
    assert top.node.metadata["citation"].startswith("[1] guides/release.md#") and top.node.metadata["snapshot_id"] == "default-v1"
    # Scores are LlamaIndex's 0-1 similarity: the strongest source 1.0, each other its share; the raw is kept
    raw = [n.node.metadata["score"] for n in nodes]
    assert top.score == 1.0 and raw[0] == max(raw) > 0 and top.node.node_id == top.node.metadata["chunk_id"]
    assert [n.score for n in nodes] == pytest.approx([r / raw[0] for r in raw]) and all(0 < n.score <= 1 for n in nodes)
    # What LlamaIndex shows a model: the citation and the text; no metadata goes into an embedding
    shown = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert top.node.metadata["citation"] in shown and "chunk_id" not in shown
    assert any(CITED in n.node.get_content(metadata_mode=MetadataMode.LLM) and "migrate down" in n.node.text
               for n in nodes[:2])
    assert top.node.get_content(metadata_mode=MetadataMode.EMBED).strip() == top.node.text.strip()
    # and the async path answers the same sources
    again = asyncio.run(retriever.aretrieve(ANSWERABLE))
    assert isinstance(again, Retrieved) and [n.node.node_id for n in again] == [n.node.node_id for n in nodes]


def test_llamaindex_refusal_is_empty_with_the_reason(kb_server: KbServer) -> None:
    retriever = li.FreshIndexRetriever(kb_server.url, token=kb_server.key)
    for nodes in (retriever.retrieve(UNANSWERABLE), asyncio.run(retriever.aretrieve(UNANSWERABLE))):
        assert nodes == [] and isinstance(nodes, Retrieved)
        assert nodes.insufficient and nodes.reason.startswith("insufficient evidence") and "[1]" not in nodes.context
    with pytest.raises(InsufficientEvidence, match="insufficient evidence"):
        li.FreshIndexRetriever(kb_server.url, token=kb_server.key, on_insufficient="raise").retrieve(UNANSWERABLE)
