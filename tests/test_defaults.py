"""Each default has one home, the settings: the parts built from them default to the same values.

Given the settings models with no configuration, when each part is built
with no arguments, then every field it shares with its settings section has
the settings' value.  The values are compared, not the source text, so a
literal written back into a part passes while it agrees and fails the moment
it differs from the settings.
"""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any

from freshindex.injection.budget import DEFAULT_BUDGETS, ContextPolicy, QueryBudget, QueryType
from freshindex.injection.calibration import Calibration
from freshindex.injection.client import InjectionClient, QueryTuning
from freshindex.injection.refusal import RefusalPolicy
from freshindex.settings import ContextSettings
from freshindex.settings.sections.context import QueryBudgetSettings
from freshindex.settings.sections.ingest import SourcesSettings
from freshindex.workers.parsing.limits import Limits

CONTEXT = ContextSettings()


def _shared(part: Any, settings: dict[str, Any], prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Field -> (the part's default, the settings' default) for every field the settings also hold."""
    return {f.name: (getattr(part, f.name), settings[prefix + f.name]) for f in fields(part)
            if prefix + f.name in settings}


def test_the_context_policy_defaults_are_the_context_settings() -> None:
    shared = _shared(ContextPolicy(), CONTEXT.model_dump(), "")
    assert set(shared) == {"window_tokens", "default_share", "token_margin", "candidate_pool", "near_duplicate",
                           "mmr_lambda", "join_adjacent", "test_file_weight", "changelog_weight", "budgets", "disabled_stages"}
    shared.pop("budgets")
    assert all(part == settings for part, settings in shared.values()), shared


def test_the_budget_table_defaults_are_the_settings_budgets() -> None:
    rows = {QueryType(name): QueryBudget(**row.model_dump()) for name, row in CONTEXT.budgets.items()}
    assert DEFAULT_BUDGETS == rows and ContextPolicy().budgets == rows
    assert set(rows) == set(QueryType)
    blank = QueryBudgetSettings().model_dump()
    assert {f.name: getattr(QueryBudget(), f.name) for f in fields(QueryBudget)} == blank
    # The settings' own round trip changes nothing.
    assert ContextPolicy.from_mapping(CONTEXT.model_dump()) == ContextPolicy()


def test_the_refusal_defaults_are_the_refusal_settings() -> None:
    settings = CONTEXT.model_dump()
    shared = _shared(RefusalPolicy(), settings, "refusal_")
    # extra_weights: the weights of signals a stage adds to the refusal's board, given by the code that adds
    # the stage (injection.stages), not a setting.
    assert set(shared) == {f.name for f in fields(RefusalPolicy)} - {"enabled", "extra_weights"}
    assert all(part == value for part, value in shared.values()), shared
    assert RefusalPolicy().enabled == CONTEXT.refusal
    assert RefusalPolicy.from_mapping(settings) == RefusalPolicy()


def test_the_calibration_defaults_are_the_calibration_settings() -> None:
    assert Calibration() == Calibration(enabled=CONTEXT.refusal_calibration, sample=CONTEXT.refusal_calibration_sample,
                                        perturbed=CONTEXT.refusal_calibration_perturbed,
                                        min_chunks=CONTEXT.refusal_calibration_min_chunks,
                                        target_false_rate=CONTEXT.refusal_target_false_rate)
    assert Calibration.from_mapping({}) == Calibration.from_mapping(CONTEXT.model_dump()) == Calibration()
    assert Calibration().min_score == CONTEXT.min_score
    # the pseudo-questions are asked with the floor the knowledge base's real questions are asked with
    assert Calibration.from_mapping({**CONTEXT.model_dump(), "min_score": 0.4}).min_score == 0.4


def test_the_injection_client_defaults_are_the_context_settings() -> None:
    # The client's tuning record (QueryTuning) defaults to the context settings, and so does one read off them.
    tuning = QueryTuning()
    assert tuning.min_score == CONTEXT.min_score
    assert tuning.lexical_rerank == CONTEXT.lexical_rerank
    assert tuning.max_stale_s == CONTEXT.max_stale_s
    assert tuning.planning == CONTEXT.query_planning
    read = QueryTuning.of(CONTEXT)
    assert (read.min_score, read.lexical_rerank, read.max_stale_s, read.planning) == (
        tuning.min_score, tuning.lexical_rerank, tuning.max_stale_s, tuning.planning)
    assert inspect.signature(InjectionClient).parameters["tuning"].default is None  # None: QueryTuning()


def test_the_parse_limits_defaults_are_the_sources_settings() -> None:
    src = SourcesSettings()
    assert Limits() == Limits(
        time_limit_s=src.parse_time_limit_s,
        max_nesting_depth=src.max_nesting_depth,
        max_table_rows=src.max_table_rows,
        max_render_pixels=int(src.max_render_megapixels * 1_000_000),
        max_image_pixels=int(src.max_image_megapixels * 1_000_000),
        max_decompressed_bytes=src.max_decompressed_bytes,
    )
