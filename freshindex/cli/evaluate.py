"""``freshindex eval``: a knowledge base's golden set asked through the query line, with the stage that lost each miss.

Registered into the ``freshindex`` group by :func:`register` (one line in ``freshindex/cli/__init__.py``); reaches only
``ctx.obj`` (``.settings``, ``.services``) and imports nothing from the package ``__init__``.  Exit 0 when every
threshold holds (the set's header, overridden by the options), 1 when one does not, 2 for a malformed set.
What it does not do: index, or change a setting of the knowledge base (``--stages`` switches stages off for
its own queries only).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from freshindex.cli.context import CliState
from freshindex.cli.support import ConfigProblem, json_option, require
from freshindex.core.exit_codes import ExitCode

_RATIO = click.FloatRange(0.0, 1.0)


def _write_report(path: Path, report: Any, table: Any = None) -> None:
    """``report`` as Markdown or HTML at ``path``; with ``--stages``, the ablation ``table`` before it."""
    from freshindex.evaluation.render import ablation_html, ablation_markdown, html_report, markdown

    if path.suffix.lower() in (".html", ".htm"):
        text = html_report(report, ablation_html(table) if table is not None else "")
    elif path.suffix.lower() == ".md":
        text = (f"# Ablation\n\n{ablation_markdown(table)}\n" if table is not None else "") + markdown(report)
    else:
        raise ConfigProblem(f"--report {path}: name a .md or .html file")
    path.write_text(text, encoding="utf-8")


@click.command("eval")
@click.argument("golden", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--kb", default=None, help="Knowledge base (default: settings default_kb).")
@click.option("--snapshot", default=None, help="Evaluate this snapshot (default: the one the alias serves); "
                                               "a question's as_of overrides it.")
@click.option("--limit", default=5, show_default=True, type=click.IntRange(1, 50), help="Evidence items (k).")
@click.option("--stages", is_flag=True, help="Ablation: run the set once per row with query stages switched off, "
                                             "side by side.")
@click.option("--report", "report_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report to FILE.md or FILE.html.")
@click.option("--min-hit", type=_RATIO, default=None, help="Gate: hit@k at least this.")
@click.option("--min-passage", type=_RATIO, default=None, help="Gate: passage@k at least this.")
@click.option("--min-mrr", type=_RATIO, default=None, help="Gate: MRR at least this.")
@click.option("--min-refusal-precision", type=_RATIO, default=None, help="Gate: refusal precision at least this.")
@click.option("--min-refusal-recall", type=_RATIO, default=None, help="Gate: refusal recall at least this.")
@click.option("--min-pass", type=_RATIO, default=None, help="Gate: share of questions passing at least this.")
@json_option
@click.pass_obj
def eval_command(state: CliState, golden: Path, kb: str | None, snapshot: str | None, limit: int, stages: bool,
                 report_path: Path | None, as_json: bool, **gates: float | None) -> None:
    """Ask every question of GOLDEN (JSONL, docs/eval.md) on a knowledge base; say where each miss was lost."""
    from freshindex.evaluation import Thresholds, ablate, evaluate, load_golden
    from freshindex.evaluation.render import ablation_markdown, summary

    kb = kb or state.settings.default_kb
    require(state, kb=kb, snapshot=snapshot)
    golden_set = load_golden(golden)
    thresholds = Thresholds(**gates)
    table = None
    if stages:
        table = ablate(state.services, golden_set, kb, snapshot=snapshot, limit=limit, thresholds=thresholds)
        report = table.rows[-1][1]  # everything on: the row the gates apply to
        if as_json:
            click.echo(json.dumps({**table.as_dict(), "passed": report.passed}, indent=2, ensure_ascii=False,
                                  default=str))
        else:
            click.echo(ablation_markdown(table))
    else:
        report = evaluate(state.services, golden_set, kb, snapshot=snapshot, limit=limit, thresholds=thresholds)
        click.echo(report.json() if as_json else summary(report))
    if report_path is not None:
        _write_report(report_path, report, table)
    if not report.passed:
        sys.exit(ExitCode.FAILED)


def register(cli: click.Group) -> None:
    cli.add_command(eval_command)


__all__ = ["register"]
