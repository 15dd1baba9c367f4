"""``freshindex sources add|list|confirm-deletions|show|pause|resume|remove|runs|policy|sweep|kinds``, ``sqs-poll``.

Registered into the ``freshindex`` group by :func:`register` (called at the
end of ``freshindex/cli/__init__.py``; other modules add ``update`` and ``lag``);
triggering a sync is ``freshindex sync SOURCE`` (or ``POST
/v1/sources/SOURCE/sync``).  Each command is one registry call (most in
:mod:`registry.freshness`), takes ``--json``, and needs no SQL.  Like
:mod:`freshindex.cli.reports` it reaches only ``ctx.obj`` (``.settings``,
``.services``) and imports nothing from the package ``__init__``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import click

from freshindex.cli import acl as acl_cli
from freshindex.cli.context import CliState
from freshindex.cli.display import emit as _emit
from freshindex.cli.grouped import grouped
from freshindex.cli.support import actor, json_option, require
from freshindex.core.enums import RunStatus
from freshindex.core.errors import ConfigError

log = logging.getLogger("freshindex.cli")



def _fresh_text(d: dict[str, Any]) -> str:
    state = "removed" if d["removed"] else "paused" if d["paused"] else "active"
    stale = f"STALE ({d['stale_reason']})" if d["stale"] else "fresh"
    policy = ", ".join(f"{k}={d[k]}" for k in ("poll_interval_s", "stale_after_s", "hard_expiry_s") if d[k])
    line = (f"{d['source_id']} ({d['kb']}): {state}, {stale}; last verified {d['last_verified_at'] or 'never'}, "
            f"last successful sync {d['last_successful_sync_at'] or 'never'}")
    if d["last_error"]:
        line += f"; last error: {d['last_error']}"
    line += f"; policy: {policy}" if policy else "; policy: none"
    if d.get("include") or d.get("exclude"):  # gitignore-style patterns the planner applies (workers/selection.py)
        line += "\n  include: " + (", ".join(d["include"]) or "everything") + "; exclude: " + (
            ", ".join(d["exclude"]) or "nothing")
    return line


class KindChoice(click.Choice):
    """``--kind``: the kinds in the connector registry, read when the option is parsed (not at import,
    so the CLI starts without importing every connector's library)."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        from freshindex.workers.connectors import kinds

        return kinds()

    @choices.setter
    def choices(self, _value: Any) -> None:
        pass


def check_location(kind: str, location: str, options: dict[str, Any]) -> str:
    """The location to store for a new source of ``kind`` (its registry spec checks and normalises it)."""
    from freshindex.core.errors import ConfigError
    from freshindex.workers.connectors import spec_for

    try:
        return spec_for(kind).validate(location, options)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--location") from exc


@click.command("kinds")
@json_option
def sources_kinds(as_json: bool) -> None:
    """The source kinds this installation knows, the location each takes and its connector options."""
    from freshindex.workers.connectors import kinds, spec_for

    data = [{"kind": k, "location": spec_for(k).location_help,
             "options": [{"name": o.name, "help": o.help, "required": o.required} for o in spec_for(k).options]}
            for k in kinds()]
    _emit(data, as_json, lambda rows: "\n".join(
        f"{r['kind']:<8} --location {r['location']}" + "".join(
            f"\n         --option {o['name']}=...{' (required)' if o['required'] else ''}  {o['help']}"
            for o in r["options"]) for r in rows))


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@click.command("show")
@click.argument("source_id")
@json_option
@click.pass_obj
def sources_show(state: CliState, source_id: str, as_json: bool) -> None:
    """SOURCE_ID's freshness policy and state (paused, stale, last verified, last error) and its patterns."""
    require(state, source=source_id)
    data = state.services.registry.source_freshness(source_id=source_id)[0].as_dict()
    source = state.services.registry.get_source(source_id)
    data["include"], data["exclude"] = list(source.include), list(source.exclude)
    _emit(data, as_json, _fresh_text)


def _set_paused(state: CliState, source_id: str, paused: bool, as_json: bool) -> None:
    require(state, source=source_id)
    try:
        data = state.services.registry.set_source_paused(source_id, paused).as_dict()
    except ConfigError as exc:
        raise _fail(exc) from exc
    _emit(data, as_json, _fresh_text)


@click.command("pause")
@click.argument("source_id")
@json_option
@click.pass_obj
def sources_pause(state: CliState, source_id: str, as_json: bool) -> None:
    """Stop scheduled polls of SOURCE_ID; its webhook events wait (queued) until it is resumed.

    It keeps serving what it has; `freshindex sync SOURCE_ID` still runs it on request.
    """
    _set_paused(state, source_id, True, as_json)


@click.command("resume")
@click.argument("source_id")
@json_option
@click.pass_obj
def sources_resume(state: CliState, source_id: str, as_json: bool) -> None:
    """Resume polls and webhook syncs of SOURCE_ID."""
    _set_paused(state, source_id, False, as_json)


@click.command("remove")
@click.argument("source_id")
@click.option("--yes", is_flag=True, help="Confirm: withdraw every document of the source.")
@json_option
@click.pass_obj
def sources_remove(state: CliState, source_id: str, yes: bool, as_json: bool) -> None:
    """Withdraw every document of SOURCE_ID at once and retire it (the next build drops its points)."""
    if not yes:
        raise click.UsageError("removing a source withdraws all of its documents: add --yes")
    require(state, source=source_id)
    try:
        withdrawn = state.services.registry.remove_source(source_id)
    except ConfigError as exc:
        raise _fail(exc) from exc
    data = {"source": source_id, "documents": len(withdrawn), "chunks": sum(w.chunks for w in withdrawn)}
    _emit(data, as_json, lambda d: f"source {d['source']} removed: {d['documents']} documents "
          f"({d['chunks']} chunks) withdrawn; the next build (`freshindex snapshots build`) drops their points")


@click.command("runs")
@click.argument("source_id")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@json_option
@click.pass_obj
def sources_runs(state: CliState, source_id: str, limit: int, as_json: bool) -> None:
    """SOURCE_ID's sync runs, newest first, with their sync lag when visible."""
    from freshindex.registry.reports import sync_runs

    require(state, source=source_id)
    data = sync_runs(state.services.registry, source=source_id, limit=limit)
    _emit(data, as_json, lambda rows: "\n".join(
        f"run {r['id']}: {r['status']} ({r['trigger']}), started {r['started_at']}, build {r['build_status']}"
        + (f", lag {r['lag_s']:.1f}s" if r["lag_s"] is not None else "") + (f"; {r['error']}" if r["error"] else "")
        for r in rows) or f"no runs of {source_id} yet")


_SECONDS = click.IntRange(min=0)


@click.command("policy")
@click.argument("source_id")
@click.option("--poll", "poll", type=_SECONDS, default=None, help="Poll interval, seconds (0 clears).")
@click.option("--stale-after", "stale_after", type=_SECONDS, default=None,
              help="Label it stale after this many seconds without a successful listing (0 clears).")
@click.option("--hard-expiry", "hard_expiry", type=_SECONDS, default=None,
              help="Withdraw its documents after this many seconds without a successful listing (0 clears).")
@json_option
@click.pass_obj
def sources_policy(state: CliState, source_id: str, poll: int | None, stale_after: int | None, hard_expiry: int | None,
                   as_json: bool) -> None:
    """Set SOURCE_ID's freshness policy (what is not given stays as it is)."""
    given = {k: (v or None) for k, v in (("poll_interval_s", poll), ("stale_after_s", stale_after),
                                          ("hard_expiry_s", hard_expiry)) if v is not None}
    require(state, source=source_id)
    try:
        data = state.services.registry.set_freshness_policy(source_id, **given).as_dict()
    except ConfigError as exc:
        raise _fail(exc) from exc
    _emit(data, as_json, _fresh_text)


@click.command("sweep")
@json_option
@click.pass_obj
def sources_sweep(state: CliState, as_json: bool) -> None:
    """Run the freshness sweep now (beat runs it every schedules.sweep_interval_s)."""
    from freshindex.schedules.sweep import sweep

    report = sweep(state.services.registry, metrics=state.services.metrics)
    data = report.as_dict()
    _emit(data, as_json, lambda d: f"stale sources: {', '.join(d['stale']) or 'none'}; withdrawn: "
          + (", ".join(f"{w['source_id']}:{w['key']} ({w['reason']})" for w in d["withdrawn"]) or "none"))


@click.command("sqs-poll")
@click.option("--once", is_flag=True, help="One receive, print what it did, exit.")
@json_option
@click.pass_obj
def sqs_poll(state: CliState, once: bool, as_json: bool) -> None:
    """Read S3 event notifications from webhooks.sqs_queue_url and queue the syncs they ask for.

    `freshindex serve` does this itself when the queue is set; the tickets are started by serve's dispatcher.
    """
    from freshindex.api.sqs import SqsPoller, sqs_client

    svc = state.services
    wh = state.settings.webhooks
    if not wh.sqs_queue_url:
        raise click.UsageError("set webhooks.sqs_queue_url (FRESHINDEX_WEBHOOKS__SQS_QUEUE_URL)")
    poller = SqsPoller(svc.registry, svc.metrics, queue_url=wh.sqs_queue_url, client=sqs_client(state.settings),
                       wait_s=wh.sqs_wait_s)
    if once:
        result = poller.poll_once()
        _emit(result.__dict__, as_json, lambda d: ", ".join(f"{k} {v}" for k, v in d.items()))
        return
    try:
        poller.run()
    except KeyboardInterrupt:
        poller.stop()


@click.group()
def sources() -> None:
    """Register and list sources."""


@dataclass(frozen=True)
class AddOptions:
    """The options of ``sources add``, as click parsed them (field names are the options' destinations)."""

    kind: str
    location: str
    owner: str
    kb: str | None
    acl: str
    poll: int | None
    options: tuple[str, ...]
    replace: bool
    tenant: str
    sensitivity_: str
    acl_rules: tuple[str, ...]
    include: tuple[str, ...]
    exclude: tuple[str, ...]


@sources.command("add")
@click.argument("source_id")
@click.option("--kind", type=KindChoice(), required=True,
              help="Source kind (`freshindex sources kinds` lists them with their options).")
@click.option("--location", required=True, help="Where the source is; its form depends on --kind.")
@click.option("--owner", default="unknown", show_default=True, help="Team or person responsible for it.")
@click.option("--kb", default=None, help="Knowledge base (default: settings default_kb).")
@click.option("--acl", default="public", show_default=True, help="Comma-separated groups that may read it.")
@click.option("--poll", "poll", type=int, default=None, help="Poll interval in seconds for the scheduler.")
@click.option("--option", "options", multiple=True, help="Connector option key=value (e.g. endpoint_url=...).")
@click.option("--replace", is_flag=True, help="Update an existing source.")
@click.option("--tenant", default="default", show_default=True, help="Tenant of its documents.")
@click.option("--sensitivity", "sensitivity_", default="internal", show_default=True,
              type=click.Choice(["public", "internal", "confidential", "restricted"]))
@click.option("--acl-rule", "acl_rules", multiple=True,
              help="Static ACL rule 'GLOB=GROUPS' (repeatable): matching documents are read by those groups.")
@click.option("--include", "include", multiple=True,
              help="Only keys matching this gitignore-style pattern are documents (repeatable), e.g. '*.html'.")
@click.option("--exclude", "exclude", multiple=True,
              help="Keys matching this gitignore-style pattern are skipped (repeatable), e.g. 'search*.html'.")
@json_option
@click.pass_obj
@grouped(AddOptions, "given")
def sources_add(state: CliState, source_id: str, given: AddOptions, as_json: bool) -> None:
    """Register SOURCE_ID (a folder, an S3 prefix, ...: see `freshindex sources kinds`)."""
    from freshindex.workers.selection import check_patterns

    opts: dict[str, Any] = {}
    for item in given.options:
        if "=" not in item:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--option")
        k, v = item.split("=", 1)
        opts[k.strip()] = v.strip()
    for flag, patterns in (("include", given.include), ("exclude", given.exclude)):
        try:
            if checked := check_patterns(patterns, flag):
                opts[flag] = checked  # applied by the planner to every listed key (workers/selection.py)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint=f"--{flag}") from exc
    location = check_location(given.kind, given.location, opts)
    groups = acl_cli.split_tokens(given.acl, None) or []
    rules = acl_cli.parse_rules(given.acl_rules)
    acl_cli.check_tenant(given.tenant)
    from freshindex.registry.records import SourceSetup  # the registry (SQLAlchemy) is the server extra's

    src = state.services.registry.add_source(
        source_id, kind=given.kind, location=location, owner=given.owner, kb=given.kb or state.settings.default_kb,
        setup=SourceSetup(options=opts, acl=groups, poll_interval_s=given.poll, tenant=given.tenant,
                          sensitivity=given.sensitivity_, acl_rules=rules or None),
        replace=given.replace,
    )
    if given.replace:  # permissions may have moved: recompute what the registry can now (freshindex/cli/acl.py)
        acl_cli.recompute_documents(state.services.registry, source_id)
    _emit(_source_dict(src), as_json, lambda d: f"source {d['id']} ({d['kind']} {d['location']}) -> kb {d['kb']}")


@sources.command("list")
@json_option
@click.pass_obj
def sources_list(state: CliState, as_json: bool) -> None:
    """List registered sources."""
    data = [_source_dict(s) for s in state.services.registry.list_sources()]

    def human(rows: list[dict[str, Any]]) -> str:
        if not rows:
            return "no sources (add one with `freshindex sources add`)"
        return "\n".join(
            f"{r['id']:<20} {r['kind']:<7} kb={r['kb']:<12} acl={','.join(r['acl']):<14} {r['location']}" for r in rows
        )

    _emit(data, as_json, human)


@sources.command("confirm-deletions")
@click.argument("source_id")
@click.option("--count", "count", type=click.IntRange(min=1), default=None,
              help="Allow up to this many deletions (default: what the latest held sync would delete).")
@json_option
@click.pass_obj
def sources_confirm_deletions(state: CliState, source_id: str, count: int | None, as_json: bool) -> None:
    """Let the next sync of SOURCE_ID apply the deletions the guard held (one shot).

    The next sync deletes what its listing no longer has, if that is at most
    the confirmed number of documents; either way the confirmation is used up.
    """
    require(state, source=source_id)
    registry = state.services.registry
    finished = [r for r in registry.sync_runs(source_id, limit=20) if r.status != RunStatus.RUNNING]
    latest = finished[0] if finished else None
    held = (latest.summary.get("held") or {}) if latest is not None and latest.status == RunStatus.HELD else {}
    if count is None:
        if not held:
            raise click.UsageError(f"the latest sync of {source_id} held no deletions; "
                                   "give --count N to allow a deletion you expect")
        count = int(held.get("deletions", 0))
    confirmation = registry.confirm_deletions(source_id, count, actor=actor())
    log.warning("deletions confirmed", extra={"event": "deletions_confirmation", "source": source_id,
                                              "count": count, "by": confirmation["by"]})
    data = {"source": source_id, "confirmed_deletions": count, "by": confirmation["by"], "at": confirmation["at"],
            "held_run_id": latest.id if held and latest is not None else None,
            "held_reason": latest.held_reason if held and latest is not None else None,
            "held_keys": held.get("keys", [])}
    _emit(data, as_json, lambda d: f"source {d['source']}: the next sync may delete up to "
          f"{d['confirmed_deletions']} documents (run `freshindex sync {d['source']}`)")


def _source_dict(s: Any) -> dict[str, Any]:
    return {"id": s.id, "kb": s.kb, "kind": s.kind, "location": s.location, "owner": s.owner, "acl": list(s.acl),
            "poll_interval_s": s.poll_interval_s, "options": s.options, "tenant": s.tenant,
            "sensitivity": s.sensitivity, "acl_rules": list(s.acl_rules), "acl_version": s.acl_version,
            "include": list(s.include), "exclude": list(s.exclude)}



def register(cli: click.Group) -> None:
    """Add the ``sources`` group and its commands (and ``sqs-poll`` to the top level)."""
    cli.add_command(sources)
    cli.add_command(sqs_poll)
    for command in (sources_show, sources_pause, sources_resume, sources_remove, sources_runs, sources_policy,
                    sources_sweep, sources_kinds):
        sources.add_command(command)


__all__ = ["KindChoice", "check_location", "register"]
