"""``freshindex audit``: read the access audit trail (alias moves: ``snapshots history``).

Registered into the ``freshindex`` click group by :func:`register` (one line
at the end of ``freshindex/cli.py``). ``audit denials`` lists what the query
path denied after the vector query (:mod:`acl.access`): a caller never sees
that something was denied, so this is where an operator finds out who tried
to read what, and which ACL version said no.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import click

from freshindex.acl.access import Verdict
from freshindex.cli_support import json_option, require
from freshindex.core.clock import as_utc
from freshindex.display import escaped

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
    """Audit trails: access denials (alias moves are `snapshots history`)."""


@audit.command("denials")
@click.option("--kb", default=None, help="Only this knowledge base.")
@click.option("--principal", default=None, help="Only this principal id.")
@click.option("--reason", type=click.Choice(sorted(str(v) for v in Verdict if v.denial)), default=None)
@click.option("--since", default=None, help="From this long ago (30m, 2h, 7d) or this ISO time on.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@json_option
@click.pass_obj
def audit_denials(state: Any, kb: str | None, principal: str | None, reason: str | None, since: str | None,
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


def register(cli: click.Group) -> None:
    cli.add_command(audit)
