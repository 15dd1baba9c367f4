"""What an evaluation found: per question a verdict, and the set's figures, gates, and ways to show them.

:class:`Report` holds the :class:`QuestionResult` of every question and computes the figures:

* ``hit_at_k``: questions with an expected document (``must_answer`` and ``may_refuse``) whose packet
  has an item on it within the limit; a refused question is a miss;
* ``passage_at_k``: of those with a required passage, the share whose passage an item on the document holds;
* ``mrr``: the mean reciprocal rank of the first item on the document (0 without one) within the limit;
* ``refusal_precision`` / ``refusal_recall``: over ``must_answer`` and ``must_refuse`` questions (``may_refuse``
  left out), refused questions that had to be / questions that had to be refused that were;
* ``pass_ratio``: questions whose verdict their ``answer`` accepts (``ok``; and ``refused`` for ``may_refuse``);
* counts by verdict and, per tag, the questions, passes and verdicts.

A figure with no question to count is None (and its gate does not hold).  :meth:`Report.metrics` is what a
metric exporter reads.  What it does not do: ask anything (:mod:`evaluation.run` does).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from freshindex.core.scoring import QuestionScore
from freshindex.evaluation.diagnose import VERDICTS, Diagnosis
from freshindex.evaluation.golden import GoldenQuestion, Thresholds

__all__ = ["Ablation", "QuestionResult", "Report"]

_FIGURES = ("hit_at_k", "passage_at_k", "mrr", "refusal_precision", "refusal_recall", "pass_ratio")
_GATES = {"min_hit": "hit_at_k", "min_passage": "passage_at_k", "min_mrr": "mrr",
          "min_refusal_precision": "refusal_precision", "min_refusal_recall": "refusal_recall",
          "min_pass": "pass_ratio"}


@dataclass(frozen=True)
class QuestionResult:
    """One question's outcome: its verdict and stage, whether it passed, and its scores."""

    id: str
    question: str
    answer: str
    tags: tuple[str, ...]
    verdict: str
    stage: str | None
    detail: dict[str, Any]
    passed: bool
    refused: bool
    reason: str | None
    hit: bool | None
    passage: bool | None
    rank: int | None
    rr: float | None
    snapshot_id: str | None
    served: tuple[str, ...] = ()
    has_expected: bool = False

    @classmethod
    def of(cls, q: GoldenQuestion, found: Diagnosis, packet: Any, score: QuestionScore | None,
           snapshot_id: str | None) -> QuestionResult:
        refused = bool(packet.insufficient)
        passed = found.verdict == "ok" or (q.answer == "may_refuse" and refused)
        hit = None if score is None else score.hit and not refused
        return cls(id=q.id, question=q.question, answer=q.answer, tags=q.tags, verdict=found.verdict,
                   stage=found.stage, detail=found.detail, passed=passed, refused=refused, reason=packet.reason,
                   hit=hit, passage=None if score is None or score.passage is None else score.passage and not refused,
                   rank=None if score is None or refused else score.rank,
                   rr=None if score is None else (0.0 if refused else score.rr), snapshot_id=snapshot_id,
                   served=tuple(e.key for e in packet.evidence), has_expected=score is not None)

    def as_dict(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["tags"], out["served"] = list(self.tags), list(self.served)
        return out


def _ratio(values: list[bool]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


@dataclass(frozen=True)
class Report:
    """An evaluation of one golden set on one knowledge base (see the module docstring)."""

    kb: str
    golden: str
    limit: int
    results: tuple[QuestionResult, ...]
    thresholds: Thresholds = field(default_factory=Thresholds)
    disabled: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> dict[str, float | None]:
        scored = [r for r in self.results if r.answer != "must_refuse" and r.has_expected]
        with_passage = [r for r in scored if r.passage is not None]
        decided = [r for r in self.results if r.answer != "may_refuse"]
        refused = [r for r in decided if r.refused]
        must = [r for r in decided if r.answer == "must_refuse"]
        return {
            "hit_at_k": _ratio([bool(r.hit) for r in scored]),
            "passage_at_k": _ratio([bool(r.passage) for r in with_passage]),
            "mrr": round(sum(r.rr or 0.0 for r in scored) / len(scored), 4) if scored else None,
            "refusal_precision": _ratio([r.answer == "must_refuse" for r in refused]),
            "refusal_recall": _ratio([r.refused for r in must]),
            "pass_ratio": _ratio([r.passed for r in self.results]),
        }

    def by_verdict(self) -> dict[str, int]:
        counts = Counter(r.verdict for r in self.results)
        return {v: counts[v] for v in VERDICTS if counts[v]}

    def by_tag(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for r in self.results:
            for tag in r.tags or ("(untagged)",):
                row = out.setdefault(tag, {"questions": 0, "passed": 0, "refused": 0, "verdicts": Counter()})
                row["questions"] += 1
                row["passed"] += int(r.passed)
                row["refused"] += int(r.refused)
                row["verdicts"][r.verdict] += 1
        return {t: {**row, "verdicts": dict(row["verdicts"])} for t, row in sorted(out.items())}

    def failed_gates(self) -> dict[str, dict[str, float | None]]:
        """Gate name -> {minimum, value} for each threshold that does not hold (a None figure does not)."""
        figs = self.figures()
        out = {}
        for gate, minimum in self.thresholds.as_dict().items():
            value = figs[_GATES[gate]]
            if value is None or value < minimum:
                out[gate] = {"minimum": minimum, "value": value}
        return out

    @property
    def passed(self) -> bool:
        return not self.failed_gates()

    def metrics(self) -> dict[str, Any]:
        """What a metric exporter needs: hit, passage and pass ratios, MRR, and failures by stage and verdict."""
        figs = self.figures()
        failing = [r for r in self.results if not r.passed]
        return {"questions": len(self.results), "hit_ratio": figs["hit_at_k"], "passage_ratio": figs["passage_at_k"],
                "mrr": figs["mrr"], "pass_ratio": figs["pass_ratio"],
                "failures_by_stage": dict(Counter(r.stage or "none" for r in failing)),
                "failures_by_verdict": dict(Counter(r.verdict for r in failing))}

    def as_dict(self) -> dict[str, Any]:
        return {"kb": self.kb, "golden": self.golden, "limit": self.limit, "disabled_stages": self.disabled,
                "figures": self.figures(), "by_verdict": self.by_verdict(), "by_tag": self.by_tag(),
                "thresholds": self.thresholds.as_dict(), "failed_gates": self.failed_gates(), "passed": self.passed,
                "questions": [r.as_dict() for r in self.results], **self.extra}

    def json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class Ablation:
    """The same golden set run with stages switched off: (row name, its report), in :data:`run.ABLATIONS` order."""

    rows: tuple[tuple[str, Report], ...]

    def table(self) -> list[dict[str, Any]]:
        """One row per ablation: its stages switched off, figures and counts by verdict."""
        return [{"row": name, "disabled_stages": list(r.disabled or ()), **r.figures(), "by_verdict": r.by_verdict()}
                for name, r in self.rows]

    def as_dict(self) -> dict[str, Any]:
        return {"ablation": self.table(), "reports": {name: r.as_dict() for name, r in self.rows}}
