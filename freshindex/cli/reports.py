"""Registry reports for the runbooks (runs, documents, errors, changesets, kbs, locks, ...) and the worker/beat probe.

Registered into the ``freshindex`` click group by :func:`register` (called at
the end of ``freshindex/cli/__init__.py``). Everything here is read-only except
``documents reprocess``, which clears stored etags so the next sync compares
documents with their source again. The reports come from
:mod:`registry.reports`; this module only parses options and formats output.

Every command takes ``--json``; without it a short table is printed. The
commands reach ``ctx.obj`` (the CLI's state: ``.settings``, ``.services``)
and import nothing from the package ``__init__``, so this module can be imported
on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from freshindex.cli.context import CliState
from freshindex.cli.display import emit as _emit
from freshindex.cli.display import table as _table
from freshindex.cli.grouped import grouped
from freshindex.cli.support import json_option, require

_STATES = click.Choice(["active", "deleted", "error", "skipped"])
_RUN_STATUSES = click.Choice(["running", "succeeded", "partial", "failed", "held"])
_CHANGESET_STATUSES = ("open", "staged", "applied", "rolled_back")


def _registry(state: CliState) -> Any:
    return state.services.registry




# -- probe --------------------------------------------------------------------------


@click.command("probe")
@click.option("--role", type=click.Choice(["worker", "beat"]), default="worker", show_default=True,
              help="Whose heartbeat file to check (in data_dir).")
@click.option("--file", "path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Check this file instead of the role's file in data_dir.")
@click.option("--max-age", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds since the last touch beyond which the process counts as dead.")
@click.pass_obj
def probe(state: CliState, role: str, path: Path | None, max_age: float) -> None:
    """Exit 0 when the worker's (or beat's) heartbeat file is fresh, 1 otherwise.

    For Kubernetes exec probes: cheap (reads one file's mtime, opens no
    connection). See workers/probe.py for what a fresh file does and does not
    prove.
    """
    from freshindex.workers.probe import age_s, heartbeat_path

    target = path or heartbeat_path(state.settings, role)
    age = age_s(target)
    if age is None:
        click.echo(f"not alive: {target} does not exist (the {role} has not started, or writes elsewhere)", err=True)
        raise SystemExit(1)
    if age > max_age:
        click.echo(f"not alive: {target} last touched {age:.0f}s ago (max {max_age:.0f}s)", err=True)
        raise SystemExit(1)
    click.echo(f"alive: {target} touched {age:.1f}s ago")


# -- runs -----------------------------------------------------------------------------


@click.group("runs")
def runs() -> None:
    """Sync runs recorded in the registry (read-only)."""


_RUN_COLUMNS = ("id", "source", "trigger", "status", "started_at", "finished_at", "docs_planned", "docs_done",
                "build_status", "error")


@runs.command("list")
@click.option("--source", default=None, help="Only runs of this source.")
@click.option("--kb", default=None, help="Only runs of this knowledge base.")
@click.option("--status", type=_RUN_STATUSES, default=None, help="Only runs in this status (running: stuck ones).")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@json_option
@click.pass_obj
def runs_list(state: CliState, source: str | None, kb: str | None, status: str | None, limit: int, as_json: bool) -> None:
    """Newest runs first; running ones with running_for_s and docs_done (a frozen docs_done: lost tasks)."""
    from freshindex.registry import reports

    require(state, source=source, kb=kb)
    rows = reports.sync_runs(_registry(state), source=source, kb=kb, status=status, limit=limit)
    _emit(rows, as_json, lambda rs: _table(rs, _RUN_COLUMNS, "no sync runs"))


@runs.command("show")
@click.argument("run_id", type=int)
@json_option
@click.pass_obj
def runs_show(state: CliState, run_id: int, as_json: bool) -> None:
    """One run: status, progress, per-outcome document counts, build, errors, heartbeat."""
    from freshindex.registry import reports

    require(state, run=run_id)
    row = reports.sync_run(_registry(state), run_id)
    _emit(row, as_json, lambda r: "\n".join(f"{k}: {v}" for k, v in r.items() if v not in (None, {}, [])))


# -- sources lag (added to the existing group) ---------------------------------------


@click.command("lag")
@click.option("--kb", default=None)
@json_option
@click.pass_obj
def sources_lag(state: CliState, kb: str | None, as_json: bool) -> None:
    """Seconds since each source's last successful sync, with enabled and poll_interval_s (never synced first)."""
    from freshindex.registry import reports

    require(state, kb=kb)
    rows = reports.source_lag(_registry(state), kb)
    _emit(rows, as_json, lambda rs: _table(rs, ("source", "kb", "enabled", "poll_interval_s", "last_ok", "lag_s"),
                                           "no sources"))


