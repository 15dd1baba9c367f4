"""``freshindex``: register sources, sync them, inspect snapshots, query, run services.

Every command that a script may read takes ``--json``.  Exit codes (:class:`core.exit_codes.ExitCode`): 0 done
(a sync with some failed documents is still 0), 1 nothing could be indexed
or a command failed, 2 bad usage or configuration, 3 a build was held by
verification (the previous snapshot keeps serving), 4 the deletion guard held
a sync's deletions (``freshindex sources confirm-deletions SOURCE``).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from freshindex import (
    __version__,
    acl_commands,
    audit_commands,
    display,
    keys_commands,
    logs,
    ocr_commands,
    ops_commands,
    source_commands,
    sync_commands,
)
from freshindex.core.enums import BuildStatus, DocumentState, RunStatus
from freshindex.core.errors import ConfigError, FreshIndexError, NotFoundError
from freshindex.core.exit_codes import ExitCode
from freshindex.settings import Settings, load_settings

log = logging.getLogger("freshindex.cli")
progress_log = logging.getLogger("freshindex.progress")


#: Commands that may create the data dir and the registry; every other command reads what exists and
#: fails (exit 2, naming where it looked) when the data dir or registry is missing.
CREATES_STATE = frozenset({"sources add", "sync", "serve", "worker", "beat", "db upgrade", "snapshots restore",
                           "keys create", "sqs-poll"})


def _command_path() -> str:
    """``sources add`` for ``freshindex sources add ...`` (the running command, without the program name)."""
    ctx, names = click.get_current_context(silent=True), []
    while ctx is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names[:-1]))


class ConfigProblem(click.ClickException):
    """A configuration or file-system problem: ``error: ...`` on one line, exit 2."""

    exit_code = ExitCode.USAGE

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {display.printable(self.message)}", err=True)


class _State:
    def __init__(self, config: str | None, verbose: int, strict: bool = False) -> None:
        self.config = config
        self.verbose = verbose
        self.strict = strict
        self._settings: Settings | None = None
        self._services: Any = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.config, strict=True if self.strict else None,
                                           on_unknown=lambda m: click.echo(f"warning: {m}", err=True))
        return self._settings

    @property
    def services(self) -> Any:
        if self._services is None:
            from freshindex.services import Services

            self._services = Services(self.settings, create_storage=_command_path() in CREATES_STATE)
        return self._services

    def close(self) -> None:
        if self._services is not None:
            self._services.close()


_emit = display.emit  # JSON exact; text escapes control characters in names, keys and errors


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config", type=click.Path(dir_okay=False), envvar="FRESHINDEX_CONFIG",
              help="TOML config file (same keys as the FRESHINDEX_ environment variables).")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("--strict", is_flag=True, help="Unknown FRESHINDEX_* variables and config keys are errors (exit 2), "
              "not warnings; same as FRESHINDEX_STRICT=1.")
@click.version_option(__version__, prog_name="freshindex")
@click.pass_context
def cli(ctx: click.Context, config: str | None, verbose: int, strict: bool) -> None:
    """freshindex: keep a RAG knowledge base correct, fresh and cited."""
    state = _State(config, verbose, strict)
    ctx.obj = state
    ctx.call_on_close(state.close)
    try:
        settings = state.settings
    except ConfigError as exc:
        raise ConfigProblem(str(exc)) from exc
    level = {0: "WARNING", 1: "INFO"}.get(verbose, "DEBUG")
    if ctx.invoked_subcommand in ("worker", "serve", "beat"):
        level = settings.log_level if not verbose else level
    logs.configure(level, settings.log_format)
    if not sys.stderr.isatty():
        progress_log.setLevel(logging.INFO)


def main() -> None:
    try:
        # Outside standalone mode click *returns* the code of a ``click.exceptions.Exit`` raised by a
        # command (check-citations' 3) instead of exiting with it: pass it on.
        code = cli.main(standalone_mode=False, prog_name="freshindex")
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(ExitCode.FAILED)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except ConfigError as exc:
        click.echo(f"error: {display.printable(str(exc))}", err=True)
        sys.exit(ExitCode.USAGE)
    except FreshIndexError as exc:
        click.echo(f"error: {display.printable(str(exc))}", err=True)
        sys.exit(ExitCode.FAILED)
    except ModuleNotFoundError as exc:
        # The base install is the thin HTTP client; every service command imports the
        # server dependencies when it runs, so a missing one means the wrong install.
        click.echo(f"error: this command needs the freshindex service ({exc.name or exc} is not installed): "
                   "pip install 'freshindex[server]'", err=True)
        sys.exit(ExitCode.USAGE)


# -- config and db ---------------------------------------------------------------


@cli.group()
def config() -> None:
    """The effective configuration, and the reference of every setting."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def config_show(state: _State, as_json: bool) -> None:
    """Print the effective configuration, secrets redacted."""
    data = state.settings.redacted()

    def human(d: dict[str, Any], indent: str = "") -> str:
        lines = []
        for k, v in d.items():
            if isinstance(v, dict):
                lines.append(f"{indent}[{k}]")
                lines.append(human(v, indent + "  "))
            else:
                lines.append(f"{indent}{k} = {v}")
        return "\n".join(lines)

    _emit(data, as_json, human)


