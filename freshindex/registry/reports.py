"""Operator reports over the registry: what the runbooks used to ask in SQL.

Each function takes a :class:`registry.Registry` and returns plain dicts
(JSON-ready: datetimes as ISO strings), one per row, in a stable order. They
are read-only except :func:`forget_etags`, the one maintenance write the
runbooks need (force the next sync to re-process documents whose bytes did
not change). They run on SQLite and PostgreSQL alike (no dialect-specific
SQL), so the same command works on the embedded default and at scale.

What they do not guarantee: a consistent view across two calls (each call is
its own transaction), nor bounded cost on huge registries beyond the
``limit`` each listing takes.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, TypeVar

from sqlalchemy import Select, and_, func, select, update

from freshindex.core.enums import (
    SUCCESSFUL_RUNS,
    ChangesetStatus,
    DocumentOutcomeKind,
    DocumentState,
    RunStatus,
    SnapshotStatus,
)
from freshindex.core.errors import NotFoundError
from freshindex.registry.base import _run_info
from freshindex.registry.schema import (
    Changeset,
    ChangesetEntry,
    Document,
    DocumentResult,
    Lock,
    Snapshot,
    Source,
    SyncRun,
    Tombstone,
)
from freshindex.registry.store import Registry

#: Runs whose status counts as a successful sync (the sync-lag gauge uses the same).
OK_STATUSES = SUCCESSFUL_RUNS


_Q = TypeVar("_Q", bound="Select[*tuple[Any, ...]]")


def _matching(q: _Q, *pairs: tuple[Any, Any]) -> _Q:
    """``q`` kept to the rows where each ``(column, value)`` holds; a None value does not filter."""
    for column, value in pairs:
        if value is not None:
            q = q.where(column == value)
    return q


def _iso(v: dt.datetime | None) -> str | None:
    return None if v is None else v.isoformat()


def _age_s(v: dt.datetime | None, now: dt.datetime) -> float | None:
    return None if v is None else round((now - v).total_seconds(), 1)


# -- sources and runs -------------------------------------------------------------


def source_lag(reg: Registry, kb: str | None = None) -> list[dict[str, Any]]:
    """Per source: scheduling inputs and seconds since its last successful sync (never synced first)."""
    now = dt.datetime.now(dt.UTC)
    last_ok = (select(SyncRun.source_id, func.max(SyncRun.finished_at).label("last_ok"))
               .where(SyncRun.status.in_(OK_STATUSES)).group_by(SyncRun.source_id).subquery())
    q = (select(Source.id, Source.kb, Source.enabled, Source.poll_interval_s, last_ok.c.last_ok)
         .outerjoin(last_ok, last_ok.c.source_id == Source.id).order_by(Source.id))
    if kb is not None:
        q = q.where(Source.kb == kb)
    with reg.session() as s:
        rows = [{"source": r.id, "kb": r.kb, "enabled": bool(r.enabled), "poll_interval_s": r.poll_interval_s,
                 "last_ok": _iso(r.last_ok), "lag_s": _age_s(r.last_ok, now)} for r in s.execute(q)]
    return sorted(rows, key=lambda r: (r["lag_s"] is not None, -(r["lag_s"] or 0)))


def sync_runs(reg: Registry, *, source: str | None = None, kb: str | None = None, status: str | None = None,
              limit: int = 20) -> list[dict[str, Any]]:
    """The one run listing: newest first, each run as :meth:`SyncRunInfo.as_dict` with ``docs_done``
    (documents with a result, deletions excluded) counted for running ones.

    Raises NotFoundError when ``source`` names no source (a removed one still has its runs).
    """
    now = dt.datetime.now(dt.UTC)
    q = _matching(select(SyncRun).order_by(SyncRun.id.desc()).limit(limit),
                  (SyncRun.source_id, source), (SyncRun.kb, kb), (SyncRun.status, status))
    with reg.session() as s:
        if source is not None and s.get(Source, source) is None:
            raise NotFoundError(f"no source {source!r} (see `freshindex sources list`)")
        runs = list(s.scalars(q))
        running = [r.id for r in runs if r.status == RunStatus.RUNNING]
        done: dict[int, int] = {}
        if running:
            done = dict(s.execute(
                select(DocumentResult.sync_run_id, func.count())
                .where(DocumentResult.sync_run_id.in_(running), DocumentResult.outcome != DocumentOutcomeKind.DELETED)
                .group_by(DocumentResult.sync_run_id)).all())
        return [_run_info(r).as_dict(now=now, docs_done=done.get(r.id, 0) if r.status == RunStatus.RUNNING else None)
                for r in runs]


def sync_run(reg: Registry, run_id: int) -> dict[str, Any]:
    """One run as :meth:`SyncRunInfo.as_dict`, with ``docs_done``, its per-outcome document counts
    (``outcomes``) and its whole summary."""
    with reg.session() as s:
        r = s.get(SyncRun, run_id)
        if r is None:
            raise NotFoundError(f"no sync run {run_id}")
        outcomes = dict(s.execute(select(DocumentResult.outcome, func.count())
                                  .where(DocumentResult.sync_run_id == run_id)
                                  .group_by(DocumentResult.outcome)).all())
        out = _run_info(r).as_dict(docs_done=sum(n for o, n in outcomes.items() if o != DocumentOutcomeKind.DELETED))
        out["outcomes"] = outcomes
        out["summary"] = dict(r.summary or {})
        return out


# -- documents -----------------------------------------------------------------------


def _doc_dict(d: Document, kb: str) -> dict[str, Any]:
    return {"kb": kb, "source": d.source_id, "key": d.key, "id": d.id, "state": d.state, "version": d.version,
            "chunk_count": d.chunk_count, "error_reason": d.error_reason, "error_detail": d.error_detail,
            "etag": d.etag, "updated_at": _iso(d.updated_at), "deleted_at": _iso(d.deleted_at)}


def documents(reg: Registry, *, kb: str | None = None, source: str | None = None, key: str | None = None,
              state: str | None = None, reason: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Documents filtered by knowledge base, source, exact key, state and error reason."""
    q = (select(Document, Source.kb).join(Source, Source.id == Document.source_id)
         .order_by(Document.source_id, Document.key).limit(limit))
    q = _matching(q, (Source.kb, kb), (Document.source_id, source), (Document.key, key), (Document.state, state),
                  (Document.error_reason, reason))
    with reg.session() as s:
        return [_doc_dict(d, k) for d, k in s.execute(q)]