# -- documents ------------------------------------------------------------------------


@click.group("documents")
def documents() -> None:
    """Documents the registry knows, their errors, and forcing a re-read."""


_DOC_COLUMNS = ("source", "key", "state", "version", "chunk_count", "error_reason", "updated_at", "deleted_at")


@dataclass(frozen=True)
class DocumentFilter:
    """The options of ``documents list``, as click parsed them (None: not filtered on)."""

    kb: str | None
    source: str | None
    key: str | None
    doc_state: str | None
    reason: str | None
    skipped: bool
    limit: int


@documents.command("list")
@click.option("--kb", default=None)
@click.option("--source", default=None)
@click.option("--key", default=None, help="Exact source key (e.g. guides/release.md).")
@click.option("--state", "doc_state", type=_STATES, default=None)
@click.option("--reason", default=None, help="Error or skip reason (e.g. ocr_unavailable, excluded).")
@click.option("--skipped", is_flag=True, help="Only documents skipped on purpose (excluded by the source's "
              "patterns, empty, unsupported_type), with the reason: the same as --state skipped.")
@click.option("--limit", type=click.IntRange(1, 100000), default=100, show_default=True)
@json_option
@click.pass_obj
@grouped(DocumentFilter, "wanted")
def documents_list(state: CliState, wanted: DocumentFilter, as_json: bool) -> None:
    """Documents by knowledge base, source, key, state and error (or skip) reason."""
    from freshindex.registry import reports

    skipped = wanted.skipped
    if skipped and wanted.doc_state not in (None, "skipped"):
        raise click.UsageError("--skipped lists documents in state skipped; drop --state")
    require(state, source=wanted.source, kb=wanted.kb)
    rows = reports.documents(_registry(state), kb=wanted.kb, source=wanted.source, key=wanted.key,
                             state="skipped" if skipped else wanted.doc_state, reason=wanted.reason,
                             limit=wanted.limit)
    columns = ("source", "key", "error_reason", "error_detail", "updated_at") if skipped else _DOC_COLUMNS
    _emit(rows, as_json, lambda rs: _table(rs, columns, "no skipped documents" if skipped else "no documents"))


@documents.command("errors")
@click.option("--kb", default=None)
@click.option("--source", default=None)
@json_option
@click.pass_obj
def documents_errors(state: CliState, kb: str | None, source: str | None, as_json: bool) -> None:
    """Documents currently in error, counted per source, reason and state (what the metric counts)."""
    from freshindex.registry import reports

    require(state, source=source, kb=kb)
    rows = reports.documents_in_error(_registry(state), kb=kb, source=source)
    _emit(rows, as_json, lambda rs: _table(rs, ("kb", "source", "reason", "state", "documents", "last_updated"),
                                           "no documents in error"))


@documents.command("failures")
@click.option("--source", default=None)
@click.option("--since", "since_s", type=click.FloatRange(min=1), default=3600, show_default=True,
              help="Look back this many seconds.")
@json_option
@click.pass_obj
def documents_failures(state: CliState, source: str | None, since_s: float, as_json: bool) -> None:
    """Failed document results of recent runs, counted per source, run and reason."""
    from freshindex.registry import reports

    require(state, source=source)
    rows = reports.recent_failures(_registry(state), since_s=since_s, source=source)
    _emit(rows, as_json, lambda rs: _table(rs, ("source", "run", "reason", "documents", "last_seen"),
                                           "no failures in that window"))


