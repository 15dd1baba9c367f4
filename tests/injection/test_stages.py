"""The query line as declared stages: one list, switchable stages, a trace that says which stage lost a chunk,
and a second reranker chained after the coverage reranker (the worked example, with a stub model)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from freshindex.acl import PUBLIC, Principal
from freshindex.core.errors import ConfigError
from freshindex.core.payload import PointPayload
from freshindex.injection.assemble import Candidate, assemble
from freshindex.injection.budget import ContextPolicy, QueryBudget, QueryType
from freshindex.injection.client import InjectionClient, QueryHooks, QueryTuning
from freshindex.injection.context import LineOptions, PacketOptions, compose
from freshindex.injection.coverage import coverage_reranker
from freshindex.injection.cross_encoder import cross_encoder_reranker
from freshindex.injection.refusal import RefusalPolicy
from freshindex.injection.stages import NAMES, REQUIRED, Trace, disabled_of
from freshindex.injection.stages.refuse import with_extra
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

Q = "Where does Django store session data by default?"
WEIGHTS = {"default": 2.0, "django": 0.5, "store": 1.5, "session": 1.0, "data": 1.0}


def _cand(chunk_id: str, doc: str, score: float, text: str) -> Candidate:
    payload = PointPayload(chunk_id=chunk_id, document_id=doc, source_id="s", kb="default", key=f"{doc}.md", text=text,
                           content_hash=chunk_id, snapshot_id="default-v1", title=doc, acl=(PUBLIC,))
    return Candidate.from_point(chunk_id, score, payload, "default-v1")


def _pool() -> list[Candidate]:
    return [_cand("intro", "sessions", 0.9, "Sessions overview and how to use them in views."),
            _cand("views", "sessions", 0.8, "Using sessions in views: the request.session object."),
            _cand("answer", "sessions", 0.7, "By default, Django stores sessions in your database."),
            _cand("other", "cache", 0.85, "The cache framework.")]


def _policy() -> ContextPolicy:
    return ContextPolicy(budgets={**ContextPolicy().budgets, QueryType.FACT: QueryBudget(max_chunks=3, per_document=1)})


class StubCrossEncoder:
    """A stand-in for a cross-encoder model: prefers passages naming the cache, records what it was shown."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        self.seen.append([p for _q, p in pairs])
        return [2.0 if "cache" in p.lower() else 1.0 - i / 100 for i, (_q, p) in enumerate(pairs)]


# -- the one list ---------------------------------------------------------------------------------------------------


def test_the_line_is_one_ordered_list_and_only_optional_stages_switch_off() -> None:
    assert NAMES == ("recall", "recheck", "filter", "refuse", "pool", "rerank", "group", "select", "fit", "render",
                     "conflicts")
    assert {"recall", "recheck", "fit", "render"} <= REQUIRED  # access and the budget are never off
    assert disabled_of(["rerank", "group"]) == {"rerank", "group"}
    with pytest.raises(ConfigError, match="cannot be switched off"):
        disabled_of(["recheck"])
    with pytest.raises(ConfigError, match="unknown query stages"):
        disabled_of(["rerank_everything"])


# -- the worked example: a second reranker chained after the coverage reranker ---------------------------------------


def test_a_cross_encoder_chains_after_the_coverage_reranker_and_orders_the_packet() -> None:
    # Given the coverage reranker and a stub cross-encoder chained after it
    model = StubCrossEncoder()
    chain = (coverage_reranker(WEIGHTS), cross_encoder_reranker(model))
    # When assembly runs the chain
    got = assemble(Q, _pool(), policy=_policy(), query_type="fact", reranker=chain)
    # Then the model was shown the pool in the coverage reranker's order (the answer first, not the fused order)
    assert len(model.seen) == 1 and "stores sessions" in model.seen[0][0]
    # And the model's scores order the packet: the cache page it prefers comes first, the answer still kept
    ids = [c.chunk_id for c in got.ranked]
    assert ids[0] == "other" and "answer" in ids
    assert got.ranked[0].evidence.score == 2.0  # the packet's score is the last reranker's
    # Whereas the coverage reranker alone puts the answer first
    alone = assemble(Q, _pool(), policy=_policy(), query_type="fact", reranker=coverage_reranker(WEIGHTS))
    assert alone.ranked[0].chunk_id == "answer"