def documents_in_error(reg: Registry, *, kb: str | None = None, source: str | None = None) -> list[dict[str, Any]]:
    """What ``freshindex_documents_in_error`` counts, split by source and state (``active``: an older version
    still serves; ``error``: never indexed)."""
    q = (select(Source.kb, Document.source_id, Document.error_reason, Document.state, func.count(),
                func.max(Document.updated_at))
         .join(Source, Source.id == Document.source_id)
         .where(Document.error_reason.is_not(None), Document.state != DocumentState.SKIPPED)  # skips are no errors
         .group_by(Source.kb, Document.source_id, Document.error_reason, Document.state))
    q = _matching(q, (Source.kb, kb), (Document.source_id, source))
    with reg.session() as s:
        rows = [{"kb": k, "source": src, "reason": reason, "state": st, "documents": n, "last_updated": _iso(last)}
                for k, src, reason, st, n, last in s.execute(q)]
    return sorted(rows, key=lambda r: -r["documents"])


def recent_failures(reg: Registry, *, since_s: float = 3600, source: str | None = None) -> list[dict[str, Any]]:
    """Failed document results of the last ``since_s`` seconds, per source, run and reason."""
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=since_s)
    q = (select(SyncRun.source_id, DocumentResult.sync_run_id, DocumentResult.error_reason, func.count(),
                func.max(DocumentResult.at))
         .join(SyncRun, SyncRun.id == DocumentResult.sync_run_id)
         .where(DocumentResult.outcome == DocumentOutcomeKind.FAILED, DocumentResult.at > cutoff)
         .group_by(SyncRun.source_id, DocumentResult.sync_run_id, DocumentResult.error_reason))
    if source is not None:
        q = q.where(SyncRun.source_id == source)
    with reg.session() as s:
        rows = [{"source": src, "run": run, "reason": reason, "documents": n, "last_seen": _iso(last)}
                for src, run, reason, n, last in s.execute(q)]
    return sorted(rows, key=lambda r: -r["documents"])


