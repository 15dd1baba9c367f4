"""Evaluation of a knowledge base against its golden set: hit rates, refusals, and the stage that lost each miss.

``freshindex eval`` runs it; a scheduled evaluation and the benchmarks call it::

    from freshindex.evaluation import evaluate, load_golden
    report = evaluate(services, load_golden("golden.jsonl"), "docs")
    report.metrics()  # {"hit_ratio": ..., "passage_ratio": ..., "failures_by_stage": {...}, ...}

The scorer (:func:`score_items`, :func:`on_expected`, :func:`holds`, :func:`norm`, :func:`rank_of`) is the one
the benchmarks use.  What this package does not do: index anything, or judge an LLM's answer (only the evidence
the line hands it); it imports neither the CLI nor the workers.
"""

from freshindex.core.scoring import (
    OCR_PASSAGE_MATCH,
    QuestionScore,
    holds,
    key_matches,
    norm,
    on_expected,
    rank_of,
    score_items,
)
from freshindex.evaluation.diagnose import VERDICTS, Diagnosis, diagnose, join_texts
from freshindex.evaluation.golden import (
    ANSWERS,
    Expected,
    GoldenQuestion,
    GoldenSet,
    Thresholds,
    load_golden,
    parse_golden,
)
from freshindex.evaluation.report import Ablation, QuestionResult, Report
from freshindex.evaluation.run import ABLATIONS, ablate, evaluate

__all__ = ["ABLATIONS", "ANSWERS", "OCR_PASSAGE_MATCH", "VERDICTS", "Ablation", "Diagnosis", "Expected",
           "GoldenQuestion", "GoldenSet", "QuestionResult", "QuestionScore", "Report", "Thresholds", "ablate",
           "diagnose", "evaluate", "holds", "join_texts", "key_matches", "load_golden", "norm", "on_expected",
           "parse_golden", "rank_of", "score_items"]
