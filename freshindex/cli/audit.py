"""``freshindex audit``: read the access audit trail (alias moves: ``snapshots history``).

Registered into the ``freshindex`` click group by :func:`register` (one line
at the end of ``freshindex/cli/__init__.py``). ``audit denials`` lists what the query
path denied after the vector query (:mod:`acl.access`): a caller never sees
that something was denied, so this is where an operator finds out who tried
to read what, and which ACL version said no.  ``audit refusals`` groups the
insufficient-evidence answers the query path recorded (:mod:`registry.refusals`)
by key term and by source searched, so a team sees which subjects lack a
source.  What it does not do: record anything (the query path does), or show a
question the audit settings did not let the query path keep.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import click

from freshindex.acl.access import Verdict
from freshindex.cli.context import CliState
from freshindex.cli.display import escaped
from freshindex.cli.support import json_option, require
from freshindex.core.clock import as_utc

_SINCE = re.compile(r"^(\d+)([smhd])$")


def _since(value: str | None) -> dt.datetime | None:
    """``30m``, ``2h``, ``7d`` or an ISO time."""
    if not value:
        return None
    m = _SINCE.match(value.strip())
    if m:
        n, unit = int(m.group(1)), m.group(2)
        seconds = n * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
        return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a duration (30m, 2h, 7d) nor an ISO time") from None
    return as_utc(when)


@click.group("audit")
def audit() -> None:
    """Audit trails: access denials, refusals by topic (alias moves are `snapshots history`)."""


@audit.command("denials")
@click.option("--kb", default=None, help="Only this knowledge base.")
@click.option("--principal", default=None, help="Only this principal id.")
@click.option("--reason", type=click.Choice(sorted(str(v) for v in Verdict if v.denial)), default=None)
@click.option("--since", default=None, help="From this long ago (30m, 2h, 7d) or this ISO time on.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@json_option
@click.pass_obj
def audit_denials(state: CliState, kb: str | None, principal: str | None, reason: str | None, since: str | None,
                  limit: int, as_json: bool) -> None:
    """Hits the query path denied: when, who, which document and chunk, why, under which ACL version."""
    require(state, kb=kb)
    rows = state.services.registry.denials(kb, principal=principal, reason=reason, since=_since(since), limit=limit)
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    if not rows:
        click.echo("no denials recorded")
        return
    for r in escaped(rows):
        click.echo(f"{r['at']}  {r['kb']}  {r['principal']} ({r['tenant']})  {r['reason']}  "
                   f"document {r['document_id']} chunk {r['chunk_id']}  acl v{r['policy_version']}")


#: Refusal rows one ``audit refusals`` reads at most (newest first); the answer says when the window held more.
_SCAN = 50_000


@audit.command("refusals")
@click.option("--kb", required=True, help="The knowledge base.")
@click.option("--since", default="7d", show_default=True, help="From this long ago (30m, 2h, 7d) or this ISO time on.")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Groups shown of each kind (key terms, sources).")
@json_option
@click.pass_obj
def audit_refusals(state: CliState, kb: str, since: str, limit: int, as_json: bool) -> None:
    """Insufficient-evidence answers by key term (missing from the evidence first) and by source searched."""
    from freshindex.registry.refusals import refusal_topics

    require(state, kb=kb)
    start = _since(since)
    rows = state.services.registry.refusals(kb, since=start, limit=_SCAN)
    report = {"kb": kb, "since": start.isoformat() if start else None, **refusal_topics(rows, limit=limit),
              "truncated": len(rows) >= _SCAN}
    if as_json:
        click.echo(json.dumps(report, indent=2, ensure_ascii=False))
        return
    for line in _refusal_lines(escaped(report)):
        click.echo(line)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def _refusal_lines(r: dict[str, Any]) -> list[str]:
    """The human report of :func:`audit_refusals` (``r`` escaped already)."""
    if not r["refusals"]:
        return [f"no refusals recorded for {r['kb']} since {r['since']}"]
    lines = [f"{r['kb']}: {r['refusals']} refusals since {r['since']} ({_counts(r['reasons'])}); "
             f"{r['with_question']} with the question kept" + ("; only the newest read" if r["truncated"] else ""),
             "by key term (missing from the evidence first):"]
    for g in r["terms"]:
        example = f"  e.g. \"{g['example']}\"" if g["example"] else ""
        lines.append(f"  {g['term']}  {g['refusals']} refused, missing in {g['missing']}  ({_counts(g['reasons'])})  "
                     f"sources: {', '.join(g['sources'])}{example}")
    if r["more_terms"]:
        lines.append(f"  ... {r['more_terms']} more terms (--limit)")
    lines.append("by source searched ((none): nothing the caller could read came back):")
    for g in r["sources"]:
        example = f"  e.g. \"{g['example']}\"" if g["example"] else ""
        lines.append(f"  {g['source']}  {g['refusals']} refused  ({_counts(g['reasons'])})  "
                     f"terms: {', '.join(g['terms'])}{example}")
    if r["more_sources"]:
        lines.append(f"  ... {r['more_sources']} more sources (--limit)")
    return lines


def register(cli: click.Group) -> None:
    cli.add_command(audit)