@documents.command("reprocess")
@click.argument("source_id")
@click.option("--reason", default=None, help="Documents whose last error has this reason.")
@click.option("--key", "keys", multiple=True, help="One document by exact key (repeatable).")
@click.option("--dry-run", is_flag=True, help="Only list the documents that would be re-read.")
@json_option
@click.pass_obj
def documents_reprocess(state: CliState, source_id: str, reason: str | None, keys: tuple[str, ...], dry_run: bool,
                        as_json: bool) -> None:
    """Make the next sync of SOURCE_ID fetch and parse the selected documents again, unchanged or not.

    Clears their stored etag (nothing served changes now); run
    `freshindex sync SOURCE_ID` afterwards. For causes fixed outside the file:
    tesseract installed, a limit raised.
    """
    from freshindex.registry import reports

    if reason is None and not keys:
        raise click.UsageError("give --reason REASON or --key KEY (re-reading a whole source must be asked by name)")
    require(state, source=source_id)
    found = reports.forget_etags(_registry(state), source_id, reason=reason, keys=keys, dry_run=dry_run)
    data = {"source": source_id, "documents": found, "count": len(found), "dry_run": dry_run}
    verb = "would be re-read" if dry_run else "will be re-read by the next sync"
    _emit(data, as_json, lambda d: f"{d['count']} document(s) of {source_id} {verb}"
          + "".join(f"\n  {k}" for k in d["documents"]))


# -- changesets and tombstones ---------------------------------------------------------


@click.group("changesets")
def changesets() -> None:
    """Changesets waiting to be built, or already applied (read-only)."""


@changesets.command("list")
@click.option("--kb", default=None)
@click.option("--status", "statuses", type=click.Choice(_CHANGESET_STATUSES), multiple=True,
              help="Repeatable (default: open and staged).")
@click.option("--key", default=None, help="Count only the entries of the document with this key.")
@json_option
@click.pass_obj
def changesets_list(state: CliState, kb: str | None, statuses: tuple[str, ...], key: str | None, as_json: bool) -> None:
    """Changesets with their upsert and delete (chunk) counts, oldest first."""
    from freshindex.registry import reports

    require(state, kb=kb)
    rows = reports.changesets(_registry(state), kb=kb, statuses=statuses or ("open", "staged"), key=key)
    _emit(rows, as_json, lambda rs: _table(rs, ("id", "kb", "source", "run", "status", "created_at", "staged_at",
                                                "upserts", "deletes"), "no changesets"))


@click.group("tombstones")
def tombstones() -> None:
    """Removals and whether a serving snapshot has applied them (read-only)."""


@tombstones.command("pending")
@click.option("--kb", default=None)
@json_option
@click.pass_obj
def tombstones_pending(state: CliState, kb: str | None, as_json: bool) -> None:
    """Unapplied tombstones per changeset, its status and reason, oldest first (the tombstone backlog)."""
    from freshindex.registry import reports

    require(state, kb=kb)
    rows = reports.pending_tombstones(_registry(state), kb=kb)
    _emit(rows, as_json, lambda rs: _table(rs, ("kb", "changeset_id", "changeset_status", "source", "run", "reason",
                                                "tombstones", "oldest"), "no pending tombstones"))


# -- snapshots held / history (added to the existing group) -----------------------------


@click.command("held")
@click.option("--kb", default=None)
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@json_option
@click.pass_obj
def snapshots_held(state: CliState, kb: str | None, limit: int, as_json: bool) -> None:
    """Held (failed) builds: counts per kb and failed check, and the newest ones with their numbers."""
    from freshindex.registry import reports

    require(state, kb=kb)
    data = reports.held_builds(_registry(state), kb=kb, limit=limit)

    def human(d: dict[str, Any]) -> str:
        return (_table(d["by_check"], ("kb", "check", "held_builds", "last_held"), "no held builds") + "\n\n"
                + _table(d["recent"], ("id", "check", "point_count", "expected_count", "created_at",
                                       "failure_reason"), ""))

    _emit(data, as_json, human)