def forget_etags(reg: Registry, source: str, *, reason: str | None = None, keys: tuple[str, ...] = (),
                 dry_run: bool = False) -> list[str]:
    """Clear the stored etag of a source's documents so that its next sync fetches and compares them again.

    Selects documents by error ``reason`` and/or exact ``keys`` (at least
    one is required: clearing a whole source is a full re-read and should be
    asked for by name). Returns the keys affected. It changes nothing that is
    served: the next sync decides, by content hash, what is really new.
    """
    if reason is None and not keys:
        raise ValueError("give an error reason or at least one key")
    reg.get_source(source)  # NotFoundError for an unknown source
    cond = [Document.source_id == source]
    if reason is not None:
        cond.append(Document.error_reason == reason)
    if keys:
        cond.append(Document.key.in_(keys))
    with reg.session() as s:
        found = sorted(s.scalars(select(Document.key).where(and_(*cond))))
        if found and not dry_run:
            s.execute(update(Document).where(and_(*cond)).values(etag=None))
        return found


# -- changesets, tombstones, snapshots, locks ---------------------------------------------


def changesets(reg: Registry, *, kb: str | None = None,
               statuses: tuple[str, ...] = (ChangesetStatus.OPEN, ChangesetStatus.STAGED),
               key: str | None = None) -> list[dict[str, Any]]:
    """Changesets with their upsert and delete counts; ``key`` counts only entries of that document."""
    q = (select(Changeset.id, Changeset.kb, Changeset.source_id, Changeset.sync_run_id, Changeset.status,
                Changeset.created_at, Changeset.staged_at, ChangesetEntry.op, func.count(ChangesetEntry.chunk_id))
         .outerjoin(ChangesetEntry, ChangesetEntry.changeset_id == Changeset.id)
         .group_by(Changeset.id, Changeset.kb, Changeset.source_id, Changeset.sync_run_id, Changeset.status,
                   Changeset.created_at, Changeset.staged_at, ChangesetEntry.op)
         .order_by(Changeset.id))
    if kb is not None:
        q = q.where(Changeset.kb == kb)
    if statuses:
        q = q.where(Changeset.status.in_(statuses))
    if key is not None:
        q = q.join(Document, Document.id == ChangesetEntry.document_id).where(Document.key == key)
    out: dict[int, dict[str, Any]] = {}
    with reg.session() as s:
        for cid, ckb, src, run, status, created, staged, op, n in s.execute(q):
            row = out.setdefault(cid, {"id": cid, "kb": ckb, "source": src, "run": run, "status": status,
                                       "created_at": _iso(created), "staged_at": _iso(staged),
                                       "upserts": 0, "deletes": 0})
            if op == "upsert":
                row["upserts"] += n
            elif op == "delete":
                row["deletes"] += n
    return list(out.values())


