"""The coverage reranker weighs the names a question asks about, not the reader's wording around them.

Pure functions on fixed pools: the weights and key terms come from the
refusal's own :func:`injection.refusal.signals`, as the client passes
them, with IDF values as a code repository has them (ordinary English
words rare there, so weighing much).  The same pool shape is asked with
the answer in prose, in a table and in code.
"""

from __future__ import annotations

import pytest

from freshindex.injection.assemble import Candidate, assemble, coverage_reranker
from freshindex.injection.budget import ContextPolicy, QueryBudget, QueryType
from freshindex.injection.refusal import evidence_tokens, question_terms, signals
from freshindex.injection.types import Evidence

ABSENT = 9.0
#: A code repository's IDF: "never" and "happen" are in few chunks there, so they weigh more than the name.
IDF = {"happen": 6.5, "unbind": 6.0, "key": 1.9, "never": 7.0, "bound": 1.5}
#: The words of general English among the question's (the refusal's ordinary_words, fixed here).
ORDINARY = frozenset({"happen", "key", "never", "bound"})
QUESTION = "What happens when I unbind a key that was never bound?"

#: The right chunk, per content kind: it holds the name asked about, in its own words.
ANSWERS = {
    "prose": "Calling unbind() with a key the context does not hold raises KeyError; try_unbind() ignores it.",
    "table": "| method | missing key |\n| --- | --- |\n| unbind() | raises KeyError |\n| try_unbind() | ignored |",
    "code": "def unbind(self, *keys: str) -> Self:\n    \"\"\"Raises KeyError for a key not in the context.\"\"\"\n"
            "    bl = self.bind()\n    for key in keys:\n        del bl._context[key]\n    return bl",
}
#: Chunks of other documents that use the question's ordinary words and the name in passing.
WORDING = [
    "It may happen that a logger is never used; unbind is then never called and nothing is bound.",
    "What happens to keys you never bound? The processors never see them; bind and unbind them freely.",
    "Never rely on what happens to a bound key after unbind in a thread.",
]


def _cand(cid: str, doc: str, text: str, fused: float) -> Candidate:
    ev = Evidence(n=0, chunk_id=cid, score=fused, text=text, title=doc, key=f"{doc}.md", source_id="s",
                  heading_path=(doc,), anchor="", page=None, doc_version=1, snapshot_id="kb-v1", written_in="kb-v1")
    return Candidate(ev, doc, fused)


def _pool(kind: str) -> list[Candidate]:
    # Fusion (dense + BM25) put the answer first; the wording chunks follow.
    return [_cand("answer", "context", ANSWERS[kind], 0.9),
            *(_cand(f"w{i}", f"page{i}", text, 0.8 - 0.1 * i) for i, text in enumerate(WORDING))]


def _reranker(pool: list[Candidate]) -> object:
    sig = signals(QUESTION, [evidence_tokens(c.text, c.evidence.title, c.evidence.heading_path, c.evidence.key)
                             for c in pool], idf=IDF, missing_idf=ABSENT, lexical_top=None, dense_top=0.5,
                  present=set(IDF), ordinary=ORDINARY)
    assert set(sig.wording) == ORDINARY  # a reader's wording; "unbind" is the name
    return coverage_reranker(sig.weights, wording=sig.wording)


@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_the_readers_wording_does_not_push_the_fused_answer_out(kind: str) -> None:
    # Given a pool whose fused first chunk answers (in prose, a table or code) without the question's
    # ordinary words, and chunks of other pages that use those words (rare in this corpus, so heavy)
    pool = _pool(kind)
    # When the pool is reranked and one chunk is selected
    policy = ContextPolicy(budgets={QueryType.FACT: QueryBudget(max_tokens=2000, max_chunks=1, per_document=1)})
    picked = assemble(QUESTION, pool, policy=policy, query_type="fact", reranker=_reranker(pool))
    # Then the answer keeps its place: every chunk holds the name, and the wording decides nothing
    assert [c.chunk_id for c in picked.ranked] == ["answer"]


def test_a_chunk_holding_the_name_outranks_one_with_only_the_wording() -> None:
    # Given the answer fused last, below a chunk with all the question's wording but not the name
    pool = [_cand("wording", "faq", "What happens to a key you never bound? It is never there.", 0.9),
            _cand("answer", "context", ANSWERS["prose"], 0.5)]
    scores = _reranker([*pool, _cand("x", "x", "unbind", 0.1)])(QUESTION, pool)
    # Then the chunk naming what the question asks about comes first
    assert scores[1] > scores[0]


def test_a_key_term_spelt_otherwise_in_a_chunk_counts_for_it() -> None:
    # Given a question naming _record and the chunks: one writes "record" (not _record), one nothing of it
    weights = {"_record": 4.4, "field": 4.6}
    pool = [_cand("none", "a", "Fields are formatted by the renderer.", 0.9),
            _cand("words", "b", "The record's fields are removed by ExtraAdder.", 0.8)]
    scores = coverage_reranker(weights)("How do I drop the _record field?", pool)
    # Then the chunk holding the word of the identifier ranks first
    assert scores[1] > scores[0]


def test_contraction_tails_are_no_terms() -> None:
    # Given a question worded with contractions
    terms, _compounds = question_terms("I'm on Windows and the output isn't coloured. What's missing?")
    # Then "m", "s" and "t" are not among its terms (no chunk would hold them)
    assert not {"m", "s", "t", "isn"} & set(terms)
    assert {"window", "output", "missing"} <= set(terms)
