"""The injection client's two records: its tuning, read from the ``context`` settings, and its hooks."""

from __future__ import annotations

import warnings

import pytest

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


def test_the_old_keyword_arguments_still_work_for_one_release_with_a_deprecation_warning(tmp_path) -> None:
    store = EdgeStore(tmp_path / "vectors")
    try:
        # Given the keywords of the release before QueryTuning and QueryHooks, one of each record's
        with pytest.warns(DeprecationWarning, match="min_score, clock are deprecated") as heard:
            client = InjectionClient(store, None, min_score=0.7, clock=lambda: None)  # type: ignore[arg-type,return-value]
        # Then each lands in its record's field, and the warning points at the caller's line
        assert client.min_score == 0.7 and client.clock() is None
        assert [w.filename for w in heard if w.category is DeprecationWarning] == [__file__]
        # and over records given as well, an old keyword sets its own field only
        with pytest.warns(DeprecationWarning):
            both = InjectionClient(store, None, QueryTuning(min_score=0.5, planning=False),  # type: ignore[arg-type]
                                   planning=True)
        assert (both.min_score, both.planning) == (0.5, True)
    finally:
        store.close()


def test_a_misspelt_keyword_is_a_type_error_and_the_records_warn_nothing(tmp_path) -> None:
    store = EdgeStore(tmp_path / "vectors")
    try:
        with pytest.raises(TypeError, match="min_scor"):
            InjectionClient(store, None, min_scor=0.7)  # type: ignore[arg-type,call-arg]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            InjectionClient(store, None, QueryTuning(min_score=0.7), QueryHooks())  # type: ignore[arg-type]
    finally:
        store.close()