@click.command("history")
@click.option("--kb", default=None, help="Knowledge base (default: settings default_kb).")
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@json_option
@click.pass_obj
def snapshots_history(state: CliState, kb: str | None, limit: int, as_json: bool) -> None:
    """Alias moves of a knowledge base, newest first: from, to, actor and reason."""
    kb = kb or state.settings.default_kb
    require(state, kb=kb)
    rows = _registry(state).alias_events(kb, limit=limit)
    _emit(rows, as_json, lambda rs: _table(rs, ("at", "from", "to", "actor", "reason"), "no alias moves"))


# -- knowledge bases and locks ---------------------------------------------------------


@click.group("kbs")
def kbs() -> None:
    """Knowledge bases the registry knows (read-only)."""


@kbs.command("list")
@json_option
@click.pass_obj
def kbs_list(state: CliState, as_json: bool) -> None:
    """Every knowledge base with its sources and its number of snapshots (sources with no snapshot, and
    snapshots whose sources are gone, both show)."""
    from freshindex.registry import reports

    rows = reports.knowledge_bases(_registry(state))
    _emit(rows, as_json, lambda rs: _table([{**r, "sources": ",".join(r["sources"])} for r in rs],
                                           ("kb", "sources", "snapshots"), "no knowledge bases"))


@kbs.command("health")
@click.argument("kb", required=False)
@json_option
@click.pass_obj
def kbs_health(state: CliState, kb: str | None, as_json: bool) -> None:
    """The registry's signals for KB (live_chunks, tombstone_backlog, pending_changesets, ...); same as
    GET /v1/kbs/KB/health."""
    kb = kb or state.settings.default_kb
    require(state, kb=kb)  # as GET /v1/kbs/KB/health: an unknown kb is not found
    data = _registry(state).health(kb)
    _emit(data, as_json, lambda d: "\n".join(f"{k}: {v}" for k, v in d.items()))


@click.group("locks")
def locks() -> None:
    """Leases in the registry: build:KB is the writer lease of a knowledge base (read-only)."""


@locks.command("list")
@click.option("--name", default=None, help="One lease, e.g. build:KB.")
@json_option
@click.pass_obj
def locks_list(state: CliState, name: str | None, as_json: bool) -> None:
    """Leases with owner, fencing token, expiry and whether they are held now."""
    from freshindex.registry import reports

    rows = reports.locks(_registry(state), name)
    _emit(rows, as_json, lambda rs: _table(rs, ("name", "owner", "token", "held", "expires_at", "expires_in_s"),
                                           "no leases"))


@click.command()
@click.argument("source_id", required=False)
@click.option("--run", "run_id", type=int, default=None, help="One sync run.")
@json_option
@click.pass_obj
def errors(state: CliState, source_id: str | None, run_id: int | None, as_json: bool) -> None:
    """Per-document errors recorded by syncs (newest runs first)."""
    require(state, source=source_id, run=run_id)
    rows = state.services.registry.document_errors(run_id=run_id, source_id=source_id)
    data = [{"source": e.source_id, "run": e.sync_run_id, "key": e.key, "reason": e.reason, "detail": e.detail}
            for e in rows]
    _emit(data, as_json, lambda rs: "\n".join(f"{r['source']}:{r['key']} (run {r['run']}): {r['reason']}: "
                                              f"{r['detail']}" for r in rs) or "no document errors")


def register(cli: click.Group) -> None:
    """Add this module's commands to the ``freshindex`` group (and to its ``sources``/``snapshots`` groups)."""
    for command in (probe, errors, runs, documents, changesets, tombstones, kbs, locks):
        cli.add_command(command)
    sources = cli.commands["sources"]
    snapshots = cli.commands["snapshots"]
    assert isinstance(sources, click.Group) and isinstance(snapshots, click.Group)
    sources.add_command(sources_lag)
    snapshots.add_command(snapshots_held)
    snapshots.add_command(snapshots_history)


__all__ = ["register"]
