"""Golden sets registered per knowledge base: their text, gates and k, and the newest evaluation of each.

A registered set is run after each swap of its knowledge base (the scheduled evaluation,
``freshindex/eval_schedule.py``); its newest result is kept on its row, which is what
``freshindex golden-sets list`` shows and what ``serve`` exports as ``freshindex_eval_*``.  A set is *due*
when its knowledge base serves a snapshot it has not been evaluated on (:meth:`GoldenSetStore.due_golden_sets`).

What it does not do: parse or check a set's questions (the caller does, with ``evaluation.parse_golden``,
before registering), keep a history of results (only the newest), or evaluate anything.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select

from freshindex.core.enums import SnapshotStatus
from freshindex.core.errors import ConfigError, NotFoundError
from freshindex.registry.base import _Base
from freshindex.registry.schema import GoldenSetRow, Snapshot, utcnow

#: A set's name is a metric label (``golden``): short, plain characters.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
#: The largest JSONL text a set may hold (the registry keeps it whole; every worker reads it).
MAX_CONTENT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class GoldenSetInfo:
    """A registered golden set and its newest evaluation (``last_*`` None before the first)."""

    id: int
    kb: str
    name: str
    content: str
    thresholds: dict[str, float]
    top_k: int
    updated_at: dt.datetime
    last_snapshot_id: str | None = None
    last_run_at: dt.datetime | None = None
    last_passed: bool | None = None
    last_metrics: dict[str, Any] | None = None
    last_error: str | None = None

    def as_dict(self, *, content: bool = False) -> dict[str, Any]:
        """The row as JSON-ready values; the set's text only with ``content`` (it may be long)."""
        out: dict[str, Any] = {
            "id": self.id, "kb": self.kb, "name": self.name, "thresholds": self.thresholds, "top_k": self.top_k,
            "questions": sum(1 for line in self.content.splitlines() if '"question"' in line),
            "updated_at": self.updated_at.isoformat(), "last_snapshot_id": self.last_snapshot_id,
            "last_run_at": self.last_run_at.isoformat() if self.last_run_at else None,
            "last_passed": self.last_passed, "last_metrics": self.last_metrics, "last_error": self.last_error}
        if content:
            out["content"] = self.content
        return out


def _info(r: GoldenSetRow) -> GoldenSetInfo:
    return GoldenSetInfo(r.id, r.kb, r.name, r.content, dict(r.thresholds or {}), r.top_k, r.updated_at,
                         r.last_snapshot_id, r.last_run_at, r.last_passed,
                         dict(r.last_metrics) if r.last_metrics is not None else None, r.last_error)


class GoldenSetStore(_Base):
    """Register, list, remove golden sets; record and read their newest evaluation."""

    def register_golden_set(self, kb: str, name: str, content: str, *, thresholds: Mapping[str, float] | None = None,
                            top_k: int = 5) -> GoldenSetInfo:
        """Add ``name`` to ``kb``, or replace its text, gates and k; a changed set is due again (its result cleared).

        ConfigError for a name that is not a plain label, an empty or oversized text, or k outside 1..50.
        """
        if not NAME_PATTERN.fullmatch(name):
            raise ConfigError(f"golden set name {name!r}: letters, digits, '.', '_', '-', at most 63, "
                              "starting with a letter or digit")
        if not content.strip() or len(content.encode("utf-8")) > MAX_CONTENT_BYTES:
            raise ConfigError(f"golden set {name!r}: the text must be non-empty and at most {MAX_CONTENT_BYTES} bytes")
        if not 1 <= top_k <= 50:
            raise ConfigError(f"golden set {name!r}: k must be in 1..50, not {top_k}")
        gates = {k: float(v) for k, v in (thresholds or {}).items()}
        with self.session() as s:
            row = s.scalars(select(GoldenSetRow).where(GoldenSetRow.kb == kb, GoldenSetRow.name == name)).first()
            if row is None:
                row = GoldenSetRow(kb=kb, name=name, created_at=utcnow())
                s.add(row)
            elif (row.content, dict(row.thresholds or {}), row.top_k) != (content, gates, top_k):
                row.last_snapshot_id = row.last_run_at = row.last_passed = row.last_metrics = row.last_error = None
            row.content, row.thresholds, row.top_k, row.updated_at = content, gates, top_k, utcnow()
            s.flush()
            return _info(row)

    def list_golden_sets(self, kb: str | None = None) -> list[GoldenSetInfo]:
        """Every registered set (of ``kb``), by knowledge base and name."""
        with self.session() as s:
            q = select(GoldenSetRow).order_by(GoldenSetRow.kb, GoldenSetRow.name)
            if kb is not None:
                q = q.where(GoldenSetRow.kb == kb)
            return [_info(r) for r in s.scalars(q)]

    def remove_golden_set(self, kb: str, name: str) -> None:
        """Forget ``name`` of ``kb`` and its result (NotFoundError when there is none)."""
        with self.session() as s:
            gone = s.execute(delete(GoldenSetRow).where(GoldenSetRow.kb == kb, GoldenSetRow.name == name))
            if not getattr(gone, "rowcount", 0):
                raise NotFoundError(f"no golden set {name!r} on knowledge base {kb!r}")

    def golden_results(self) -> list[dict[str, Any]]:
        """Each set's newest result (kb, name, last_*; no text): what ``serve`` exports at each scrape."""
        cols = (GoldenSetRow.kb, GoldenSetRow.name, GoldenSetRow.last_snapshot_id, GoldenSetRow.last_run_at,
                GoldenSetRow.last_passed, GoldenSetRow.last_metrics)
        with self.session() as s:
            return [{"kb": kb, "name": name, "last_snapshot_id": sid,
                     "last_run_at": at.isoformat() if isinstance(at, dt.datetime) else None,
                     "last_passed": passed, "last_metrics": metrics}
                    for kb, name, sid, at, passed, metrics in s.execute(select(*cols).order_by(*cols[:2]))]

    def due_golden_sets(self, kb: str | None = None) -> list[tuple[GoldenSetInfo, str]]:
        """(set, active snapshot id) for each set whose knowledge base serves a snapshot it was not evaluated on.

        A knowledge base that serves nothing yet has no due set.
        """
        with self.session() as s:
            q = (select(GoldenSetRow, Snapshot.id)
                 .join(Snapshot, (Snapshot.kb == GoldenSetRow.kb) & (Snapshot.status == SnapshotStatus.ACTIVE))
                 .order_by(GoldenSetRow.kb, GoldenSetRow.name))
            if kb is not None:
                q = q.where(GoldenSetRow.kb == kb)
            return [(_info(row), str(sid)) for row, sid in s.execute(q)
                    if row.last_snapshot_id is None or row.last_snapshot_id != sid]

    def record_golden_result(self, set_id: int, snapshot_id: str | None, *, passed: bool | None,
                             metrics: Mapping[str, Any] | None, error: str | None = None,
                             at: dt.datetime | None = None) -> None:
        """Keep one evaluation of set ``set_id`` as its newest (a set removed meanwhile is left removed)."""
        with self.session() as s:
            row = s.get(GoldenSetRow, set_id)
            if row is None:
                return
            row.last_snapshot_id, row.last_run_at = snapshot_id, at or utcnow()
            row.last_passed = passed
            row.last_metrics = dict(metrics) if metrics is not None else None
            row.last_error = error[:2000] if error else None


__all__ = ["MAX_CONTENT_BYTES", "NAME_PATTERN", "GoldenSetInfo", "GoldenSetStore"]
