"""An evaluation shown to a person: a terminal summary, a Markdown or HTML report, the ablation table.

Each report says, per failing question, the verdict, the stage that broke and what the diagnosis found
(``docs/eval.md``: how to read one).  What it does not do: compute a figure (:class:`~evaluation.report.Report`
does) or write a file (the command does).
"""

from __future__ import annotations

import html
import json
from typing import Any

from freshindex.evaluation.diagnose import VERDICTS
from freshindex.evaluation.report import Ablation, Report

__all__ = ["ablation_html", "ablation_markdown", "html_report", "markdown", "summary"]

_COLUMNS = ("hit_at_k", "passage_at_k", "mrr", "refusal_precision", "refusal_recall", "pass_ratio")


def _fig(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _detail(detail: dict[str, Any]) -> str:
    shown = {k: v for k, v in detail.items() if k != "signals" and v not in (None, "", [], {})}
    text = json.dumps(shown, ensure_ascii=False, default=str)
    return text if len(text) <= 300 else text[:297] + "..."


def _gates(report: Report) -> str:
    if not report.thresholds.as_dict():
        return "no thresholds set"
    return "PASS: every threshold holds" if report.passed else "FAIL: " + ", ".join(report.failed_gates())


def summary(report: Report) -> str:
    """A few lines for a terminal: figures, verdict counts, gates, the failing questions."""
    figs = report.figures()
    lines = [f"{report.golden or 'golden set'} on {report.kb} (limit {report.limit}): {len(report.results)} questions",
             "  " + "  ".join(f"{k}={_fig(figs[k])}" for k in _COLUMNS),
             "  verdicts: " + ", ".join(f"{v} {n}" for v, n in report.by_verdict().items())]
    for gate, got in report.failed_gates().items():
        lines.append(f"  gate {gate} {got['minimum']} not met: {_fig(got['value'])}")
    for r in report.results:
        if not r.passed:
            lines.append(f"  {r.id}: {r.verdict} at {r.stage or '-'} {_detail(r.detail)}")
    if not report.thresholds.as_dict():
        lines.append("no thresholds set (exit 0)")
    else:
        lines.append("PASS: every threshold holds" if report.passed else "FAIL: a threshold does not hold")
    return "\n".join(lines)


def markdown(report: Report) -> str:
    """The report as Markdown: figures, verdicts, tags, and one row per question."""
    figs = report.figures()
    out = [f"# Evaluation of {report.golden or 'a golden set'} on `{report.kb}`", "",
           f"Limit {report.limit}; stages switched off: {', '.join(report.disabled or ()) or 'none (settings)'}; "
           f"{_gates(report)}.", "",
           "| " + " | ".join(_COLUMNS) + " |", "|" + " --- |" * len(_COLUMNS),
           "| " + " | ".join(_fig(figs[k]) for k in _COLUMNS) + " |", "", "## Verdicts", "",
           "| verdict | questions |", "| --- | ---: |"]
    out += [f"| {v} | {n} |" for v, n in report.by_verdict().items()]
    out += ["", "## By tag", "", "| tag | questions | passed | refused | verdicts |", "| --- | ---: | ---: | ---: | --- |"]
    out += [f"| {t} | {row['questions']} | {row['passed']} | {row['refused']} | "
            f"{', '.join(f'{v} {n}' for v, n in row['verdicts'].items())} |" for t, row in report.by_tag().items()]
    out += ["", "## Questions", "", "| id | answer | verdict | stage | rank | detail |", "| --- | --- | --- | --- | ---: | --- |"]
    out += [f"| {r.id} | {r.answer} | {r.verdict} | {r.stage or ''} | {r.rank or ''} | "
            f"{_detail(r.detail).replace('|', '/')} |" for r in report.results]
    return "\n".join(out) + "\n"


def html_report(report: Report, before: str = "") -> str:
    """The report as one self-contained HTML page (every value escaped); ``before``: HTML put first (a table)."""
    figs = report.figures()
    esc = html.escape
    rows = "".join(f"<tr class='{'ok' if r.passed else 'miss'}'><td>{esc(r.id)}</td><td>{esc(r.question)}</td>"
                   f"<td>{esc(r.answer)}</td><td>{esc(r.verdict)}</td><td>{esc(r.stage or '')}</td>"
                   f"<td>{r.rank or ''}</td><td><code>{esc(_detail(r.detail))}</code></td></tr>"
                   for r in report.results)
    head = "".join(f"<th>{k}</th>" for k in _COLUMNS)
    cells = "".join(f"<td>{_fig(figs[k])}</td>" for k in _COLUMNS)
    verdicts = "".join(f"<li>{esc(v)}: {n}</li>" for v, n in report.by_verdict().items())
    return ("<!doctype html><meta charset='utf-8'><title>freshindex eval</title>"
            "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:2px 6px}"
            "table{border-collapse:collapse}.miss{background:#fee}</style>"
            f"<h1>Evaluation of {esc(report.golden)} on {esc(report.kb)}</h1>{before}"
            f"<p>Limit {report.limit}: {esc(_gates(report))}</p>"
            f"<table><tr>{head}</tr><tr>{cells}</tr></table><h2>Verdicts</h2><ul>{verdicts}</ul>"
            "<h2>Questions</h2><table><tr><th>id</th><th>question</th><th>answer</th><th>verdict</th>"
            f"<th>stage</th><th>rank</th><th>detail</th></tr>{rows}</table>\n")


def ablation_markdown(ablation: Ablation) -> str:
    """The ablation rows side by side: figures, then the verdict counts."""
    seen = {v for row in ablation.table() for v in row["by_verdict"]}
    verdicts = [v for v in VERDICTS if v in seen]
    out = ["| row | stages off | " + " | ".join(_COLUMNS) + " | " + " | ".join(verdicts) + " |",
           "| --- | --- |" + " ---: |" * (len(_COLUMNS) + len(verdicts))]
    for row in ablation.table():
        out.append(f"| {row['row']} | {', '.join(row['disabled_stages']) or 'none'} | "
                   + " | ".join(_fig(row[k]) for k in _COLUMNS) + " | "
                   + " | ".join(str(row["by_verdict"].get(v, 0)) for v in verdicts) + " |")
    return "\n".join(out) + "\n"


def ablation_html(ablation: Ablation) -> str:
    """The ablation rows as an HTML table (every value escaped)."""
    head = "".join(f"<th>{k}</th>" for k in ("row", "stages off", *_COLUMNS))
    rows = "".join("<tr>" + f"<td>{html.escape(r['row'])}</td><td>{html.escape(', '.join(r['disabled_stages']) or 'none')}</td>"
                   + "".join(f"<td>{_fig(r[k])}</td>" for k in _COLUMNS) + "</tr>" for r in ablation.table())
    return f"<h2>Ablation</h2><table><tr>{head}</tr>{rows}</table>"
