"""The injection client's two records: its tuning, read from the ``context`` settings, and its hooks."""

from __future__ import annotations

from freshindex.injection.client import InjectionClient, QueryHooks, QueryTuning
from freshindex.injection.refusal import RefusalPolicy
from freshindex.settings.sections.context import ContextSettings
from freshindex.vectorstore.edge import EdgeStore


def test_the_tuning_is_the_context_section_s_values() -> None:
    context = ContextSettings.model_validate({"min_score": 0.31, "lexical_rerank": False, "max_stale_s": 60,
                                              "query_planning": False, "candidate_pool": 77})
    refusal = RefusalPolicy(enabled=False)
    tuning = QueryTuning.of(context, refusal=refusal)
    assert (tuning.min_score, tuning.lexical_rerank, tuning.max_stale_s, tuning.planning) == (0.31, False, 60, False)
    assert tuning.refusal is refusal and tuning.policy is not None and tuning.policy.candidate_pool == 77


def test_a_client_built_from_records_holds_their_values(tmp_path) -> None:
    store = EdgeStore(tmp_path / "vectors")
    try:
        client = InjectionClient(store, embedder=None, tuning=QueryTuning(min_score=0.7, planning=True),  # type: ignore[arg-type]
                                 hooks=QueryHooks(clock=lambda: None))  # type: ignore[arg-type,return-value]
        assert client.min_score == 0.7 and client.planning and client.clock() is None
        default = InjectionClient(store, embedder=None)  # type: ignore[arg-type]
        assert default.min_score == QueryTuning().min_score and default.refusal == RefusalPolicy()
    finally:
        store.close()