@config.command("reference")
@click.option("--write", "write", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the reference to this file (e.g. docs/configuration.md) instead of standard output.")
def config_reference(write: Path | None) -> None:
    """Print the configuration reference (every setting: variable, type, default, description) as Markdown."""
    from freshindex.settings.reference import render_reference

    text = render_reference()
    if write is None:
        click.echo(text, nl=False)
        return
    try:
        write.write_text(text)
    except OSError as exc:
        raise ConfigProblem(f"cannot write {write}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {write} ({text.count(chr(10))} lines)", err=True)


@cli.group()
def db() -> None:
    """Registry schema."""


@db.command("upgrade")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def db_upgrade(state: _State, as_json: bool) -> None:
    """Upgrade the registry schema to this version's head."""
    from freshindex.registry import db as registry_db
    from freshindex.settings import redact_url

    engine = registry_db.make_engine(state.settings.registry_url)
    try:
        before, after = registry_db.upgrade(engine)
    finally:
        engine.dispose()
    data = {"registry": redact_url(state.settings.registry_url), "from": before, "to": after}
    _emit(data, as_json, lambda d: f"registry {d['registry']}: schema {d['from'] or 'empty'} -> {d['to']}")


# -- sources ------------------------------------------------------------------------


@cli.group()
def sources() -> None:
    """Register and list sources."""


@sources.command("add")
@click.argument("source_id")
@click.option("--kind", type=source_commands.KindChoice(), required=True,
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
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def sources_add(state: _State, source_id: str, kind: str, location: str, owner: str, kb: str | None, acl: str,
                poll: int | None, options: tuple[str, ...], replace: bool, tenant: str, sensitivity_: str,
                acl_rules: tuple[str, ...], include: tuple[str, ...], exclude: tuple[str, ...],
                as_json: bool) -> None:
    """Register SOURCE_ID (a folder, an S3 prefix, ...: see `freshindex sources kinds`)."""
    from freshindex.workers.selection import check_patterns

    opts: dict[str, Any] = {}
    for item in options:
        if "=" not in item:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--option")
        k, v = item.split("=", 1)
        opts[k.strip()] = v.strip()
    for flag, patterns in (("include", include), ("exclude", exclude)):
        try:
            if checked := check_patterns(patterns, flag):
                opts[flag] = checked  # applied by the planner to every listed key (workers/selection.py)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint=f"--{flag}") from exc
    location = source_commands.check_location(kind, location, opts)
    groups = acl_commands.split_tokens(acl, None) or []
    rules = acl_commands.parse_rules(acl_rules)
    acl_commands.check_tenant(tenant)
    src = state.services.registry.add_source(
        source_id, kind=kind, location=location, owner=owner, kb=kb or state.settings.default_kb, options=opts,
        acl=groups, poll_interval_s=poll, replace=replace, tenant=tenant, sensitivity=sensitivity_,
        acl_rules=rules or None,
    )
    if replace:  # permissions may have moved: recompute what the registry can now (freshindex/acl_commands.py)
        acl_commands.recompute_documents(state.services.registry, source_id)
    _emit(_source_dict(src), as_json, lambda d: f"source {d['id']} ({d['kind']} {d['location']}) -> kb {d['kb']}")


@sources.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def sources_list(state: _State, as_json: bool) -> None:
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
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def sources_confirm_deletions(state: _State, source_id: str, count: int | None, as_json: bool) -> None:
    """Let the next sync of SOURCE_ID apply the deletions the guard held (one shot).

    The next sync deletes what its listing no longer has, if that is at most
    the confirmed number of documents; either way the confirmation is used up.
    """
    registry = state.services.registry
    registry.get_source(source_id)
    finished = [r for r in registry.sync_runs(source_id, limit=20) if r.status != RunStatus.RUNNING]
    latest = finished[0] if finished else None
    held = (latest.summary.get("held") or {}) if latest is not None and latest.status == RunStatus.HELD else {}
    if count is None:
        if not held:
            raise click.UsageError(f"the latest sync of {source_id} held no deletions; "
                                   "give --count N to allow a deletion you expect")
        count = int(held.get("deletions", 0))
    confirmation = registry.confirm_deletions(source_id, count, actor=_actor())
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


# -- sync ---------------------------------------------------------------------------


@cli.command()
@click.argument("source_id", required=False)
@click.option("--all", "all_sources", is_flag=True, help="Sync every registered source.")
@click.option("--inline", is_flag=True, help="Run in this process even when a broker is configured.")
@click.option("--no-build", is_flag=True, help="Stage changes without building a snapshot (inline only).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def sync(state: _State, source_id: str | None, all_sources: bool, inline: bool, no_build: bool,
         as_json: bool) -> None:
    """Sync SOURCE_ID (or --all): detect changes, re-embed only what changed, swap in a new snapshot."""
    from freshindex.workers.runner import sync_distributed, sync_inline

    if bool(source_id) == all_sources:
        raise click.UsageError("give one SOURCE_ID or --all")
    svc = state.services
    ids = [source_id] if source_id else [s.id for s in svc.registry.list_sources() if not s.removed]
    if not ids:
        raise click.UsageError("no sources registered")
    distributed = state.settings.distributed and not inline
    app = None
    if distributed:
        from freshindex.celery import build_app

        app = build_app(state.settings)
        check_broker(app)
    reports: list[dict[str, Any]] = []
    codes: list[int] = []
    for sid in ids:
        with _Progress(f"sync {sid}", json_lines=as_json, source=sid) as progress:
            if distributed:
                report = sync_distributed(svc, app, sid, timeout=state.settings.broker.sync_timeout,
                                          progress=progress)
            else:
                report = sync_inline(svc, sid, progress=progress, build=not no_build)
        # Scanned pages read in this run and those under the floor (freshindex/ocr_commands.py).
        floor = ocr_commands.source_floor(svc.registry.get_source(sid), state.settings.sources.ocr_page_floor)
        reports.append({**report.as_dict(), "ocr": ocr_commands.sync_counts(svc.registry, report.run, floor)})
        if not as_json:
            ocr_line = ocr_commands.sync_line(display.escaped(reports[-1]["ocr"]))
            click.echo(_sync_text(display.escaped(reports[-1])) + (f"\n{ocr_line}" if ocr_line else ""))
        codes.append(report.exit_code)
    if as_json:
        out = reports
        click.echo(json.dumps(out[0] if len(out) == 1 else out, indent=2, default=str, ensure_ascii=False))
    code = max(codes)
    if code:
        sys.exit(code)


#: Seconds `sync` gives the broker (and a Redis result backend) to answer before it gives up.
BROKER_CHECK_S = 3.0


def check_broker(app: Any, timeout: float = BROKER_CHECK_S) -> None:
    """Connect once to the broker and to a Redis result backend, within ``timeout`` each, or raise.

    Without it a sync with the broker down spends about 20 s in Celery's
    reconnection retries (twenty log lines) before it fails; this fails in a
    few seconds with one line.  What it does not do: keep a later publish or
    result read from retrying if the broker goes down mid-sync.
    """
    from kombu import Connection

    from freshindex.settings import redact_url

    targets = [("broker", str(app.conf.broker_url), "broker.url (FRESHINDEX_BROKER__URL)")]
    backend = str(app.conf.result_backend or "")
    if backend.startswith(("redis://", "rediss://")) and backend != targets[0][1]:
        targets.append(("result backend", backend, "broker.result_backend (FRESHINDEX_BROKER__RESULT_BACKEND)"))
    for what, url, setting in targets:
        try:
            with Connection(url, connect_timeout=timeout) as conn:
                # kombu takes float seconds; celery-types' stub says int
                conn.ensure_connection(max_retries=1, interval_start=0.2,  # type: ignore[arg-type]
                                       interval_step=0, timeout=timeout)  # type: ignore[arg-type]
        except Exception as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise FreshIndexError(f"{what} {redact_url(url)} is unreachable ({reason}); start it or fix "
                                  f"{setting}, or run `freshindex sync --inline`") from exc


class _Progress:
    """A progress bar on a terminal; structured progress lines in logs otherwise.

    With ``--json`` (``json_lines``), standard output is kept for the one
    report and progress goes to standard error as one JSON object per line
    (``{"event": "sync_progress", "source": ..., "done": ..., "total": ...,
    "percent": ...}``), at most about 20 lines per sync, the last at 100 %.
    """

    def __init__(self, label: str, enabled: bool = True, *, json_lines: bool = False, source: str = "") -> None:
        self.label, self.enabled, self.json_lines, self.source = label, enabled, json_lines, source
        self.tty = sys.stderr.isatty() and not json_lines
        self.bar: Any = None
        self.last_logged = -1

    def __enter__(self) -> Callable[[int, int, str], None]:
        return self

    def __call__(self, done: int, total: int, key: str) -> None:
        if not self.enabled or total <= 0:
            return
        if self.json_lines:
            step = max(1, total // 20)
            if done == total or done - self.last_logged >= step:
                self.last_logged = done
                sys.stderr.write(json.dumps({"event": "sync_progress", "source": self.source, "done": done,
                                             "total": total, "percent": round(100 * done / total, 1)}) + "\n")
                sys.stderr.flush()
            return
        if self.tty:
            if self.bar is None:
                self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr,
                                             show_pos=True, show_eta=True)
                self.bar.__enter__()
            self.bar.update(done - self.bar.pos)
            return
        step = max(1, total // 10)
        if done == total or done - self.last_logged >= step:
            self.last_logged = done
            progress_log.info("progress", extra={"event": "sync_progress", "label": self.label, "done": done,
                                                 "total": total, "percent": round(100 * done / total, 1)})

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def _sync_text(d: dict[str, Any]) -> str:
    docs = d["documents"]
    lines = [
        f"sync {d['source']} (run {d['run_id']}): {d['status']} in {d['seconds']:.1f}s",
        f"  documents changed: {d['documents_changed']} "
        f"({docs.get('added', 0)} added, {docs.get('modified', 0)} modified, {docs.get('deleted', 0)} deleted; "
        f"{docs.get('unchanged', 0)} unchanged, {docs.get('failed', 0)} failed)",
        f"  chunks: {d['chunks_embedded']} embedded, {d['chunks_reused']} reused from the vector cache, "
        f"{d['chunks_unchanged']} unchanged in changed documents",
        f"  tombstones written: {d['tombstones_written']}",
    ]
    if d.get("chunks_moved"):
        lines.insert(3, f"  chunks moved (new place, same text, vector reused): {d['chunks_moved']}")
    for why, n in (d.get("rechunked") or {}).items():
        lines.append(f"  re-chunked without a content change ({why}): {n} documents")
    b = d["build"]
    if b["status"] == BuildStatus.BUILT:
        lines.append(f"  snapshot: {b['snapshot_id']} now active ({b['strategy'] or 'incremental'} build, "
                     f"{b['point_count']} points)")
    elif b["status"] == BuildStatus.UNCHANGED:
        lines.append(f"  snapshot: {d['active_snapshot'] or 'none'} stays active (nothing to build)")
    elif b["status"] == BuildStatus.FAILED:
        lines.append(f"  snapshot: build HELD ({b['reason']}); {d['active_snapshot'] or 'nothing'} keeps serving")
    else:
        lines.append(f"  snapshot: not built ({b['status']}); active: {d['active_snapshot'] or 'none'}")
    if docs.get("skipped"):
        why = ", ".join(f"{n} {r}" for r, n in (d.get("skipped_by_reason") or {}).items())
        lines.append(f"  skipped (not errors): {docs['skipped']}" + (f"; this run: {why}" if why else "")
                     + " (see `freshindex documents list --skipped`)")
    if d.get("moves"):
        lines.append(f"  moved (old key removed in this build, vectors reused): {len(d['moves'])}")
        lines += [f"    {m['from']} -> {m['to']}" for m in d["moves"][:10]]
    if d["errors"]:
        lines.append(f"  errors ({len(d['errors'])}):")
        lines += [f"    {e['key']}: {e['reason']}: {e['detail']}" for e in d["errors"]]
    if d.get("error"):
        lines.append(f"  error: {d['error']}")
    if d.get("held_reason"):
        lines.append(f"  deletions HELD: {d['held_reason']}")
    if d.get("pending_deletion"):
        p = d["pending_deletion"]
        lines.append(f"  pending deletion (still served, labelled): {p['documents']} documents")
        lines += [f"    {k}" for k in p["keys"]]
    if d.get("joined"):
        # The counts above are that run's work, not this command's.
        lines.insert(1, f"  joined run {d['run_id']} started by another sync (one sync per source at a time); "
                        "its results:")
    return "\n".join(lines)


# -- snapshots ----------------------------------------------------------------------


@cli.group()
def snapshots() -> None:
    """Collection versions of each knowledge base."""


@snapshots.command("list")
@click.option("--kb", default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_list(state: _State, kb: str | None, as_json: bool) -> None:
    """List snapshots, newest first."""
    data = [s.as_dict() for s in state.services.registry.list_snapshots(kb)]

    def human(rows: list[dict[str, Any]]) -> str:
        if not rows:
            return "no snapshots yet (run `freshindex sync`)"
        out = [f"{'snapshot':<22} {'status':<9} {'strategy':<12} {'points':>7} {'+up':>5} {'-del':>5}  created"]
        for r in rows:
            out.append(f"{r['id']:<22} {r['status']:<9} {r['strategy']:<12} {r['point_count']:>7} "
                       f"{r['upserts']:>5} {r['deletes']:>5}  {(r['created_at'] or '')[:19]}")
        return "\n".join(out)

    _emit(data, as_json, human)


@snapshots.command("build")
@click.argument("kb", required=False)
@click.option("--full", is_flag=True, help="Rewrite every point (reuses cached vectors).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_build(state: _State, kb: str | None, full: bool, as_json: bool) -> None:
    """Build a snapshot of KB from staged changes now."""
    kb = kb or state.settings.default_kb
    result = state.services.builder.build(kb, actor="cli", reason="snapshots build", full=full)
    data = {"kb": kb, "status": result.status, "snapshot_id": result.snapshot_id, "strategy": result.strategy,
            "upserts": result.upserts, "deletes": result.deletes, "point_count": result.point_count,
            "seconds": round(result.seconds, 3), "reason": result.reason}
    _emit(data, as_json, lambda d: f"{d['kb']}: {d['status']} -> {d['snapshot_id']}" +
          (f" ({d['reason']})" if d["reason"] else ""))
    if result.status == BuildStatus.FAILED:
        sys.exit(ExitCode.VERIFICATION_HELD)


def _actor() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # no user name in some containers
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


def _snapshot_or_active(state: _State, snapshot_id: str | None, kb: str | None) -> str:
    if snapshot_id is not None:
        return snapshot_id
    kb = kb or state.settings.default_kb
    active = state.services.registry.active_snapshot(kb)
    if active is None:
        raise NotFoundError(f"knowledge base {kb} has no active snapshot")
    return active.id


@snapshots.command("show")
@click.argument("snapshot_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_show(state: _State, snapshot_id: str, as_json: bool) -> None:
    """The manifest of SNAPSHOT_ID, whether it serves, and recent alias moves."""
    data = state.services.snapshots.show(snapshot_id)

    def human(d: dict[str, Any]) -> str:
        keys = ("id", "kb", "status", "serving", "parent_id", "strategy", "point_count", "embedding_model",
                "parser_version", "changeset_ids", "upserts", "deletes", "build_seconds", "created_at",
                "activated_at", "archive_uri", "archive_sha256", "failure_reason")
        lines = [f"{k:<16} {d.get(k)}" for k in keys]
        lines.append(f"{'verification':<16} {json.dumps(d.get('verification'))}")
        lines.append(f"{'calibration':<16} {_calibration_line(d.get('calibration'))}")
        return "\n".join(lines)

    data["calibration"] = (data.get("verification") or {}).get("calibration")
    _emit(data, as_json, human)


def _calibration_line(c: dict[str, Any] | None) -> str:
    """One line for a snapshot's refusal calibration (injection.calibration)."""
    if not c:
        return "none (the shipped refusal bias; `freshindex snapshots calibrate` computes one)"
    if c.get("status") != "calibrated":
        return f"{c.get('status')}: the shipped refusal bias {c.get('shipped_bias')} ({c.get('points')} points)"
    return (f"bias {c['bias']} (shipped {c['shipped_bias']}): false refusals {c['false_refusals']} of "
            f"{c['answerable']} answerable, {c['perturbed_refused']} of {c['perturbed']} perturbed refused, "
            f"{c['seconds']} s")


@snapshots.command("calibrate")
@click.argument("snapshot_id", required=False)
@click.option("--kb", default=None, help="Calibrate the active snapshot of KB (default kb).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_calibrate(state: _State, snapshot_id: str | None, kb: str | None, as_json: bool) -> None:
    """Compute and keep the refusal calibration of a built snapshot (one built before calibration existed)."""
    snap = state.services.registry.get_snapshot(_snapshot_or_active(state, snapshot_id, kb))
    data = state.services.calibrate_refusal(snap.collection, snap.id)
    state.services.registry.record_calibration(snap.id, data)
    _emit(data, as_json, lambda d: f"{snap.id}: {_calibration_line(d)}")


@snapshots.command("verify")
@click.argument("snapshot_id", required=False)
@click.option("--kb", default=None, help="Verify the active snapshot of KB (default kb).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_verify(state: _State, snapshot_id: str | None, kb: str | None, as_json: bool) -> None:
    """Check a built snapshot against the registry (exit 3 when a check fails)."""
    data = state.services.snapshots.verify(_snapshot_or_active(state, snapshot_id, kb))
    _emit(data, as_json, lambda d: f"{d['snapshot_id']}: " + ("ok" if d["ok"] else f"FAILED {d['check']}: {d['reason']}"))
    if not data["ok"]:
        sys.exit(ExitCode.VERIFICATION_HELD)


@snapshots.command("reconcile")
@click.option("--kb", default=None, help="Knowledge base (default: settings default_kb).")
@click.option("--dry-run", is_flag=True, help="Only list stranded documents (exit 3 if there are any).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_reconcile(state: _State, kb: str | None, dry_run: bool, as_json: bool) -> None:
    """Find documents whose new chunks no build will apply, and re-stage them.

    Such a document stopped being findable (a late task of a closed sync run
    wrote into a changeset that was already applied).  Repairing stages its
    chunks for the next build and makes the next sync re-check it.
    """
    kb = kb or state.settings.default_kb
    data = state.services.snapshots.reconcile(kb, repair=not dry_run)

    def human(d: dict[str, Any]) -> str:
        if not d["stranded"]:
            return f"{d['kb']}: no stranded documents"
        verb = "would re-stage" if dry_run else "re-staged"
        lines = [f"{d['kb']}: {verb} {len(d['stranded'])} stranded documents"
                 + ("" if dry_run else "; build or sync to serve them")]
        lines += [f"  {r['source']}/{r['key']}: {r['pending_chunks']} pending chunks" for r in d["stranded"]]
        return "\n".join(lines)

    _emit(data, as_json, human)
    if dry_run and data["stranded"]:
        sys.exit(ExitCode.VERIFICATION_HELD)


@snapshots.command("swap")
@click.argument("snapshot_id")
@click.option("--reason", required=True, help="Why (recorded with the swap).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_swap(state: _State, snapshot_id: str, reason: str, as_json: bool) -> None:
    """Serve SNAPSHOT_ID (a retained version, older or newer than the active one)."""
    kb = state.services.registry.get_snapshot(snapshot_id).kb
    data = state.services.snapshots.swap(kb, snapshot_id, actor=_actor(), reason=reason)
    _emit(data, as_json, _swap_text)


@snapshots.command("rollback")
@click.option("--kb", default=None)
@click.option("--to", "to", default=None, help="Snapshot id (default: the previous one).")
@click.option("--reason", default="rollback", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_rollback(state: _State, kb: str | None, to: str | None, reason: str, as_json: bool) -> None:
    """Serve the previous snapshot (or --to ID). Documents it touched are re-checked on the next sync."""
    kb = kb or (state.services.registry.get_snapshot(to).kb if to else state.settings.default_kb)
    data = state.services.snapshots.rollback(kb, to=to, actor=_actor(), reason=reason)
    _emit(data, as_json, _swap_text)


def _swap_text(d: dict[str, Any]) -> str:
    if d["status"] == "unchanged":  # a swap's outcome, not a build's
        return f"{d['kb']}: {d['snapshot_id']} already serves"
    return (f"{d['kb']}: now serving {d['snapshot_id']} (was {d['previous_id']}, moved {d['direction']}; "
            f"{d['chunks_realigned']} chunks realigned; their documents are re-checked on the next sync)")


@snapshots.command("prune")
@click.option("--kb", default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_prune(state: _State, kb: str | None, as_json: bool) -> None:
    """Drop versions beyond the retention (never the active one or its parent)."""
    kb = kb or state.settings.default_kb
    pruned = state.services.snapshots.prune(kb)
    _emit({"kb": kb, "pruned": pruned}, as_json,
          lambda d: f"{d['kb']}: pruned {', '.join(d['pruned']) or 'nothing'}")


@snapshots.command("archive")
@click.argument("snapshot_id", required=False)
@click.option("--kb", default=None, help="Archive the active snapshot of KB.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_archive(state: _State, snapshot_id: str | None, kb: str | None, as_json: bool) -> None:
    """Archive a snapshot (collection, registry rows, manifest, sha256) to the archive location."""
    data = state.services.snapshots.archive(_snapshot_or_active(state, snapshot_id, kb))
    _emit(data, as_json, lambda d: f"{d['snapshot_id']} -> {d['uri']} ({d['bytes']} bytes, sha256 {d['sha256']})")


@snapshots.command("restore")
@click.argument("snapshot_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def snapshots_restore(state: _State, snapshot_id: str, as_json: bool) -> None:
    """Restore SNAPSHOT_ID from the archive location and serve it (into a fresh data directory)."""
    data = state.services.snapshots.restore(snapshot_id, actor=_actor())
    _emit(data, as_json, lambda d: f"{d['snapshot_id']} restored: {d['points']} points, serving {d['kb']}")


@cli.group()
def canaries() -> None:
    """Questions whose expected document must be found before a swap."""


@canaries.command("add")
@click.argument("question")
@click.option("--expect", "expected", required=True, help="Source key of the document that must be found.")
@click.option("--kb", default=None)
@click.option("--top-k", default=5, show_default=True, type=click.IntRange(1, 50))
@click.option("--force", is_flag=True,
              help="Register it although no indexed document of the kb has that key (it then holds every build).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def canaries_add(state: _State, question: str, expected: str, kb: str | None, top_k: int, force: bool,
                 as_json: bool) -> None:
    """Add QUESTION, whose top results must include the document with source key --expect.

    The key must name an indexed document of the knowledge base: a canary for
    a missing document fails every build's verification.
    """
    from freshindex.registry import ops

    kb = kb or state.settings.default_kb
    docs = ops.documents(state.services.registry, kb=kb, key=expected, limit=10)
    if not any(d["state"] == DocumentState.ACTIVE for d in docs):
        why = (f"its documents are {', '.join(sorted({d['state'] for d in docs}))}" if docs
               else "no source of the knowledge base has it")
        problem = (f"knowledge base {kb!r} has no indexed document with key {expected!r} ({why}); a canary for it "
                   f"would hold every build. See `freshindex documents list --kb {kb}`")
        if not force:
            raise NotFoundError(problem)
        click.echo(f"warning: {display.printable(problem)}; registered anyway (--force)", err=True)
        log.warning("canary for a missing document", extra={"event": "canary_forced", "kb": kb, "key": expected})
    c = state.services.registry.add_canary(kb, question, expected, top_k)
    _emit({"id": c.id, "kb": c.kb, "question": c.question, "expected_key": c.expected_key, "top_k": c.top_k},
          as_json, lambda d: f"canary {d['id']} on {d['kb']}: {d['question']!r} -> {d['expected_key']}")


@canaries.command("list")
@click.option("--kb", default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def canaries_list(state: _State, kb: str | None, as_json: bool) -> None:
    rows = [{"id": c.id, "kb": c.kb, "question": c.question, "expected_key": c.expected_key, "top_k": c.top_k}
            for c in state.services.registry.list_canaries(kb)]
    _emit(rows, as_json, lambda rs: "\n".join(f"{r['id']:>4} {r['kb']:<12} {r['question']!r} -> {r['expected_key']}"
                                              for r in rs) or "no canaries")


@canaries.command("remove")
@click.argument("canary_id", type=int)
@click.pass_obj
def canaries_remove(state: _State, canary_id: int) -> None:
    state.services.registry.remove_canary(canary_id)
    click.echo(f"removed canary {canary_id}")


# -- query --------------------------------------------------------------------------


@cli.command()
@click.argument("question")
@click.option("--kb", default=None)
@click.option("--principal", default="anonymous", show_default=True)
@click.option("--group", "groups", multiple=True, help="A group of the principal (repeatable).")
@click.option("--tenant", default=None, help="The principal's tenant (default: default).")
@click.option("--limit", default=5, show_default=True, type=click.IntRange(1, 50))
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def query(state: _State, question: str, kb: str | None, principal: str, groups: tuple[str, ...], tenant: str | None,
          limit: int, as_json: bool) -> None:
    """Answer QUESTION as a principal (an operator's tool: the HTTP API takes identity from credentials)."""
    from freshindex.acl import Principal

    kb = kb or state.settings.default_kb
    packet = state.services.client.retrieve(question, kb=kb, principal=Principal.of(principal, groups, tenant=tenant),
                                            limit=limit)
    if as_json:
        click.echo(json.dumps(packet.as_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(packet.rendered)
        if not packet.insufficient:
            click.echo("\nSources:")
            for e in packet.evidence:
                click.echo(f"  {display.printable(e.citation)}  score={e.score:.3f}")


@cli.command("check-citations")
@click.argument("answer", type=click.File("r", encoding="utf-8"))
@click.option("--packet", "packet_file", required=True, type=click.File("r", encoding="utf-8"),
              help="The packet the answer was written from: `freshindex query --json` output (- for stdin).")
@click.option("--json", "as_json", is_flag=True)
def check_citations_command(answer: Any, packet_file: Any, as_json: bool) -> None:
    """Check the citations of a finished ANSWER (a file, - for stdin) against a packet's source list.

    Exit 0 when every citation is listed and supported, 3 when some is not,
    2 when the input is not an answer and a packet. Nothing is counted: a
    CLI process is never scraped (POST /v1/citations/check counts in
    freshindex_invalid_citations_total), and no registry or store is opened.
    """
    from freshindex.injection.citations import MAX_ANSWER_CHARS, CitationInputError, check_answer

    text = answer.read(MAX_ANSWER_CHARS + 1)
    try:
        packet = json.loads(packet_file.read())
        report = check_answer(text, packet)
    except RecursionError as exc:  # JSON nested deeper than the parser's recursion limit
        raise click.UsageError("cannot check citations: the packet is nested too deeply") from exc
    except (ValueError, CitationInputError) as exc:
        raise click.UsageError(f"cannot check citations: {exc}") from exc

    def human(d: dict[str, Any]) -> str:
        lines = [f"citations {'ok' if d['ok'] else 'INVALID'}: cited {d['cited'] or 'none'}, "
                 f"{d['sentences']} sentences ({d['uncited_sentences']} without a citation)"]
        if d["missing"]:
            lines.append(f"  not in the source list: {d['missing']}")
        if d["unsupported"]:
            lines.append(f"  no citing sentence supported by the source: {d['unsupported']}")
        for m in d.get("malformed", []):
            lines.append(f"  malformed citation {m['citation'][:40]} ({m['kind']})")
        return "\n".join(lines)

    _emit(report.as_dict(), as_json, human)
    if not report.ok:
        raise click.exceptions.Exit(ExitCode.VERIFICATION_HELD)


# -- services -----------------------------------------------------------------------


@cli.command()
@click.option("--queues", default="sync,parse,build", show_default=True, help="Queues to consume (comma-separated).")
@click.option("--concurrency", "-c", default=2, show_default=True, type=int)
@click.option("--pool", default="prefork", show_default=True, type=click.Choice(["prefork", "solo", "threads"]))
@click.option("--hostname", default=None, help="Worker node name (default: freshindex@<host>).")
@click.pass_obj
def worker(state: _State, queues: str, concurrency: int, pool: str, hostname: str | None) -> None:
    """Start a Celery worker (needs a broker URL). Checks its dependencies first."""
    import os

    from freshindex.storage import check_data_dir
    from freshindex.workers import exporter

    settings = state.settings
    check_data_dir(settings, create=True, needed_for="the worker's heartbeat file")
    metrics_port = settings.broker.worker_metrics_port
    if metrics_port:
        # Before anything imports prometheus-client: its multiprocess mode is chosen at import.
        exporter.prepare(settings.data_dir / "worker-metrics" / str(os.getpid()))

    from freshindex.celery import build_app
    from freshindex.services import Services
    from freshindex.workers.names import Queue, queue_name

    app = build_app(settings)
    names = []
    for q in queues.split(","):
        try:
            names.append(queue_name(settings, Queue(q.strip())))
        except ValueError as exc:
            raise click.BadParameter(f"unknown queue {q!r}; known: {', '.join(x.value for x in Queue)}") from exc
    probe = Services(settings)
    try:
        info = probe.check()
    finally:
        probe.close()
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=3)
    except Exception as exc:
        raise FreshIndexError(f"broker unreachable: {exc}") from exc
    if metrics_port:
        from freshindex.workers.probe import heartbeat_path

        exporter.install(app, port=metrics_port, queues=[queue_name(settings, q) for q in Queue],
                         host=settings.broker.worker_metrics_bind, heartbeat=heartbeat_path(settings, "worker"))
    log.warning("worker starting", extra={"event": "worker_starting", "queues": names, **info})
    argv = ["worker", "-Q", ",".join(names), "-c", str(concurrency), "-P", pool,
            "--loglevel", settings.log_level, "-n", hostname or "freshindex@%h", "--without-gossip",
            "--without-mingle"]
    app.worker_main(argv)


@cli.command()
@click.pass_obj
def beat(state: _State) -> None:
    """Start Celery beat with freshindex's schedule (source polls)."""
    from freshindex.celery import build_app
    from freshindex.storage import check_data_dir

    check_data_dir(state.settings, create=True, needed_for="beat's schedule and heartbeat files")
    app = build_app(state.settings)  # the app factory installs beat's schedule
    state.settings.data_dir.mkdir(parents=True, exist_ok=True)  # beat's schedule file lives there
    app.Beat(loglevel=state.settings.log_level,
             schedule=str(state.settings.data_dir / "celerybeat-schedule")).run()


@cli.command()
@click.option("--host", default=None)
@click.option("--port", default=None, type=int)
@click.option("--insecure", is_flag=True, help="Allow a non-loopback host with auth.mode=none (every caller "
              "anonymous); same as auth.allow_insecure.")
@click.pass_obj
def serve(state: _State, host: str | None, port: int | None, insecure: bool) -> None:
    """Serve health, metrics and the query API over HTTP."""
    from freshindex.api.auth import insecure_bind_problem

    problem = insecure_bind_problem(state.settings.auth, host or state.settings.api.host, insecure_flag=insecure)
    if problem is not None:
        raise click.UsageError(problem)
    import uvicorn

    from freshindex.api.app import create_app

    svc = state.services
    svc.check()
    app = create_app(svc)
    dispatcher = sync_commands.start_dispatcher(svc)  # webhook tickets -> syncs
    from freshindex.api.sqs import start_poller

    sqs = start_poller(svc)  # S3 notifications from webhooks.sqs_queue_url -> tickets (None when unset)
    try:
        uvicorn.run(app, host=host or state.settings.api.host, port=port or state.settings.api.port,
                    log_level=state.settings.log_level.lower(), access_log=False,
                    proxy_headers=False)  # the TCP peer stays the client: gateway mode trusts it, not X-Forwarded-For
    finally:
        if sqs is not None:
            sqs.stop()
        dispatcher.stop()


@cli.command()
@click.argument("source_id", required=False)
@click.option("--run", "run_id", type=int, default=None, help="One sync run.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def errors(state: _State, source_id: str | None, run_id: int | None, as_json: bool) -> None:
    """Per-document errors recorded by syncs (newest runs first)."""
    rows = state.services.registry.document_errors(run_id=run_id, source_id=source_id)
    data = [{"source": e.source_id, "run": e.sync_run_id, "key": e.key, "reason": e.reason, "detail": e.detail}
            for e in rows]
    _emit(data, as_json, lambda rs: "\n".join(f"{r['source']}:{r['key']} (run {r['run']}): {r['reason']}: "
                                              f"{r['detail']}" for r in rs) or "no document errors")


@cli.group("api")
def api_group() -> None:
    """The HTTP API's description."""


@api_group.command("openapi")
def api_openapi() -> None:
    """Print the OpenAPI document of `freshindex serve` (docs/openapi.json is this output)."""
    from freshindex.api.schema import openapi_document

    click.echo(json.dumps(openapi_document(), indent=2, sort_keys=True, ensure_ascii=False))


@cli.command("mcp")
@click.option("--url", envvar="FRESHINDEX_URL", default=None,
              help="The freshindex API to ask (default: http://api.host:api.port; env FRESHINDEX_URL).")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="stdio: a file holding your own API key or JWT (else FRESHINDEX_TOKEN from your environment).")
@click.option("--http", "over_http", is_flag=True, help="Serve streamable HTTP at /mcp instead of stdio; each "
              "request's Authorization header is forwarded to the API (the server holds no credential).")
@click.option("--host", default="127.0.0.1", show_default=True, help="--http: address to bind.")
@click.option("--port", default=8765, show_default=True, type=int, help="--http: port to bind.")
@click.option("--kb", default=None, help="The tools' default knowledge base (default: settings default_kb).")
@click.pass_obj
def mcp_command(state: _State, url: str | None, token_file: str | None, over_http: bool, host: str, port: int,
                kb: str | None) -> None:
    """Serve search_knowledge and check_citations to MCP clients (needs freshindex[mcp]).

    Thin over the HTTP API: run it next to a `freshindex serve`. The credential is always the caller's.
    """
    import os

    try:
        from freshindex.integrations import mcp_server
    except ModuleNotFoundError as exc:
        raise ConfigProblem(f"{exc.name or exc} is not installed: pip install 'freshindex[mcp]'") from exc
    base = url or f"http://{state.settings.api.host}:{state.settings.api.port}"
    default_kb = kb or state.settings.default_kb
    if over_http:
        if token_file or os.environ.get("FRESHINDEX_TOKEN"):
            raise click.UsageError("--http forwards each caller's own Authorization header: it takes no "
                                   "--token-file (unset FRESHINDEX_TOKEN)")
        mcp_server.run_http(base, host=host, port=port, default_kb=default_kb)
        return
    token = Path(token_file).read_text().strip() if token_file else os.environ.get("FRESHINDEX_TOKEN") or None
    mcp_server.run_stdio(base, token=token, default_kb=default_kb)


ops_commands.register(cli)  # runs, documents, kbs, locks, probe, ... (freshindex/ops_commands.py)
keys_commands.register(cli)  # keys create/list/revoke (freshindex/keys_commands.py)
acl_commands.register(cli)  # sources update (freshindex/acl_commands.py)
sync_commands.register(cli)  # syncs show (freshindex/sync_commands.py)
audit_commands.register(cli)  # audit denials (freshindex/audit_commands.py)
source_commands.register(cli)  # sources show/pause/resume/remove/runs/policy/sweep (freshindex/source_commands.py)
ocr_commands.register(cli)  # ocr report (freshindex/ocr_commands.py)

__all__ = ["NotFoundError", "cli", "main"]