def pending_tombstones(reg: Registry, *, kb: str | None = None) -> list[dict[str, Any]]:
    """Tombstones no serving snapshot has applied yet, per changeset (and its status) and reason, oldest first.

    ``changeset_status`` None means the changeset row is gone: the registry is
    inconsistent and the rows are evidence for an issue.
    """
    q = (select(Tombstone.kb, Tombstone.changeset_id, Changeset.status, Changeset.source_id, Changeset.sync_run_id,
                Tombstone.reason, func.count(), func.min(Tombstone.created_at))
         .outerjoin(Changeset, Changeset.id == Tombstone.changeset_id)
         .where(Tombstone.applied_snapshot_id.is_(None))
         .group_by(Tombstone.kb, Tombstone.changeset_id, Changeset.status, Changeset.source_id,
                   Changeset.sync_run_id, Tombstone.reason))
    if kb is not None:
        q = q.where(Tombstone.kb == kb)
    with reg.session() as s:
        rows = [{"kb": k, "changeset_id": cid, "changeset_status": st, "source": src, "run": run, "reason": reason,
                 "tombstones": n, "oldest": _iso(oldest)} for k, cid, st, src, run, reason, n, oldest in s.execute(q)]
    return sorted(rows, key=lambda r: r["oldest"] or "")


def held_builds(reg: Registry, *, kb: str | None = None, limit: int = 20) -> dict[str, Any]:
    """Failed (held) snapshots, newest first, with the failed check and its numbers, and their count per
    (kb, check): what ``freshindex_held_builds_total`` exports."""
    q = select(Snapshot).where(Snapshot.status == SnapshotStatus.FAILED).order_by(Snapshot.created_at.desc(),
                                                                      Snapshot.version.desc())
    if kb is not None:
        q = q.where(Snapshot.kb == kb)
    counts: dict[tuple[str, str], dict[str, Any]] = {}
    recent: list[dict[str, Any]] = []
    with reg.session() as s:
        for snap in s.scalars(q):
            v = snap.verification or {}
            check = v.get("failed_check") or "error"
            c = counts.setdefault((snap.kb, check), {"kb": snap.kb, "check": check, "held_builds": 0,
                                                     "last_held": _iso(snap.created_at)})
            c["held_builds"] += 1
            if len(recent) < limit:
                recent.append({"id": snap.id, "kb": snap.kb, "strategy": snap.strategy, "check": check,
                               "upserts": snap.upserts, "deletes": snap.deletes,
                               "point_count": v.get("point_count"), "expected_count": v.get("expected_count"),
                               "created_at": _iso(snap.created_at), "failure_reason": snap.failure_reason})
    return {"by_check": sorted(counts.values(), key=lambda c: c["last_held"] or "", reverse=True),
            "recent": recent}


def knowledge_bases(reg: Registry) -> list[dict[str, Any]]:
    """Every knowledge base the registry knows (from sources or snapshots), with its sources and snapshots."""
    with reg.session() as s:
        sources: dict[str, list[str]] = {}
        for sid, kb in s.execute(select(Source.id, Source.kb).order_by(Source.id)):
            sources.setdefault(kb, []).append(sid)
        snaps = dict(s.execute(select(Snapshot.kb, func.count()).group_by(Snapshot.kb)).all())
    return [{"kb": kb, "sources": sources.get(kb, []), "snapshots": snaps.get(kb, 0)}
            for kb in sorted(set(sources) | set(snaps))]


def locks(reg: Registry, name: str | None = None) -> list[dict[str, Any]]:
    """Leases (``build:KB``: one builder per knowledge base) with their holder and whether they are held now."""
    now = time.time()
    q = select(Lock).order_by(Lock.name)
    if name is not None:
        q = q.where(Lock.name == name)
    with reg.session() as s:
        return [{"name": r.name, "owner": r.owner, "token": r.token,
                 "expires_at": _iso(dt.datetime.fromtimestamp(r.expires_at, dt.UTC)) if r.expires_at else None,
                 "held": bool(r.owner) and r.expires_at > now,
                 "expires_in_s": round(r.expires_at - now, 1) if r.owner and r.expires_at > now else None}
                for r in s.scalars(q)]
