"""A sentence-transformers cross-encoder as the pair scorer the query line's cross-encoder link takes.

``sentence_transformers`` is not a dependency, so the library is a stub
module here that records how it was called; the link itself is tested in
tests/injection/test_stages.py with a stub model.  Given the adapter, when
the rerank link scores a pool with it, then the pairs reach ``predict`` in
order, the scores come back as floats and they order the pool.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from freshindex.core.errors import ConfigError
from freshindex.injection.assemble import Candidate
from freshindex.injection.cross_encoder import cross_encoder_reranker, passage
from freshindex.injection.types import Evidence
from freshindex.models.rerankers import CrossEncoderScorer


class StubCrossEncoder:
    """Scores a pair by how many of the question's words the passage holds; remembers its calls."""

    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.calls: list[tuple[list[list[str]], int]] = []
        StubCrossEncoder.made.append({"name": name, **kwargs, "model": self})

    def predict(self, pairs: Sequence[Sequence[str]], *, batch_size: int = 32, **_: Any) -> list[float]:
        self.calls.append(([list(p) for p in pairs], batch_size))
        return [float(len(set(q.lower().split()) & set(p.lower().split()))) for q, p in pairs]


@pytest.fixture
def stub_library(monkeypatch: pytest.MonkeyPatch) -> type[StubCrossEncoder]:
    module = types.ModuleType("sentence_transformers")
    module.CrossEncoder = StubCrossEncoder  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    StubCrossEncoder.made.clear()
    return StubCrossEncoder


def _cand(i: int, text: str) -> Candidate:
    ev = Evidence(n=0, chunk_id=f"c{i}", score=0.5, text=text, title="Guide", key=f"g{i}.md", source_id="s",
                  heading_path=("Setup",), anchor="", page=None, doc_version=1, snapshot_id="kb-v1",
                  written_in="kb-v1")
    return Candidate(ev, f"d{i}", 1 / (60 + i), ordinal=0)


def test_the_adapter_loads_on_the_cpu_and_scores_pairs_in_order(stub_library: type[StubCrossEncoder]) -> None:
    scorer = CrossEncoderScorer("/models/ms-marco", batch_size=4, max_length=384)
    (made,) = stub_library.made
    assert made["name"] == "/models/ms-marco" and made["device"] == "cpu" and made["max_length"] == 384
    scores = scorer.score_pairs([("rotate the key", "how to rotate a key"), ("rotate the key", "unrelated")])
    assert scores == [2.0, 0.0] and all(type(s) is float for s in scores)
    assert made["model"].calls == [([["rotate the key", "how to rotate a key"], ["rotate the key", "unrelated"]], 4)]
    assert scorer.score_pairs([]) == [] and len(made["model"].calls) == 1  # nothing to score: no model call


def test_the_adapter_as_the_rerank_link_orders_the_pool(stub_library: type[StubCrossEncoder]) -> None:
    pool = [_cand(0, "a page about fonts"), _cand(1, "rotate the signing key every month"), _cand(2, "key rings")]
    scores = cross_encoder_reranker(CrossEncoderScorer("/models/ms-marco"))("how to rotate the key", pool)
    assert sorted(range(3), key=lambda i: -scores[i]) == [1, 2, 0]
    (made,) = stub_library.made
    assert [p[1] for p in made["model"].calls[0][0]] == [passage(c) for c in pool]


def test_without_the_library_the_adapter_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # an import of it raises ImportError
    with pytest.raises(ConfigError, match="pip install sentence-transformers"):
        CrossEncoderScorer("/models/ms-marco")


def test_a_model_returning_the_wrong_number_of_scores_is_refused(stub_library: type[StubCrossEncoder]) -> None:
    scorer = CrossEncoderScorer("/models/ms-marco")
    stub_library.made[0]["model"].predict = lambda pairs, **kw: [1.0]
    with pytest.raises(ValueError, match="1 scores for 2 pairs"):
        scorer.score_pairs([("q", "a"), ("q", "b")])
