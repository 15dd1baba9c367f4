"""``freshindex sync`` and its report, with progress; ``freshindex syncs show`` (a webhook sync ticket's state).

What it does not do: run a webhook ticket's sync (``serve``'s dispatcher and
its runner are composition-root code, :mod:`freshindex.dispatch`) or check the
broker itself (:func:`freshindex.dispatch.check_broker`).

Registered into the ``freshindex`` group by :func:`register` (one line in
``freshindex/cli/__init__.py``); imports nothing from the package ``__init__``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import click

from freshindex.cli import display, ocr
from freshindex.cli.context import CliState
from freshindex.cli.display import escaped
from freshindex.cli.support import json_option, require
from freshindex.core.enums import BuildStatus
from freshindex.dispatch import check_broker

progress_log = logging.getLogger("freshindex.progress")  # INFO when stderr is not a terminal (freshindex/cli/__init__.py)


@click.group()
def syncs() -> None:
    """Sync tickets opened by webhooks (coalesced events)."""


@syncs.command("show")
@click.argument("ticket_id", type=int)
@json_option
@click.pass_obj
def syncs_show(state: CliState, ticket_id: int, as_json: bool) -> None:
    """The state of TICKET_ID: queued, running (run N), coalesced into run N, done or failed."""
    from freshindex.api.dispatcher import ticket_state

    data = ticket_state(state.services.registry, ticket_id)
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    data = escaped(data)
    run = f", run {data['run_id']}: {data['run_status']} (build {data['build_status']})" if data["run_id"] else ""
    paths = "all" if data["paths"] is None else str(len(data["paths"]))
    click.echo(f"ticket {data['ticket']} ({data['source']}): {data['state']}{run}; {data['events']} event(s), "
               f"paths: {paths}" + (f"; {data['detail']}" if data["detail"] else ""))


@click.command()
@click.argument("source_id", required=False)
@click.option("--all", "all_sources", is_flag=True, help="Sync every registered source.")
@click.option("--inline", is_flag=True, help="Run in this process even when a broker is configured.")
@click.option("--no-build", is_flag=True, help="Stage changes without building a snapshot (inline only).")
@json_option
@click.pass_obj
def sync(state: CliState, source_id: str | None, all_sources: bool, inline: bool, no_build: bool,
         as_json: bool) -> None:
    """Sync SOURCE_ID (or --all): detect changes, re-embed only what changed, swap in a new snapshot."""
    from freshindex.workers.runner import sync_distributed, sync_inline

    if bool(source_id) == all_sources:
        raise click.UsageError("give one SOURCE_ID or --all")
    svc = state.services
    if source_id:
        require(state, source=source_id)
    ids = [source_id] if source_id else [s.id for s in svc.registry.list_sources() if not s.removed]
    if not ids:
        raise click.UsageError("no sources registered")
    distributed = state.settings.distributed and not inline
    app = None
    if distributed:
        from freshindex.celery import build_app

        app = build_app(state.settings)
        check_broker(app)  # a few seconds, one line, when the broker is down (freshindex/dispatch.py)
    reports: list[dict[str, Any]] = []
    codes: list[int] = []
    for sid in ids:
        with _Progress(f"sync {sid}", json_lines=as_json, source=sid) as progress:
            if distributed:
                report = sync_distributed(svc, app, sid, timeout=state.settings.broker.sync_timeout,
                                          progress=progress, on_poll=_registry_stages(svc.registry, progress))
            else:
                with _build_stages(svc.builder, progress):
                    report = sync_inline(svc, sid, progress=progress, build=not no_build)
        # Scanned pages read in this run and those under the floor (freshindex/cli/ocr.py).
        floor = ocr.source_floor(svc.registry.get_source(sid), state.settings.sources.ocr_page_floor)
        reports.append({**report.as_dict(), "ocr": ocr.sync_counts(svc.registry, report.run, floor)})
        if not as_json:
            ocr_line = ocr.sync_line(display.escaped(reports[-1]["ocr"]))
            click.echo(sync_text(display.escaped(reports[-1])) + (f"\n{ocr_line}" if ocr_line else ""))
        codes.append(report.exit_code)
    if as_json:
        out = reports
        click.echo(json.dumps(out[0] if len(out) == 1 else out, indent=2, default=str, ensure_ascii=False))
    code = max(codes)
    if code:
        sys.exit(code)


#: Builder phases (``snapshots.builder``'s ``on_phase``) that start a stage a person waits through after the
#: documents: the others (recycling, optimize, written, swapped) are steps inside one of these.
STAGE_OF_PHASE = {"locked": "building", "verifying": "verifying", "calibrating": "calibrating",
                  "verified": "swapping"}


def _terminal() -> bool:
    return sys.stderr.isatty()


class _Progress:
    """A progress bar and then the build's stages on a terminal; structured progress lines in logs otherwise.

    With ``--json`` (``json_lines``), standard output is kept for the one
    report and progress goes to standard error as one JSON object per line:
    ``{"event": "sync_progress", "source": ..., "done": ..., "total": ...,
    "percent": ...}`` for documents (at most about 20 lines per sync, the
    last at 100 %), then ``{"event": "sync_stage", "source": ..., "stage":
    ..., "at_s": ...}`` as the build reaches ``building``, ``verifying``,
    ``calibrating`` (when it fits a refusal calibration) and ``swapping``, and
    ``done`` when the sync returns (``at_s``: seconds since the sync began).
    On a terminal each stage is a line that ends with its duration.  What it
    does not show: the work between the last document and the build (the
    run's counts are aggregated), nor the steps inside a stage.
    """

    def __init__(self, label: str, enabled: bool = True, *, json_lines: bool = False, source: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.enabled, self.json_lines, self.source = label, enabled, json_lines, source
        self.tty = _terminal() and not json_lines
        self.bar: Any = None
        self.last_logged = -1
        self.clock = clock
        self.started = clock()
        self.current: tuple[str, float] | None = None  # the stage shown now, and when it began

    def __enter__(self) -> _Progress:
        return self

    def __call__(self, done: int, total: int, key: str) -> None:
        if not self.enabled or total <= 0:
            return
        if self.current is not None:  # documents after a stage: a crashed run's build ran first (runner._reap)
            if self.tty:
                self._end_line(self.clock(), "")
                self.bar = None if self.bar is False else self.bar
            self.current = None
        if self.json_lines:
            step = max(1, total // 20)
            if done == total or done - self.last_logged >= step:
                self.last_logged = done
                self._json({"event": "sync_progress", "source": self.source, "done": done, "total": total,
                            "percent": round(100 * done / total, 1)})
            return
        if self.tty:
            if self.bar is None:
                self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr,
                                             show_pos=True, show_eta=True)
                self.bar.__enter__()
            if self.bar is not False:
                self.bar.update(done - self.bar.pos)
            return
        step = max(1, total // 10)
        if done == total or done - self.last_logged >= step:
            self.last_logged = done
            progress_log.info("progress", extra={"event": "sync_progress", "label": self.label, "done": done,
                                                 "total": total, "percent": round(100 * done / total, 1)})

    def stage(self, name: str) -> None:
        """The sync reached stage ``name`` (``building``, ``verifying``, ...); repeating the current one is a no-op."""
        if not self.enabled or (self.current is not None and self.current[0] == name):
            return
        now = self.clock()
        if self.tty:
            self._close_bar()
            self._end_line(now, "")
            sys.stderr.write(f"{self.label}: {name}...")
            sys.stderr.flush()
        else:
            self._record(name, now)
        self.current = (name, now)

    def _end_line(self, now: float, failed: str) -> None:
        """On a terminal: end the current stage's line with its duration (or ``failed``)."""
        if self.current is not None:
            sys.stderr.write(f" {failed or f'{now - self.current[1]:.1f}s'}\n")
            sys.stderr.flush()

    def _record(self, name: str, now: float) -> None:
        """Off a terminal: a ``sync_stage`` JSON line (``--json``) or log line."""
        at = round(now - self.started, 3)
        if self.json_lines:
            self._json({"event": "sync_stage", "source": self.source, "stage": name, "at_s": at})
        else:
            progress_log.info("stage", extra={"event": "sync_stage", "label": self.label, "stage": name, "at_s": at})

    def _close_bar(self) -> None:
        if self.bar:
            self.bar.__exit__(None, None, None)
        self.bar = False  # closed: the next document count opens a new one

    def _json(self, line: dict[str, Any]) -> None:
        sys.stderr.write(json.dumps(line, ensure_ascii=False) + "\n")
        sys.stderr.flush()

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        # ``done`` only after a stage: a sync that reached no build (--no-build, held) ends with its bar.
        if self.enabled and self.current is not None:
            now = self.clock()
            if self.tty:
                self._end_line(now, "" if exc_type is None else "stopped")
            elif exc_type is None:
                self._record("done", now)
            self.current = None
        if self.bar:
            self.bar.__exit__(exc_type, *exc)


def _registry_stages(registry: Any, progress: _Progress) -> Callable[[Any], None]:
    """For a distributed sync: the build's stages as the registry shows them while a build worker works.

    ``building`` once the run's documents are done and its build is pending
    (queued or writing, verification included: a worker records no
    verifying phase), ``swapping`` once the newest version of the kb is
    verified.  A build that began and ended between two polls is shown as
    ``building`` when the run is first seen built, so a built run always
    shows its build.  What it does not show: ``verifying`` and
    ``calibrating`` apart from ``building`` (the inline sync shows them).
    """
    from freshindex.core.enums import RunStatus, SnapshotStatus

    def observe(run: Any) -> None:
        if run.status == RunStatus.RUNNING:
            return
        if run.build_status == BuildStatus.BUILT and progress.current is None:
            progress.stage("building")  # the whole build fell between two polls: shown once, as it ends
            return
        if run.build_status != BuildStatus.PENDING:
            return
        newest = next(iter(registry.list_snapshots(run.kb)), None)
        verified = newest is not None and newest.status == SnapshotStatus.VERIFIED
        progress.stage("swapping" if verified else "building")

    return observe


@contextlib.contextmanager
def _build_stages(builder: Any, progress: _Progress) -> Iterator[None]:
    """Show ``builder``'s phases as ``progress`` stages while an inline sync runs (its ``on_phase`` is restored)."""
    previous = builder.on_phase

    def on_phase(name: str) -> None:
        if previous is not None:
            previous(name)
        if name in STAGE_OF_PHASE:
            progress.stage(STAGE_OF_PHASE[name])

    builder.on_phase = on_phase
    try:
        yield
    finally:
        builder.on_phase = previous


def sync_text(d: dict[str, Any]) -> str:
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


def register(cli: click.Group) -> None:
    cli.add_command(sync)
    cli.add_command(syncs)


__all__ = ["register", "sync_text"]
