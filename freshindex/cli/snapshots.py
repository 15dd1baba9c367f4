"""``freshindex snapshots`` (list, build, show, calibrate, verify, reconcile, swap, rollback, prune, archive,
restore) and ``freshindex canaries``: the collection versions of each knowledge base and the questions a
build must answer before its swap.

Registered into the ``freshindex`` group by :func:`register` (one line in
``freshindex/cli/__init__.py``; ``snapshots held|history`` come from
:mod:`freshindex.cli.reports`).  Reaches only ``ctx.obj`` (``.settings``,
``.services``) and imports nothing from the package ``__init__``.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import click

from freshindex.cli import display
from freshindex.cli.context import CliState
from freshindex.cli.display import emit as _emit
from freshindex.cli.support import actor, json_option, require
from freshindex.core.enums import BuildStatus, DocumentState
from freshindex.core.errors import NotFoundError
from freshindex.core.exit_codes import ExitCode

log = logging.getLogger("freshindex.cli")


@click.group()
def snapshots() -> None:
    """Collection versions of each knowledge base."""


@snapshots.command("list")
@click.option("--kb", default=None)
@json_option
@click.pass_obj
def snapshots_list(state: CliState, kb: str | None, as_json: bool) -> None:
    """List snapshots, newest first."""
    require(state, kb=kb)
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
@json_option
@click.pass_obj
def snapshots_build(state: CliState, kb: str | None, full: bool, as_json: bool) -> None:
    """Build a snapshot of KB from staged changes now."""
    kb = kb or state.settings.default_kb
    require(state, kb=kb)  # a build never creates a knowledge base: `sources add --kb` does
    result = state.services.builder.build(kb, actor="cli", reason="snapshots build", full=full)
    data = {"kb": kb, "status": result.status, "snapshot_id": result.snapshot_id, "strategy": result.strategy,
            "upserts": result.upserts, "deletes": result.deletes, "point_count": result.point_count,
            "seconds": round(result.seconds, 3), "reason": result.reason}
    _emit(data, as_json, lambda d: f"{d['kb']}: {d['status']} -> {d['snapshot_id']}" +
          (f" ({d['reason']})" if d["reason"] else ""))
    if result.status == BuildStatus.FAILED:
        sys.exit(ExitCode.VERIFICATION_HELD)


def _snapshot_or_active(state: CliState, snapshot_id: str | None, kb: str | None) -> str:
    if snapshot_id is not None:
        require(state, snapshot=snapshot_id)
        return snapshot_id
    kb = kb or state.settings.default_kb
    require(state, kb=kb)
    active = state.services.registry.active_snapshot(kb)
    if active is None:
        raise NotFoundError(f"knowledge base {kb} has no active snapshot")
    return active.id


@snapshots.command("show")
@click.argument("snapshot_id")
@json_option
@click.pass_obj
def snapshots_show(state: CliState, snapshot_id: str, as_json: bool) -> None:
    """The manifest of SNAPSHOT_ID, whether it serves, and recent alias moves."""
    require(state, snapshot=snapshot_id)
    data = state.services.snapshots.show(snapshot_id).to_dict()

    def human(d: dict[str, Any]) -> str:
        keys = ("id", "kb", "status", "serving", "parent_id", "strategy", "point_count", "embedding_model",
                "parser_version", "changeset_ids", "upserts", "deletes", "build_seconds", "created_at",
                "activated_at", "archive_uri", "archive_sha256", "failure_reason")
        lines = [f"{k:<16} {d.get(k)}" for k in keys]
        lines.append(f"{'verification':<16} {json.dumps(d.get('verification'))}")
        lines.append(f"{'calibration':<16} {_calibration_line(d.get('calibration'))}")
        return "\n".join(lines)

    data["calibration"] = (data.get("verification") or {}).get("calibration")
    if isinstance(data["calibration"], dict) and data["calibration"].get("status") == "calibrated":
        # a bias fitted for other refusal weights does not serve (RefusalPolicy.calibrated): say so
        data["calibration"] = {**data["calibration"],
                               "serves": state.services.refusal_policy.fits(data["calibration"].get("policy"))}
    _emit(data, as_json, human)


def _calibration_line(c: dict[str, Any] | None) -> str:
    """One line for a snapshot's refusal calibration (injection.calibration)."""
    if not c:
        return "none (the shipped refusal bias; `freshindex snapshots calibrate` computes one)"
    if c.get("status") != "calibrated":
        return f"{c.get('status')}: the shipped refusal bias {c.get('shipped_bias')} ({c.get('points')} points)"
    if c.get("serves") is False:
        return (f"bias {c['bias']}, fitted for other refusal weights: the shipped bias serves until "
                "`freshindex snapshots calibrate` refits it")
    return (f"bias {c['bias']} (shipped {c['shipped_bias']}): false refusals {c['false_refusals']} of "
            f"{c['answerable']} answerable, {c['perturbed_refused']} of {c['perturbed']} perturbed refused, "
            f"{c['seconds']} s")


