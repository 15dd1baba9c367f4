"""Calibrated refusal: signals, decision, reason in the packet, metric, and the engine's IDF.

Given / When / Then on small fixed inputs; the client tests run a real
Qdrant Edge collection and the deterministic hashing embedder.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from freshindex.acl import PUBLIC, Principal
from freshindex.core.errors import StoreError
from freshindex.core.naming import Naming
from freshindex.core.payload import PointPayload
from freshindex.health.metrics import Metrics
from freshindex.injection.assemble import Candidate, assemble
from freshindex.injection.budget import ContextPolicy, QueryBudget, QueryType
from freshindex.injection.client import InjectionClient, QueryHooks
from freshindex.injection.coverage import coverage_reranker
from freshindex.injection.observer import QueryObserver
from freshindex.injection.refusal import (
    RefusalPolicy,
    RefusalReason,
    Signals,
    TermWeights,
    absent_idf,
    decide,
    evidence_tokens,
    ocr_close,
    signals,
)
from freshindex.settings import ContextSettings
from freshindex.vectorstore import PointRecord
from freshindex.vectorstore.edge import EdgeStore
from freshindex.vectorstore.lexical import lexical_text

DIM = 8


def test_a_missing_rare_term_costs_more_coverage_than_a_missing_common_one() -> None:
    # Given a question with a rare identifier and a common word, and evidence holding only one of them
    idf = {"default": 0.3, "session_cookie_age": 6.0, "session": 1.0, "cookie": 2.0, "age": 2.0}
    q = "What is the default of SESSION_COOKIE_AGE?"
    has_rare = [evidence_tokens("SESSION_COOKIE_AGE: two weeks")]
    has_common = [evidence_tokens("the default is used when nothing is set")]
    pool = set(idf)  # every term is in some admitted, rechecked candidate of the pool
    # When the signals are computed
    rare = signals(q, has_rare,
                   weights=TermWeights(idf=idf, missing_idf=9.0), lexical_top=None, dense_top=0.5, present=pool)
    common = signals(q, has_common,
                     weights=TermWeights(idf=idf, missing_idf=9.0), lexical_top=None, dense_top=0.5, present=pool)
    # Then the identifier is the key term: missing the common word costs nothing, missing the identifier all
    assert rare.missing == ()
    assert rare.coverage == pytest.approx(1.0)
    assert common.coverage == pytest.approx(0.3 / 6.3)  # the identifier's parts are not in the whole
    assert common.missing == ("session_cookie_age",)  # its parts are not key terms of their own


def test_a_term_only_the_engine_knows_weighs_as_missing_whatever_its_idf() -> None:
    # Given engine IDF for "compensation" (a stale point the filter let through, denied by the recheck)
    q = "When are salary bands reviewed by the compensation committee?"
    idf = {"salary": 2.0, "band": 2.0, "reviewed": 1.0, "compensation": 0.5, "committee": 2.0}
    evidence = [evidence_tokens("salary bands are set yearly")]
    # When no admitted (rechecked) candidate holds it
    s = signals(q, evidence, weights=TermWeights(idf=idf, missing_idf=7.0), lexical_top=None, dense_top=0.4,
                present={"salary", "band"})
    # Then it weighs missing_idf, as in a world where it never existed: denied and absent look the same
    absent = signals(q, evidence,
                     weights=TermWeights(idf={k: v for k, v in idf.items() if k != "compensation"}, missing_idf=7.0),
                     lexical_top=None, dense_top=0.4, present={"salary", "band"})
    assert s.weights["compensation"] == 7.0
    assert s == absent


def test_a_term_no_permitted_point_has_weighs_the_most() -> None:
    # Given a term the engine reported nothing for (absent, or only in denied documents)
    q = "configure the RedisCache backend"
    idf = {"configure": 1.1, "cache": 2.0, "backend": 1.5}  # the redis tokens are missing from the answer
    s = signals(q, [evidence_tokens("configure the cache backend")],
                weights=TermWeights(idf=idf, missing_idf=absent_idf(1000)),
                lexical_top=3.0, dense_top=0.6)
    # Then the missing tokens weigh the IDF of a term in one document, the rarest a present term can be
    assert absent_idf(1000) == pytest.approx(math.log(1 + 999.5 / 1.5))
    assert all(s.weights[t] == absent_idf(1000) for t in s.missing)
    assert set(s.missing) == {"rediscache"}  # the identifier whole; its part "redis" is not a key term of its own
    assert s.coverage < 0.3
    # And the lexical signal is per question term: the best BM25 score over the summed IDF
    assert s.lexical == pytest.approx(3.0 / sum(s.weights.values()))


def test_a_question_of_stopwords_only_has_nothing_to_miss() -> None:
    s = signals("what is it?", [set()], weights=TermWeights(idf={}, missing_idf=5.0), lexical_top=None, dense_top=None)
    assert (s.coverage, s.lexical, s.dense, s.terms) == (1.0, 0.0, 0.0, ())


def test_decide_refuses_below_zero_and_names_the_missing_key_terms() -> None:
    policy = RefusalPolicy(bias=-3.0, coverage_weight=4.0, lexical_weight=0.0, dense_weight=0.0)
    weights = {"acreate": 8.0, "object": 1.0, "create": 1.0}
    low = Signals(coverage=0.2, lexical=0.1, dense=0.7, terms=tuple(weights), missing=("acreate",), weights=weights)
    high = Signals(coverage=0.9, lexical=0.1, dense=0.2, terms=tuple(weights), missing=(), weights=weights)
    # When the policy decides
    refused = decide(policy, low)
    # Then a score below zero refuses and names the missing terms, but no figure: the weights are the
    # engine's collection-wide IDF, which counts chunks the caller may not read
    assert refused is not None
    reason, why = refused
    assert reason is RefusalReason.KEY_TERMS_MISSING
    assert "'acreate'" in why
    assert not any(ch.isdigit() for ch in why.replace("acreate", "")), why
    assert decide(policy, high) is None
    assert decide(RefusalPolicy(enabled=False), low) is None


def test_a_weak_match_without_heavy_missing_terms_is_a_weak_match() -> None:
    policy = RefusalPolicy(bias=-1.0, coverage_weight=0.0, lexical_weight=1.0, dense_weight=0.0, key_term_share=0.5)
    weights = {"a1": 1.0, "b2": 1.0, "c3": 1.0}
    s = Signals(coverage=0.67, lexical=0.2, dense=0.3, terms=tuple(weights), missing=("c3",), weights=weights)
    got = decide(policy, s)
    assert got is not None and got[0] is RefusalReason.WEAK_MATCH


def test_the_shipped_settings_and_the_library_defaults_are_the_same_fit() -> None:
    # Given the settings' context section as the services read it
    data = ContextSettings().model_dump()
    # When the policy is built from it
    policy = RefusalPolicy.from_mapping(data)
    # Then it is the library's default policy: one fit, shipped in both places
    assert policy == RefusalPolicy()
    assert RefusalPolicy.from_mapping({**data, "refusal": False, "refusal_bias": 1.5}).enabled is False
    assert RefusalPolicy.from_mapping({**data, "refusal_bias": 1.5}).bias == 1.5


# -- the engine's IDF ---------------------------------------------------------------------------------


def _points(texts: list[tuple[str, str]], rng: np.random.Generator) -> list[PointRecord]:
    out = []
    for i, (key, text) in enumerate(texts):
        v = rng.normal(size=DIM)
        payload = PointPayload(chunk_id=str(uuid.UUID(int=i + 1)), document_id=f"d{i}", source_id="s", kb="default",
                               key=key, text=text, content_hash=f"h{i}", snapshot_id="default-v1", title=key,
                               acl=(PUBLIC,)).to_dict()
        out.append(PointRecord(str(uuid.UUID(int=i + 1)), (v / np.linalg.norm(v)).tolist(), payload,
                               lexical=lexical_text(text=text, title=key, key=key)))
    return out


def test_lexical_idf_is_the_engines_own_and_leaves_absent_tokens_out(tmp_path: Path) -> None:
    # Given a collection where "cache" is in 2 of 5 points and "redis" in none
    store = EdgeStore(tmp_path / "edge")
    store.create_collection("c1", DIM)
    texts = [("a.md", "the cache framework"), ("b.md", "cache keys and versions"), ("c.md", "sessions in the database"),
             ("d.md", "templates"), ("e.md", "forms and fields")]
    store.upsert("c1", _points(texts, np.random.default_rng(0)))
    # When the client asks for the tokens' IDF
    idf = store.lexical_idf("c1", ["cache", "redis", "cache"])
    # Then it is Qdrant's BM25 IDF over the collection, and the absent token is left out
    assert set(idf) == {"cache"}
    assert idf["cache"] == pytest.approx(math.log(1 + (5 - 2 + 0.5) / (2 + 0.5)), rel=1e-4)
    assert absent_idf(5) > idf["cache"]
    store.close()


# -- through the client ------------------------------------------------------------------------------


class _Embedder:
    """Every text embeds to the same direction: the dense side cannot tell questions apart."""

    dim = DIM

    def embed(self, texts: list[str]) -> np.ndarray:
        v = np.ones((len(texts), DIM), dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def _client(tmp_path: Path, decisions: list, metrics: Metrics | None = None) -> InjectionClient:
    store = EdgeStore(tmp_path / "edge")
    naming = Naming()
    store.create_collection("default-v1", DIM)
    texts = [("settings.md", "SESSION_COOKIE_AGE is the age of session cookies, in seconds. Default: 1209600."),
             ("cache.md", "The database cache backend stores cache entries in a table."),
             ("forms.md", "A form field validates and cleans its value."),
             ("csrf.md", "CSRF_COOKIE_NAME is the name of the CSRF cookie. Default: csrftoken.")]
    points = _points(texts, np.random.default_rng(1))
    points = [PointRecord(p.id, _Embedder().embed(["x"])[0].tolist(), p.payload, p.lexical) for p in points]
    store.upsert("default-v1", points)
    store.swap_alias(naming.alias("default"), "default-v1")

    class Sink(QueryObserver):
        def decided(self, kb: str, reason, signals) -> None:
            decisions.append((kb, reason, signals))
            if metrics is not None and reason is not None:
                metrics.refusals.labels(str(reason)).inc()

    return InjectionClient(store, _Embedder(), hooks=QueryHooks(naming=naming, observer=Sink()))


def test_the_client_refuses_an_absent_identifier_and_says_why(tmp_path: Path) -> None:
    decisions: list = []
    metrics = Metrics()
    client = _client(tmp_path, decisions, metrics)
    # When a question names a setting the corpus does not have, while dense similarity is perfect
    packet = client.retrieve("What is the default of the ASYNC_ORM_POOL_SIZE setting?", kb="default")
    # Then the packet is insufficient, with the reason and the missing key term
    assert packet.insufficient and packet.evidence == ()
    assert packet.reason.startswith("insufficient evidence (key_terms_missing)")
    assert "'async_orm_pool_size'" in packet.reason
    assert packet.dropped.get("refused") == 4
    assert decisions[-1][1] is RefusalReason.KEY_TERMS_MISSING
    # And the refusal is counted by reason
    assert metrics.value("freshindex_refusals_total", reason="key_terms_missing") == 1.0


def test_the_client_answers_a_question_its_evidence_covers(tmp_path: Path) -> None:
    decisions: list = []
    client = _client(tmp_path, decisions)
    packet = client.retrieve("What is the default SESSION_COOKIE_AGE?", kb="default")
    assert not packet.insufficient
    assert "settings.md" in [e.key for e in packet.evidence]
    kb, reason, sig = decisions[-1]
    assert (kb, reason) == ("default", None)
    assert sig.coverage == pytest.approx(1.0) and sig.missing == ()


def test_a_term_only_denied_documents_hold_reads_as_absent(tmp_path: Path) -> None:
    # Given the only chunk naming the cookie setting is private to HR
    decisions: list = []
    client = _client(tmp_path, decisions)
    store = client.store
    [rec] = store.retrieve("default-v1", [str(uuid.UUID(int=1))])
    payload = {**rec.payload, "acl": ["hr"]}
    store.upsert("default-v1", [PointRecord(rec.id, _Embedder().embed(["x"])[0].tolist(), payload,
                                            lexical=lexical_text(text=payload["text"], title="settings.md",
                                                                 key="settings.md"))])
    # When someone outside HR asks about it
    outsider = client.retrieve("What is the default SESSION_COOKIE_AGE?", kb="default",
                               principal=Principal.of("eve", ["eng"]))
    # Then the answer is the same refusal as for a term no document has: denied and not found look alike
    assert outsider.insufficient and "key_terms_missing" in outsider.reason
    assert "session_cookie_age" in outsider.reason
    assert all(k in {"refused", "low_score"} for k in outsider.dropped)


# -- the coverage reranker ----------------------------------------------------------------------------------------


def _cand(chunk_id: str, doc: str, score: float, text: str) -> Candidate:
    payload = PointPayload(chunk_id=chunk_id, document_id=doc, source_id="s", kb="default", key=f"{doc}.md", text=text,
                           content_hash=chunk_id, snapshot_id="default-v1", title=doc, acl=(PUBLIC,))
    return Candidate.from_point(chunk_id, score, payload, "default-v1")


def test_the_coverage_reranker_lifts_the_chunk_holding_the_rare_terms_past_the_quota() -> None:
    # Given one long page whose best-fused chunks do not hold the answer, and a quota of 1 per document
    cands = [_cand("intro", "sessions", 0.9, "Sessions overview and how to use them in views."),
             _cand("views", "sessions", 0.8, "Using sessions in views: the request.session object."),
             _cand("answer", "sessions", 0.7, "By default, Django stores sessions in your database."),
             _cand("other", "cache", 0.85, "The cache framework.")]
    weights = {"default": 2.0, "django": 0.5, "store": 1.5, "session": 1.0, "data": 1.0}
    row = QueryBudget(max_chunks=3, per_document=1)
    pol = ContextPolicy(budgets={**ContextPolicy().budgets, QueryType.FACT: row})
    q = "Where does Django store session data by default?"
    # When assembly orders by fusion alone, the quota drops the answer; with the coverage reranker it stays
    plain = assemble(q, cands, policy=pol, query_type="fact")
    ranked = assemble(q, cands, policy=pol, query_type="fact", reranker=coverage_reranker(weights))
    assert "answer" not in [c.chunk_id for c in plain.ranked]
    assert ranked.ranked[0].chunk_id == "answer"
    # and the other page keeps its fused place, second: the page's two other chunks go to the quota
    assert [c.chunk_id for c in ranked.ranked] == ["answer", "other"]
    assert ranked.dropped.get("per_document") == 2


def test_the_coverage_reranker_breaks_ties_by_fusion_order() -> None:
    cands = [_cand("a", "d1", 0.9, "alpha"), _cand("b", "d2", 0.8, "alpha"), _cand("c", "d3", 0.7, "beta")]
    scores = coverage_reranker({"alpha": 1.0, "beta": 1.0})("alpha beta", cands)
    assert scores[0] > scores[1] > scores[2]
    assert scores[0] - scores[1] == pytest.approx(0.2 - 0.1)


def test_without_the_engines_statistics_the_client_still_decides(tmp_path: Path) -> None:
    # Given an engine whose lexical statistics fail
    decisions: list = []
    client = _client(tmp_path, decisions)

    def broken(*_a, **_k):
        raise StoreError("statistics unavailable")

    client.store.lexical_idf = broken  # type: ignore[method-assign]
    # When questions come in, every term weighs the same and the decision still follows the evidence
    answered = client.retrieve("What is the default SESSION_COOKIE_AGE?", kb="default")
    refused = client.retrieve("What is the default of the ASYNC_ORM_POOL_SIZE setting?", kb="default")
    assert not answered.insufficient
    assert refused.insufficient and "async_orm_pool_size" in refused.reason
    assert set(decisions[-1][2].weights.values()) == {1.0}


def test_a_name_no_candidate_holds_refuses_whatever_the_score() -> None:
    # Given a question naming an API the evidence lacks in every form, while its other words match well
    q = "How do I register a callback for line events using the sys.monitoring API?"
    evidence = [evidence_tokens("register a callback for line events with sys.settrace; monitoring tools use it")]
    pool = {"register", "callback", "line", "events", "sys.settrace", "sys", "settrace", "monitoring", "api"}
    idf = {t: 1.0 for t in pool} | {"sys.monitoring": 3.0}  # the engine counts a point the caller may not read
    s = signals(q, evidence,
                weights=TermWeights(idf=idf, missing_idf=9.0), lexical_top=12.0, dense_top=0.8, present=pool)
    generous = RefusalPolicy(bias=10.0)  # a score that answers anything
    # Then the name is unknown and the question is refused with it named, though the score says answer
    assert s.unknown == ("sys.monitoring",)
    reason, why = decide(generous, s)
    assert reason is RefusalReason.KEY_TERMS_MISSING and "'sys.monitoring'" in why
    # and switched off, the score decides
    assert decide(replace(generous, unknown_names=False), s) is None


@pytest.mark.parametrize(("question", "held"), [
    ("What does pathlib.Path.walk() yield?", {"path.walk", "yield"}),  # a namespace suffix the page writes
    ("What does os.process_cpu_count return?", {"os.process_cpu_count.__doc__"}),  # inside a longer name
    ("Is the built-in server fit for production?", {"server", "production"}),  # hyphenated words are words
    ("What changed in Python 3.13?", {"python", "changed"}),  # versions are values, not names
])
def test_a_name_written_otherwise_or_no_name_at_all_is_not_unknown(question: str, held: set[str]) -> None:
    s = signals(question, [held],
                weights=TermWeights(idf={}, missing_idf=9.0), lexical_top=5.0, dense_top=0.8, present=held)
    assert s.unknown == ()


@pytest.mark.parametrize(("question", "name"), [
    ("In my config.h.in, how do I get a macro defined as 0 or 1 from a variable?", "config.h.in"),
    ("Can the package be named like name_version-revision_arch.deb?", "name_version-revision_arch.deb"),
    ("Why does my setup.py install no console script?", "setup.py"),
    ("Where does cmake/config.h.in get its macro defined as 0 or 1?", "cmake/config.h.in"),  # a path's file
])
def test_a_readers_own_file_name_is_missing_not_unknown(question: str, name: str) -> None:
    # Given a question naming a file of the reader's own that no evidence holds (pages name files by role)
    held = {"macro", "defined", "variable", "package", "named", "install", "console", "script"}
    s = signals(question, [held], weights=TermWeights(idf={}, missing_idf=9.0), lexical_top=5.0, dense_top=0.8,
                present=held)
    # Then it costs the coverage its share, as any missing key term, and decides nothing alone
    assert s.unknown == () and name in s.missing
    assert decide(RefusalPolicy(bias=10.0), s) is None
    # while an attribute or module named like a file type is still unknown (the name is the corpus's or absent)
    for module in ("dbm.sqlite3", "math.log2", "httpx.response.json", "asyncio.lock", "read.csv", "numpy.matrix.h",
                   "elementtree.xml", "scipy.stats.skewnorm.pdf", "django.utils.html"):
        other = signals(f"What does {module} return?", [held], weights=TermWeights(idf={}, missing_idf=9.0),
                        lexical_top=5.0, dense_top=0.8, present=held)
        assert other.unknown == (module,)


def test_a_name_ocr_misread_is_held_by_the_scanned_candidate_only() -> None:
    # Given a question naming N01_kind and a scanned page whose OCR reads it NO1_kind
    q = "Which values can N01_kind take in the standalone Rmath library?"
    scanned = {"constant", "no1_kind", "no1", "kind", "values", "rmath", "standalone", "library"}
    common = dict(weights=TermWeights(idf={}, missing_idf=9.0), lexical_top=5.0, dense_top=0.8, present=scanned)
    # When the candidate was read by OCR, the misreading holds the name, for presence and coverage
    read = signals(q, [scanned], ocr_read=scanned, **common)
    assert read.unknown == () and "n01_kind" not in read.missing
    # and when the same tokens come from a text layer, the name is unknown: a text layer does not misread
    typed = signals(q, [scanned], **common)
    assert typed.unknown == ("n01_kind",)


@pytest.mark.parametrize(("name", "token", "close"), [
    ("n01_kind", "no1_kind", True),  # 0 read as O
    ("r_encoding_locales", "rlencoding_locales", True),  # _ read as L: one edit in a long name
    ("r_encoding_locales", "r_encoding", False),  # a prefix is another name
    ("sys.monitor", "sys.monitoring", False),  # two edits
    ("abc_def", "abx_def", False),  # one edit in a short name is too easily another name
])
def test_ocr_close_folds_confused_glyphs_and_allows_one_edit_in_long_names(name: str, token: str,
                                                                           close: bool) -> None:
    assert ocr_close(name, token) is close


def test_a_hyphenated_word_is_judged_by_its_parts_not_as_a_name() -> None:
    # Given a page that writes "cross-building" and a question asking to "cross-compile"
    page = evidence_tokens("Cross-building is not possible: installing R builds a minimal R, then compiles the rest")
    q = "Can I cross-compile R for another platform?"
    s = signals(q, [page], weights=TermWeights(idf={}, missing_idf=9.0), lexical_top=5.0, dense_top=0.8, present=page)
    # Then the hyphenated whole is no key term: "cross" is held, and only absent parts can be missing
    assert "cross-compile" not in s.key_terms and "cross-compile" not in s.missing
    assert "cross" not in s.missing
    # And a hyphenated word whose parts the collection lacks is still missing, part by part
    s = signals("How do I enable the hyper-turbo mode?", [page],
                weights=TermWeights(idf={}, missing_idf=9.0), lexical_top=5.0,
                dense_top=0.8, present=page)
    assert {"hyper", "turbo"} <= set(s.missing) and s.coverage < 0.7


def test_evidence_signals_are_the_ones_a_retrieval_decides_on_without_composing(tmp_path: Path) -> None:
    decisions: list = []
    client = _client(tmp_path, decisions)
    for question in ("What is the default SESSION_COOKIE_AGE?", "What does ASYNC_ORM_POOL_SIZE set?"):
        # When a question is retrieved (observed) and its evidence signals asked for alone
        client.retrieve(question, kb="default")
        got = client.evidence_signals(question, kb="default")
        # Then they are the signals the retrieval's refusal decided on, and nothing more was observed
        assert got is not None and got == decisions[-1][2]
    assert len(decisions) == 2
    # And a knowledge base that serves nothing has none
    assert client.evidence_signals("anything", kb="nothing-here") is None