def test_a_cross_encoder_scoring_only_the_top_keeps_the_rest_below_in_order() -> None:
    model = StubCrossEncoder()
    scores = cross_encoder_reranker(model, top=2)(Q, _pool())
    assert len(model.seen[0]) == 2
    assert scores[2] > scores[3] and max(scores[2:]) < min(scores[:2])


# -- switched off by configuration -----------------------------------------------------------------------------------


def test_with_rerank_off_the_pool_order_is_the_fused_order() -> None:
    # Given the coverage reranker, which lifts the answer past the quota
    on, off = Trace(), Trace()
    reranker = coverage_reranker(WEIGHTS)
    reranked = compose(Q, "default", "default-v1", _pool(), policy=_policy(), query_type="fact",
                       options=PacketOptions(reranker=reranker, line=LineOptions(trace=on)))
    # When the rerank stage is switched off
    fused = compose(Q, "default", "default-v1", _pool(), policy=_policy(), query_type="fact",
                    options=PacketOptions(reranker=reranker, line=LineOptions(frozenset({"rerank"}), off)))
    # Then the pool leaves the stage in fused order and the quota drops the answer, which the trace says
    stage = off.stage("rerank")
    assert stage is not None and not stage.ran and stage.after == ("intro", "other", "views", "answer")
    assert reranked.evidence[0].chunk_id == "answer"
    assert "answer" not in [e.chunk_id for e in fused.evidence]
    assert off.lost("answer") == ("select", "per_document")
    # And the trace of the reranked run has the ranks before and after
    assert on.stage("rerank").ranks["answer"] == (3, 0)  # type: ignore[union-attr]


def test_with_group_off_near_copies_of_two_documents_are_both_shown() -> None:
    text = ("The session engine stores data in the database by default; set SESSION_ENGINE to use the cache or "
            "signed cookies instead, and run the clearsessions command regularly.")
    cands = [_cand("a", "docs-a", 0.9, text), _cand("b", "docs-b", 0.8, text + " ")]
    trace = Trace()
    grouped = compose(Q, "default", "default-v1", cands, options=PacketOptions(line=LineOptions(trace=trace)))
    plain = compose(Q, "default", "default-v1", cands, options=PacketOptions(line=LineOptions(frozenset({"group"}))))
    assert len(grouped.evidence) == 1 and grouped.evidence[0].also_in
    assert trace.stage("group").grouped_into == {"b": "a"}  # type: ignore[union-attr]
    assert trace.lost("b") == ("group", "grouped")
    assert len(plain.evidence) == 2


def test_the_refusal_reads_signals_any_stage_adds_to_the_board() -> None:
    policy = RefusalPolicy(extra_weights=(("reranker_top", 4.0),))
    assert with_extra(policy, {"reranker_top": 0.5}).bias == pytest.approx(policy.bias + 2.0)
    assert with_extra(policy, {}) is policy
    assert with_extra(RefusalPolicy(), {"reranker_top": 0.5}) == RefusalPolicy()


# -- through the client and the settings ---------------------------------------------------------------------------


SESSIONS = ("# Sessions\n\n## Overview\n\nSessions let a site keep per-visitor state between requests.\n\n"
            "## Storage\n\nBy default, Django stores session data in your database (the django_session table).\n\n"
            "## Cookies\n\nThe session cookie is named sessionid and lasts two weeks.\n")
CACHE = "# Cache\n\nThe cache framework keeps computed pages; a cache backend can also hold session data.\n"


