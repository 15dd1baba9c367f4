"""The frameworks' own conventions: LangChain's ``metadata["source"]``, LlamaIndex's 0-1 similarity.

The retrievers read a packet served over real HTTP semantics by ``httpx.MockTransport`` (the wire format
is ``ContextPacket.as_dict()``, as ``POST /v1/query`` answers), so the scores can be chosen: one above 1
(what the coverage reranker gives a chunk holding every term of the question), and negative ones (an
application's reranker). tests/integrations/test_retrievers.py checks the same against a real serve.
"""

from __future__ import annotations

import json

import httpx
import pytest
from langchain_core.documents import Document
from langchain_core.prompts import PromptTemplate, format_document
from llama_index.core.postprocessor import SimilarityPostprocessor
from llama_index.core.schema import QueryBundle

from freshindex.injection.http import FreshIndexClient
from freshindex.injection.types import ContextPacket, Evidence
from freshindex.integrations import langchain as lc
from freshindex.integrations import llamaindex as li
from freshindex.integrations.common import citation_source, relative_scores

#: The document prompt of LangChain's source-citing chains (``RetrievalQAWithSourcesChain``'s example prompt).
WITH_SOURCES = PromptTemplate.from_template("Content: {page_content}\nSource: {source}")


def _evidence(n: int, score: float, key: str, anchor: str) -> Evidence:
    return Evidence(n=n, chunk_id=f"chunk-{n}", score=score, text=f"text {n}", title="Release procedure", key=key,
                    source_id="docs", heading_path=("Release procedure",), anchor=anchor, page=None, doc_version=1,
                    snapshot_id="default-v4", written_in="default-v4")


SOURCES = [
    _evidence(1, 1.15, "guides/release.md", "database-migration"),
    _evidence(2, 0.46, "https://docs.example.com/runbook/deploy", "canary"),
    _evidence(3, 0.92, "guides/faq.txt", ""),
]


def _client(evidence: list[Evidence], seen: list[dict] | None = None) -> FreshIndexClient:
    packet = ContextPacket(question="q", kb="default", snapshot_id="default-v4", evidence=tuple(evidence),
                           insufficient=False, reason=None, rendered="<context>...</context>")

    def answer(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(json.loads(request.content))
        return httpx.Response(200, json=packet.as_dict())

    return FreshIndexClient("http://fi.test", token="fik_a_b", http=httpx.Client(transport=httpx.MockTransport(answer)))


def test_langchain_documents_carry_the_citation_source() -> None:
    docs = lc.FreshIndexRetriever(client=_client(SOURCES), kb="default").invoke("q")
    # Then each Document's source is what its citation points at: key#anchor, a web page's URL#anchor, or the key
    assert [d.metadata["source"] for d in docs] == [
        "guides/release.md#database-migration", "https://docs.example.com/runbook/deploy#canary", "guides/faq.txt"]
    assert all(d.metadata["citation"].split(" ")[1] == d.metadata["source"] for d in docs)
    assert docs[0].metadata["score"] == 1.15  # the service's own score, unmapped


def test_a_source_citing_prompt_formats_our_documents() -> None:
    # Given LangChain's document prompt for answers with sources, Then it formats every Document we return
    docs = lc.FreshIndexRetriever(client=_client(SOURCES)).invoke("q")
    assert format_document(docs[0], WITH_SOURCES) == "Content: text 1\nSource: guides/release.md#database-migration"
    # (a Document without metadata["source"] is what such a chain cannot format)
    with pytest.raises(ValueError, match="source"):
        format_document(Document(page_content="x", metadata={"citation": "[1] k"}), WITH_SOURCES)


def test_llamaindex_scores_are_a_similarity_in_0_1_with_the_raw_score_kept() -> None:
    seen: list[dict] = []
    nodes = li.FreshIndexRetriever(client=_client(SOURCES, seen), kb="handbook").retrieve("q")
    # Then the scores are relative to the best source (1.15 -> 1.0), in the packet's order
    assert [n.score for n in nodes] == pytest.approx([1.0, 0.46 / 1.15, 0.92 / 1.15])
    assert all(0 <= n.score <= 1 for n in nodes)
    assert [n.node.metadata["score"] for n in nodes] == [1.15, 0.46, 0.92]
    assert nodes[0].node.metadata["source"] == "guides/release.md#database-migration"
    assert seen[0]["kb"] == "handbook"
    # And LlamaIndex's similarity cutoff keeps the sources near the best one, never dropping the best
    kept = SimilarityPostprocessor(similarity_cutoff=0.5).postprocess_nodes(list(nodes), QueryBundle("q"))
    assert [n.node.metadata["n"] for n in kept] == [1, 3]


def test_the_score_mapping() -> None:
    # Non-negative scores: a share of the best; equal or single scores: 1.0; nothing: nothing
    assert relative_scores([0.03, 0.015, 0.0]) == pytest.approx([1.0, 0.5, 0.0])
    assert relative_scores([0.7]) == [1.0] and relative_scores([0.0, 0.0]) == [1.0, 1.0] and relative_scores([]) == []
    # A negative score (an application's reranker): the lowest is 0, the best 1, order kept
    assert relative_scores([2.0, -2.0, 0.0]) == pytest.approx([1.0, 0.0, 0.5])
    assert relative_scores([-1.0, -3.0]) == pytest.approx([1.0, 0.0])


def test_citation_source_is_the_citation_without_number_version_and_snapshot() -> None:
    e = SOURCES[0]
    assert e.citation == f"[1] {citation_source(e)} (v1, snapshot default-v4)"
    assert citation_source(SOURCES[2]) == "guides/faq.txt"
