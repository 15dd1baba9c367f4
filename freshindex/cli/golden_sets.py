"""``freshindex golden-sets``: golden sets registered per knowledge base, asked after each of its swaps.

``register KB FILE`` keeps the set's JSONL text in the registry (every worker reads the same set), checked with
the evaluator's own parser first; ``list`` shows each set's newest result; ``show`` prints a set's text;
``remove`` forgets a set;
``run`` asks the due sets now (``--force``: every set) as the scheduled evaluation does
(:mod:`freshindex.eval_schedule`).  Registered into the ``freshindex`` group by :func:`register` (one line
in ``freshindex/cli/__init__.py``); reaches only ``ctx.obj`` and imports nothing from the package ``__init__``.
What it does not do: evaluate at registration (the next swap or beat tick does, or ``run``), or change
``freshindex eval``, which asks a file without registering it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from freshindex.cli.context import CliState
from freshindex.cli.support import json_option, require
from freshindex.core.exit_codes import ExitCode

_RATIO = click.FloatRange(0.0, 1.0)


def _emit(data: Any, as_json: bool, text: str) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str) if as_json else text)


def _line(row: dict[str, Any]) -> str:
    m = row.get("last_metrics") or {}
    if row["last_run_at"] is None:
        result = "not evaluated yet"
    elif row.get("last_error"):
        result = f"error on {row['last_snapshot_id']}: {row['last_error']}"
    else:
        result = (f"{'passed' if row['last_passed'] else 'FAILED'} on {row['last_snapshot_id']}: "
                  f"hit {m.get('hit_ratio')}, passage {m.get('passage_ratio')}, failures {m.get('failures_by_stage')}")
    return f"{row['kb']:<12} {row['name']:<20} {row['questions']:>4} questions  {result}"


@click.group("golden-sets")
def golden_sets() -> None:
    """Golden sets asked on a knowledge base after each swap (metrics freshindex_eval_*)."""


@golden_sets.command("register")
@click.argument("kb")
@click.argument("golden", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", default=None, help="The set's name, a metric label (default: the file's stem).")
@click.option("--limit", "top_k", default=5, show_default=True, type=click.IntRange(1, 50),
              help="Evidence items (k).")
@click.option("--min-hit", type=_RATIO, default=None, help="Gate: hit@k at least this.")
@click.option("--min-passage", type=_RATIO, default=None, help="Gate: passage@k at least this.")
@click.option("--min-pass", type=_RATIO, default=None, help="Gate: share of questions passing at least this.")
@json_option
@click.pass_obj
def golden_register(state: CliState, kb: str, golden: Path, name: str | None, top_k: int, as_json: bool,
                    **gates: float | None) -> None:
    """Register GOLDEN (JSONL, docs/eval.md) for KB, or replace the set of that name (it is then due again)."""
    from freshindex.evaluation import Thresholds, parse_golden

    require(state, kb=kb)
    text = golden.read_text(encoding="utf-8")
    name = name or golden.stem
    parsed = parse_golden(text.splitlines(), golden.name)  # ConfigError (exit 2) naming the file and line
    thresholds = parsed.thresholds.merged(Thresholds(**gates)).as_dict()
    info = state.services.registry.register_golden_set(kb, name, text, thresholds=thresholds, top_k=top_k)
    _emit(info.as_dict(), as_json, f"golden set {info.name} on {info.kb}: {len(parsed.questions)} questions, "
                                   f"gates {thresholds or 'none'}; asked after each swap")


@golden_sets.command("list")
@click.option("--kb", default=None)
@json_option
@click.pass_obj
def golden_list(state: CliState, kb: str | None, as_json: bool) -> None:
    """Registered sets and each one's newest result."""
    require(state, kb=kb)
    rows = [g.as_dict() for g in state.services.registry.list_golden_sets(kb)]
    _emit(rows, as_json, "\n".join(_line(r) for r in rows) or "no golden sets")


@golden_sets.command("show")
@click.argument("kb")
@click.argument("name")
@json_option
@click.pass_obj
def golden_show(state: CliState, kb: str, name: str, as_json: bool) -> None:
    """Print golden set NAME of KB as registered (JSONL), e.g. to ask it with ``freshindex eval`` on a snapshot."""
    require(state, kb=kb)
    found = [g for g in state.services.registry.list_golden_sets(kb) if g.name == name]
    if not found:
        from freshindex.core.errors import NotFoundError

        raise NotFoundError(f"no golden set {name!r} on knowledge base {kb!r}")
    if as_json:
        _emit(found[0].as_dict(content=True), True, "")
    else:
        click.echo(found[0].content, nl=False)


@golden_sets.command("remove")
@click.argument("kb")
@click.argument("name")
@json_option
@click.pass_obj
def golden_remove(state: CliState, kb: str, name: str, as_json: bool) -> None:
    """Forget golden set NAME of KB (its gauges go at the next scrape of serve)."""
    require(state, kb=kb)
    state.services.registry.remove_golden_set(kb, name)
    _emit({"kb": kb, "removed": name}, as_json, f"removed golden set {name} of {kb}")


@golden_sets.command("run")
@click.option("--kb", default=None)
@click.option("--force", is_flag=True, help="Ask every set again, not only those not yet run on the serving "
                                            "snapshot.")
@json_option
@click.pass_obj
def golden_run(state: CliState, kb: str | None, force: bool, as_json: bool) -> None:
    """Ask the due sets now, in this process, and record them as the scheduled evaluation does; exit 1 when
    one did not pass."""
    require(state, kb=kb)
    done = state.services.evaluate_golden_sets(kb, force=force)
    _emit(done, as_json, "\n".join(f"{d['kb']:<12} {d['golden']:<20} "
                                   f"{'passed' if d['passed'] else 'FAILED'} on {d['snapshot_id']}: "
                                   f"hit {d.get('hit_ratio')}, passage {d.get('passage_ratio')}"
                                   f"{', ' + d['error'] if d.get('error') else ''}" for d in done)
          or "no golden set due")
    if not all(d["passed"] for d in done):
        sys.exit(ExitCode.FAILED)


def register(cli: click.Group) -> None:
    cli.add_command(golden_sets)


__all__ = ["register"]