@snapshots.command("calibrate")
@click.argument("snapshot_id", required=False)
@click.option("--kb", default=None, help="Calibrate the active snapshot of KB (default kb).")
@json_option
@click.pass_obj
def snapshots_calibrate(state: CliState, snapshot_id: str | None, kb: str | None, as_json: bool) -> None:
    """Compute and keep the refusal calibration of a built snapshot (one built before calibration existed)."""
    snap = state.services.registry.get_snapshot(_snapshot_or_active(state, snapshot_id, kb))
    data = state.services.calibrate_refusal(snap.collection, snap.id)
    state.services.registry.record_calibration(snap.id, data)
    _emit(data, as_json, lambda d: f"{snap.id}: {_calibration_line(d)}")


@snapshots.command("verify")
@click.argument("snapshot_id", required=False)
@click.option("--kb", default=None, help="Verify the active snapshot of KB (default kb).")
@json_option
@click.pass_obj
def snapshots_verify(state: CliState, snapshot_id: str | None, kb: str | None, as_json: bool) -> None:
    """Check a built snapshot against the registry (exit 3 when a check fails)."""
    data = state.services.snapshots.verify(_snapshot_or_active(state, snapshot_id, kb)).to_dict()
    _emit(data, as_json, lambda d: f"{d['snapshot_id']}: " + ("ok" if d["ok"] else f"FAILED {d['check']}: {d['reason']}"))
    if not data["ok"]:
        sys.exit(ExitCode.VERIFICATION_HELD)


@snapshots.command("reconcile")
@click.option("--kb", default=None, help="Knowledge base (default: settings default_kb).")
@click.option("--dry-run", is_flag=True, help="Only list stranded documents (exit 3 if there are any).")
@json_option
@click.pass_obj
def snapshots_reconcile(state: CliState, kb: str | None, dry_run: bool, as_json: bool) -> None:
    """Find documents whose new chunks no build will apply, and re-stage them.

    Such a document stopped being findable (a late task of a closed sync run
    wrote into a changeset that was already applied).  Repairing stages its
    chunks for the next build and makes the next sync re-check it.
    """
    kb = kb or state.settings.default_kb
    require(state, kb=kb)
    data = state.services.snapshots.reconcile(kb, repair=not dry_run).to_dict()

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
@json_option
@click.pass_obj
def snapshots_swap(state: CliState, snapshot_id: str, reason: str, as_json: bool) -> None:
    """Serve SNAPSHOT_ID (a retained version, older or newer than the active one)."""
    require(state, snapshot=snapshot_id)
    kb = state.services.registry.get_snapshot(snapshot_id).kb
    data = state.services.snapshots.swap(kb, snapshot_id, actor=actor(), reason=reason).to_dict()
    _emit(data, as_json, _swap_text)


@snapshots.command("rollback")
@click.option("--kb", default=None)
@click.option("--to", "to", default=None, help="Snapshot id (default: the previous one).")
@click.option("--reason", default="rollback", show_default=True)
@json_option
@click.pass_obj
def snapshots_rollback(state: CliState, kb: str | None, to: str | None, reason: str, as_json: bool) -> None:
    """Serve the previous snapshot (or --to ID). Documents it touched are re-checked on the next sync."""
    require(state, snapshot=to)
    kb = kb or (state.services.registry.get_snapshot(to).kb if to else state.settings.default_kb)
    require(state, kb=kb)
    data = state.services.snapshots.rollback(kb, to=to, actor=actor(), reason=reason).to_dict()
    _emit(data, as_json, _swap_text)