def _world(tmp_path: Path, **context: object) -> Services:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "sessions.md").write_text(SESSIONS)
    (docs / "cache.md").write_text(CACHE)
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 context={"min_score": 0.0, "refusal": False, **context}))
    svc.registry.add_source("docs", kind="folder", location=str(docs), owner="ops@example.com", kb="default")
    assert sync_inline(svc, "docs").build_status == "built"
    return svc


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Services]:
    svc = _world(tmp_path)
    try:
        yield svc
    finally:
        svc.close()


def test_the_trace_follows_a_query_through_every_stage_and_costs_nothing_unasked(world: Services) -> None:
    trace = Trace()
    packet = world.client.retrieve(Q, kb="default", principal=Principal.of("ana"), limit=1, trace=trace)
    assert [s.name for s in trace.stages] == list(NAMES)
    assert all(s.ran for s in trace.stages)
    recall = trace.stage("recall")
    assert recall is not None and recall.after and set(recall.notes["dense_scores"]) == set(recall.after)
    # limit=1: every recalled chunk but the one shown was lost at a stage that says why
    shown = {e.chunk_id for e in packet.evidence}
    assert len(shown) == 1
    for chunk_id in set(recall.after) - shown:
        assert trace.lost(chunk_id) is not None, chunk_id
    assert trace.stage("render").after == tuple(e.chunk_id for e in packet.evidence)  # type: ignore[union-attr]
    # And the same question without a trace gives the same packet
    again = world.client.retrieve(Q, kb="default", principal=Principal.of("ana"), limit=1)
    assert again.rendered.split("DATA-")[0] == packet.rendered.split("DATA-")[0]
    assert [e.chunk_id for e in again.evidence] == [e.chunk_id for e in packet.evidence]


def test_a_refused_question_says_why_in_the_refuse_stage(tmp_path: Path) -> None:
    svc = _world(tmp_path, refusal=True)
    try:
        trace = Trace()
        packet = svc.client.retrieve("What does QUUX_FROBNICATE_LIMIT set?", kb="default", trace=trace)
    finally:
        svc.close()
    assert packet.insufficient
    refuse = trace.stage("refuse")
    assert refuse is not None and refuse.notes["reason"] == "key_terms_missing"
    assert refuse.notes["signals"]["unknown"]
    assert trace.stages[-1].name == "refuse"  # the line ended there: no assembly for a refused question


def test_disabled_stages_is_a_context_setting_the_client_honours(tmp_path: Path) -> None:
    svc = _world(tmp_path, disabled_stages=["rerank", "conflicts"])
    try:
        assert svc.client.disabled == {"rerank", "conflicts"}
        trace = Trace()
        svc.client.retrieve(Q, kb="default", trace=trace)
        rerank = trace.stage("rerank")
        assert rerank is not None and not rerank.ran and rerank.after == rerank.before
        assert not trace.stage("conflicts").ran  # type: ignore[union-attr]
    finally:
        svc.close()


def test_a_required_stage_in_the_setting_fails_the_client(tmp_path: Path) -> None:
    svc = _world(tmp_path)
    try:
        with pytest.raises(ConfigError, match="recheck"):
            InjectionClient(svc.store, svc.embedder, QueryTuning(policy=ContextPolicy(disabled_stages=frozenset({"recheck"}))))
    finally:
        svc.close()


def test_the_clients_reranker_chains_after_the_coverage_reranker(world: Services) -> None:
    model = StubCrossEncoder()
    tuning = QueryTuning(min_score=0.0, refusal=RefusalPolicy(enabled=False), reranker=cross_encoder_reranker(model))
    client = InjectionClient(world.store, world.embedder, tuning, QueryHooks(naming=world.naming))
    trace = Trace()
    packet = client.retrieve(Q, kb="default", trace=trace)
    assert trace.stage("rerank").notes["rerankers"] == 2  # type: ignore[union-attr]
    assert model.seen and packet.evidence
    assert "cache" in packet.evidence[0].text.lower()  # the model's preference orders the packet
