"""The coverage reranker orders chunks within a document; the fusion's order of documents stands.

Pure functions on fixed pools, the weights as a code repository has them
(ordinary English words rare there, so weighing more than the name asked
about).  The same pool shape is asked with the answer in prose, in a table
and in code.
"""

from __future__ import annotations

import pytest

from freshindex.injection.assemble import Candidate, assemble
from freshindex.injection.budget import ContextPolicy, QueryBudget, QueryType
from freshindex.injection.coverage import coverage_reranker
from freshindex.injection.refusal import question_terms
from freshindex.injection.types import Evidence

#: A code repository's IDF: "never" and "happen" are in few chunks there, so they weigh more than the name.
WEIGHTS = {"happen": 6.5, "unbind": 6.0, "key": 1.9, "never": 7.0, "bound": 1.5}
QUESTION = "What happens when I unbind a key that was never bound?"

#: The right chunk, per content kind: it holds the name asked about, in its own words.
ANSWERS = {
    "prose": "Calling unbind() with a key the context does not hold raises KeyError; try_unbind() ignores it.",
    "table": "| method | missing key |\n| --- | --- |\n| unbind() | raises KeyError |\n| try_unbind() | ignored |",
    "code": "def unbind(self, *keys: str) -> Self:\n    \"\"\"Raises KeyError for a key not in the context.\"\"\"\n"
            "    bl = self.bind()\n    for key in keys:\n        del bl._context[key]\n    return bl",
}
#: Chunks of other documents (tests, a changelog, a FAQ) that use more of the question's words.
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
    # Fusion (dense + BM25) put the answer first; the other pages follow.
    return [_cand("answer", "context", ANSWERS[kind], 0.9),
            *(_cand(f"w{i}", f"page{i}", text, 0.8 - 0.1 * i) for i, text in enumerate(WORDING))]


@pytest.mark.parametrize("kind", sorted(ANSWERS))
def test_another_pages_chunk_using_more_of_the_questions_words_does_not_pass_the_fused_answer(kind: str) -> None:
    # Given a pool whose fused first chunk answers (in prose, a table or code) with few of the question's
    # words, and chunks of other pages that use more of them
    pool = _pool(kind)
    # When the pool is reranked and one chunk is selected
    policy = ContextPolicy(budgets={QueryType.FACT: QueryBudget(max_tokens=2000, max_chunks=1, per_document=1)})
    picked = assemble(QUESTION, pool, policy=policy, query_type="fact", reranker=coverage_reranker(WEIGHTS))
    # Then the answer keeps its place: the reranker does not move a document
    assert [c.chunk_id for c in picked.ranked] == ["answer"]


def test_within_a_page_the_chunk_holding_the_questions_terms_takes_the_pages_best_slot() -> None:
    # Given a page whose fused first chunk is its table of contents and whose answer chunk is fused third,
    # with another page between them
    pool = [_cand("toc", "context", "Contents: binding, context, threads.", 0.9),
            _cand("other", "faq", "What happens to keys you never bound?", 0.8),
            _cand("answer", "context", ANSWERS["prose"], 0.7)]
    scores = coverage_reranker(WEIGHTS)(QUESTION, pool)
    order = [pool[i].chunk_id for i in sorted(range(len(pool)), key=lambda i: -scores[i])]
    # Then the answer takes its page's first slot, the other page keeps its own
    assert order == ["answer", "other", "toc"]


def test_contraction_tails_are_no_terms() -> None:
    # Given a question worded with contractions
    terms, _compounds = question_terms("I'm on Windows and the output isn't coloured. What's missing?")
    # Then "m", "s" and "t" are not among its terms (no chunk would hold them)
    assert not {"m", "s", "t", "isn"} & set(terms)
    assert {"window", "output", "missing"} <= set(terms)


def test_a_test_file_ranks_after_the_code_it_exercises_at_equal_match() -> None:
    from freshindex.injection.assemble import is_test_file

    # Test code and fixtures by the common conventions; documentation ABOUT testing is not a test
    for key in ("tests/test_api.py", "src/pkg/tests/fixtures/page.html", "test/unit/run.sh", "pkg/test_util.py",
                "server/handler_test.go", "web/app.test.ts", "web/button.spec.js", "src/test/java/FooTest.java",
                "spec/models/user_spec.rb", "Tests/Unit.cs", "pkg/test_x.PY"):
        assert is_test_file(key), key
    for key in ("topics/testing/overview.html", "library/test.html", "docs/testing.md", "src/contest.py",
                "latest/attestation.md", "command/add_test.html", "prop_test/TIMEOUT.html", "ref/test_client.html"):
        assert not is_test_file(key), key