def _swap_text(d: dict[str, Any]) -> str:
    if d["status"] == "unchanged":  # a swap's outcome, not a build's
        return f"{d['kb']}: {d['snapshot_id']} already serves"
    return (f"{d['kb']}: now serving {d['snapshot_id']} (was {d['previous_id']}, moved {d['direction']}; "
            f"{d['chunks_realigned']} chunks realigned; their documents are re-checked on the next sync)")


@snapshots.command("prune")
@click.option("--kb", default=None)
@json_option
@click.pass_obj
def snapshots_prune(state: CliState, kb: str | None, as_json: bool) -> None:
    """Drop versions beyond the retention (never the active one or its parent)."""
    kb = kb or state.settings.default_kb
    require(state, kb=kb)
    pruned = state.services.snapshots.prune(kb)
    _emit({"kb": kb, "pruned": pruned}, as_json,
          lambda d: f"{d['kb']}: pruned {', '.join(d['pruned']) or 'nothing'}")


@snapshots.command("archive")
@click.argument("snapshot_id", required=False)
@click.option("--kb", default=None, help="Archive the active snapshot of KB.")
@json_option
@click.pass_obj
def snapshots_archive(state: CliState, snapshot_id: str | None, kb: str | None, as_json: bool) -> None:
    """Archive a snapshot (collection, registry rows, manifest, sha256) to the archive location."""
    data = state.services.snapshots.archive(_snapshot_or_active(state, snapshot_id, kb)).to_dict()
    _emit(data, as_json, lambda d: f"{d['snapshot_id']} -> {d['uri']} ({d['bytes']} bytes, sha256 {d['sha256']})")


@snapshots.command("restore")
@click.argument("snapshot_id")
@json_option
@click.pass_obj
def snapshots_restore(state: CliState, snapshot_id: str, as_json: bool) -> None:
    """Restore SNAPSHOT_ID from the archive location and serve it (into a fresh data directory)."""
    data = state.services.snapshots.restore(snapshot_id, actor=actor()).to_dict()
    _emit(data, as_json, lambda d: f"{d['snapshot_id']} restored: {d['points']} points, serving {d['kb']}")


@click.group()
def canaries() -> None:
    """Questions whose expected document must be found before a swap."""


@canaries.command("add")
@click.argument("question")
@click.option("--expect", "expected", required=True, help="Source key of the document that must be found.")
@click.option("--kb", default=None)
@click.option("--top-k", default=5, show_default=True, type=click.IntRange(1, 50))
@click.option("--force", is_flag=True,
              help="Register it although no indexed document of the kb has that key (it then holds every build).")
@json_option
@click.pass_obj
def canaries_add(state: CliState, question: str, expected: str, kb: str | None, top_k: int, force: bool,
                 as_json: bool) -> None:
    """Add QUESTION, whose top results must include the document with source key --expect.

    The key must name an indexed document of the knowledge base: a canary for
    a missing document fails every build's verification.
    """
    from freshindex.registry import reports

    kb = kb or state.settings.default_kb
    require(state, kb=kb)  # even with --force: a canary never creates a knowledge base
    docs = reports.documents(state.services.registry, kb=kb, key=expected, limit=10)
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
@json_option
@click.pass_obj
def canaries_list(state: CliState, kb: str | None, as_json: bool) -> None:
    require(state, kb=kb)
    rows = [{"id": c.id, "kb": c.kb, "question": c.question, "expected_key": c.expected_key, "top_k": c.top_k}
            for c in state.services.registry.list_canaries(kb)]
    _emit(rows, as_json, lambda rs: "\n".join(f"{r['id']:>4} {r['kb']:<12} {r['question']!r} -> {r['expected_key']}"
                                              for r in rs) or "no canaries")


@canaries.command("remove")
@click.argument("canary_id", type=int)
@click.pass_obj
def canaries_remove(state: CliState, canary_id: int) -> None:
    state.services.registry.remove_canary(canary_id)
    click.echo(f"removed canary {canary_id}")



def register(cli: click.Group) -> None:
    cli.add_command(snapshots)
    cli.add_command(canaries)


__all__ = ["register"]
