"""The golden set format (its schema and its loader agree), the one scorer, and the report's figures."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from freshindex.core.errors import ConfigError
from freshindex.evaluation import (
    Thresholds,
    holds,
    join_texts,
    load_golden,
    norm,
    on_expected,
    parse_golden,
    score_items,
)
from freshindex.evaluation.diagnose import Diagnosis
from freshindex.evaluation.report import QuestionResult, Report
from tests.conftest import ROOT

SCHEMA = jsonschema.Draft202012Validator(json.loads((ROOT / "docs" / "golden.schema.json").read_text()))
BENCH = sorted((ROOT / "bench" / "goldens").glob("*/questions.jsonl"))


@pytest.mark.parametrize("path", BENCH, ids=[p.parent.name for p in BENCH])
def test_every_bench_golden_set_loads_as_it_is_and_fits_the_schema(path: Path) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert all(SCHEMA.is_valid(line) for line in lines)
    golden = load_golden(path)
    assert len(golden.questions) == len(lines)
    for raw, q in zip(lines, golden.questions, strict=True):
        assert q.answer == ("must_refuse" if raw["kind"] == "unanswerable" else "must_answer")
        assert raw["kind"] in q.tags and q.required_passage == raw.get("passage")
        if raw.get("page"):
            page = raw["page"].partition("#page=")
            assert q.expected is not None and q.expected.key == page[0]
            assert q.expected.page == (int(page[2]) if page[2] else None)


def test_a_full_line_and_a_header() -> None:
    lines = [{"thresholds": {"min_hit": 0.8, "min_refusal_recall": 0.5}},
             {"id": "a", "question": "How do I roll back?", "answer": "may_refuse", "tags": ["ops"],
              "expected": {"source": "wiki", "key": "ops/rollback.md", "anchor": "#steps", "commit": "abc1234"},
              "required_passage": "freshindex snapshots rollback", "as_of": "docs-v3",
              "principal": {"id": "ann", "groups": ["eng"], "tenant": "acme"}}]
    assert all(SCHEMA.is_valid(line) for line in lines)
    golden = parse_golden([json.dumps(line) for line in lines])
    q = golden.questions[0]
    assert (q.expected.source, q.expected.key, q.expected.commit) == ("wiki", "ops/rollback.md", "abc1234")
    assert q.principal == {"id": "ann", "groups": ("eng",), "tenant": "acme"} and q.as_of == "docs-v3"
    # the command line's thresholds replace the header's, one by one
    merged = golden.thresholds.merged(Thresholds(min_hit=0.9))
    assert merged.as_dict() == {"min_hit": 0.9, "min_refusal_recall": 0.5}


@pytest.mark.parametrize("line", [
    {"id": "x", "question": "q?", "answer": "maybe", "expected": "a.md"},
    {"id": "x", "question": "q?", "answer": "must_answer"},
    {"id": "x", "question": "", "expected": "a.md"},
    {"id": "x", "question": "q?", "expected": {"page": 3}},
    {"id": "x", "question": "q?", "expected": "a.md", "principal": {"groups": "eng"}},
    {"thresholds": {"min_hit": 1.5}},
    {"thresholds": {"min_hits": 0.5}},
])
def test_the_schema_and_the_loader_refuse_the_same_lines(line: dict) -> None:
    assert not SCHEMA.is_valid(line)
    with pytest.raises(ConfigError, match=r"golden:1"):
        parse_golden([json.dumps(line)])


def test_the_scorer_rules() -> None:
    items = [{"key": "docs/other.md", "text": "pip install freshindex"},
             {"key": "src/docs/install.md", "text": "To  install run\n| pip | install |  freshindex |"},
             {"key": "manual.pdf", "text": "mmm", "page": 3, "page_end": 5}]
    # a key relative to the source's root, whitespace and table pipes ignored, the rank over the list
    s = score_items(items, "docs/install.md", "run pip install freshindex")
    assert (s.hit, s.passage, s.rank, s.rr) == (True, True, 2, 0.5)
    assert score_items(items, "docs/install.md", "run pip install freshindex", k=1).hit is False
    assert score_items(items, "install.md", "uninstall").passage is False
    # a PDF page: the item's page range must hold it
    assert on_expected(items[2], "manual.pdf", 4) and not on_expected(items[2], "manual.pdf", 6)
    # OCR misreads: 90 % of the characters in order
    assert holds("interval N01 applies", {"text": "interval NO1 applies", "ocr": True})
    assert not holds("interval N01 applies", {"text": "interval NO1 applies"})
    assert norm(" a |\tb\n") == "ab"
    # the chunker's layout of a page's words: a definition list's "term: definition", a pipe escaped in a cell
    page = "SEND_ERROR CMake Error, continue processing. On Off || Not Defined YES"
    chunk = "SEND_ERROR: CMake Error, continue processing.\n\n| On | Off \\|\\| Not Defined | YES |"
    assert score_items([{"key": "message.html", "text": chunk}], "message.html", page).passage is True
    assert score_items([{"key": "message.html", "text": chunk}], "message.html", "SEND_ERROR stops").passage is False


def test_joined_chunks_drop_overlaps_and_continued_lines() -> None:
    # the second chunk repeats the first one's last words (the chunker's overlap)
    joined = join_texts(["alpha beta gamma delta", "gamma delta epsilon", "# def f(...) (continued)\nzeta eta"])
    assert joined == norm("alpha beta gamma delta epsilon zeta eta")


def _result(verdict: str, *, answer: str = "must_answer", refused: bool = False, hit: bool | None = True,
            passage: bool | None = True, rr: float | None = 1.0, stage: str | None = None) -> QuestionResult:
    return QuestionResult(id=verdict, question="?", answer=answer, tags=("t",), verdict=verdict, stage=stage,
                          detail={}, passed=verdict == "ok", refused=refused, reason=None, hit=hit, passage=passage,
                          rank=1 if hit else None, rr=rr, snapshot_id="kb-v1", has_expected=answer != "must_refuse")


def test_the_report_figures_metrics_and_gates() -> None:
    results = (_result("ok"), _result("reranked_out", passage=False, rr=0.5, stage="select"),
               _result("refused", refused=True, hit=False, passage=False, rr=0.0, stage="refuse"),
               _result("ok", answer="must_refuse", refused=True, hit=None, passage=None, rr=None),
               _result("not_refused", answer="must_refuse", hit=None, passage=None, rr=None, stage="refuse"))
    report = Report(kb="kb", golden="g", limit=5, results=results, thresholds=Thresholds(min_hit=0.7, min_mrr=0.4))
    figs = report.figures()
    assert figs["hit_at_k"] == 0.6667 and figs["passage_at_k"] == 0.3333 and figs["mrr"] == 0.5
    assert figs["refusal_precision"] == 0.5 and figs["refusal_recall"] == 0.5 and figs["pass_ratio"] == 0.4
    assert report.failed_gates() == {"min_hit": {"minimum": 0.7, "value": 0.6667}} and not report.passed
    metrics = report.metrics()
    assert metrics["hit_ratio"] == 0.6667 and metrics["passage_ratio"] == 0.3333
    assert metrics["failures_by_stage"] == {"select": 1, "refuse": 2}
    assert report.by_tag()["t"]["verdicts"]["ok"] == 2
    assert Diagnosis("ok").verdict == "ok"


def test_the_html_report_escapes_what_the_golden_set_and_the_corpus_say() -> None:
    from dataclasses import replace

    from freshindex.evaluation.render import html_report, markdown, summary

    hostile = replace(_result("not_synced", stage="registry"), id="<b>x</b>", question="<script>alert(1)</script>",
                      detail={"error_detail": "<img src=x onerror=alert(1)>"})
    report = Report(kb="kb", golden="<g>", limit=5, results=(hostile,))
    page = html_report(report)
    assert "<script>" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert "no thresholds set" in summary(report) and "| <b>x</b> | must_answer | not_synced |" in markdown(report)
