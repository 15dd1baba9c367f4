"""What one question asks of the vector store: counted through a proxy, so a stage that searches again fails here.

The query line's p95 is read on a noisy machine (#41's "Must show"); a stage
that searched twice, widened its limit, re-read points or asked the engine
for term statistics a second time would show there only as noise.  This
counts the calls instead.  It does not time anything, and does not cover the
registry's rechecks (no registry here: the hooks are left empty).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from freshindex.acl import Principal
from freshindex.core.naming import Naming
from freshindex.injection.budget import ContextPolicy
from freshindex.injection.client import InjectionClient, QueryHooks, QueryTuning
from freshindex.injection.refusal import RefusalPolicy
from freshindex.vectorstore import PointRecord
from freshindex.vectorstore.base import Filter, ScoredHit
from freshindex.vectorstore.edge import EdgeStore

DIM = 16
POOL = 40


class CountingStore:
    """The store's read methods, each call counted with what it asked (limit, text or not, filter or not)."""

    def __init__(self, store: EdgeStore) -> None:
        self.store = store
        self.calls: Counter[tuple[Any, ...]] = Counter()

    def get_alias(self, alias: str) -> str | None:
        self.calls["get_alias",] += 1
        return self.store.get_alias(alias)

    def search(self, name: str, vector: Sequence[float], *, limit: int, flt: Filter | None = None,
               exact: bool = False, text: str | None = None) -> list[ScoredHit]:
        self.calls["search", limit, text is not None, flt is not None] += 1
        return self.store.search(name, vector, limit=limit, flt=flt, exact=exact, text=text)

    def lexical_idf(self, name: str, tokens: Sequence[str], *, flt: Filter | None = None) -> dict[str, float]:
        self.calls["lexical_idf",] += 1
        return self.store.lexical_idf(name, tokens, flt=flt)

    def count(self, name: str) -> int:
        self.calls["count",] += 1
        return self.store.count(name)

    def retrieve(self, name: str, ids: Sequence[str], *, with_vectors: bool = False) -> list[PointRecord]:
        self.calls["retrieve", len(ids)] += 1
        return self.store.retrieve(name, ids, with_vectors=with_vectors)

    def iter_ids(self, name: str, batch: int = 1000) -> Iterator[str]:
        self.calls["iter_ids",] += 1
        return self.store.iter_ids(name, batch)

    def __getattr__(self, attr: str) -> Any:  # anything else a stage reaches for is counted by name
        self.calls[attr,] += 1
        return getattr(self.store, attr)


class QueuedEmbedder:
    model_id = "test-fixed"
    dimension = DIM

    def __init__(self) -> None:
        self.next: list[float] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray([self.next] * len(texts), dtype=np.float32)


WORDS = ("signing", "keys", "rotation", "schedule", "vault", "release", "operators", "window", "settings",
         "pool", "database", "connection", "retries", "timeout", "cache", "index")


def _points(n: int) -> tuple[np.ndarray, list[PointRecord]]:
    rng = np.random.default_rng(7)
    vecs = rng.normal(size=(n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    points = []
    for i in range(n):
        doc = i // 4
        text = " ".join(WORDS[j] for j in rng.integers(len(WORDS), size=30)) + f" SETTING_{i % 50}_MAX"
        payload = {"chunk_id": f"00000000-0000-0000-0000-{i + 1:012x}", "document_id": f"d{doc}",
                   "source_id": "s1", "kb": "kb", "key": f"docs/page_{doc}.md", "title": f"Page {doc}",
                   "heading_path": [f"Page {doc}"], "anchor": "", "page": None, "kind": "text", "text": text,
                   "content_hash": f"h{i}", "doc_version": 1, "acl": [f"g{i % 4}"], "snapshot_id": "kb-v1",
                   "meta": {}, "tenant": "default", "acl_version": 0}
        points.append(PointRecord(payload["chunk_id"], vecs[i].tolist(), payload, lexical=text))
    return vecs, points


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[CountingStore, np.ndarray]]:
    store = EdgeStore(tmp_path / "vectors")
    naming = Naming()
    name = naming.collection(naming.snapshot_id("kb", 1))
    store.create_collection(name, DIM)
    vecs, points = _points(400)
    store.upsert(name, points)
    store.flush(name)
    store.swap_alias(naming.alias("kb"), name)
    try:
        yield CountingStore(store), vecs
    finally:
        store.close()


def _ask(counting: CountingStore, vecs: np.ndarray, questions: Sequence[str], **tuning: Any) -> Counter[Any]:
    embedder = QueuedEmbedder()
    client = InjectionClient(counting, embedder,  # type: ignore[arg-type]
                             QueryTuning(min_score=0.0, refusal=RefusalPolicy(enabled=False),
                                         policy=ContextPolicy(candidate_pool=POOL), **tuning),
                             QueryHooks(naming=Naming()))
    for i, question in enumerate(questions):
        embedder.next = vecs[i * 7].tolist()
        packet = client.retrieve(question, kb="kb", principal=Principal.of("ana", ["g1"]), limit=5)
        assert packet.evidence, question  # every question takes the whole line, compose and render included
        packet.render()
    return counting.calls


def test_a_question_is_one_filtered_hybrid_search_and_one_batch_of_term_statistics(served) -> None:
    counting, vecs = served
    # Given ten plain questions, planning off, the coverage reranker on (it reuses the refusal's signals)
    questions = [f"how is the {WORDS[i]} {WORDS[i + 3]} set" for i in range(10)]
    calls = _ask(counting, vecs, questions, planning=False, lexical_rerank=True)
    # Then each is one alias read, one hybrid search at the candidate pool under the principal's filter and
    # one batch of term statistics; the point count is read once for the collection; nothing is re-read
    assert calls == Counter({("get_alias",): 10, ("search", POOL, True, True): 10, ("lexical_idf",): 10,
                             ("count",): 1})


def test_an_identifier_adds_its_one_lexical_subquery_and_nothing_else(served) -> None:
    counting, vecs = served
    # Given questions naming an exact identifier, planning on
    questions = [f"what does SETTING_{i}_MAX set for the {WORDS[i]}" for i in range(6)]
    calls = _ask(counting, vecs, questions, planning=True, lexical_rerank=True)
    # Then each is searched twice (the question, the identifier alone), both at the pool, both filtered
    assert calls == Counter({("get_alias",): 6, ("search", POOL, True, True): 12, ("lexical_idf",): 6,
                             ("count",): 1})
