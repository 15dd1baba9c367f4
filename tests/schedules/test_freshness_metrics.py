"""Freshness on /metrics: per-source lag and time since the last success, stale counts, reconcile orphans.

Real parts: a SQLite registry, Qdrant Edge, folder sources synced inline;
values are read from the Prometheus exposition the process serves.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from freshindex.core.errors import SourceError
from freshindex.registry.schema import Chunk
from freshindex.schedules.reconcile import reconcile
from freshindex.services import Services
from freshindex.workers.runner import sync_inline


def _folder(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    kb = tmp_path / name
    kb.mkdir()
    for key, text in files.items():
        (kb / key).write_text(text)
    return kb


def _value(svc: Services, name: str, **labels: str) -> float | None:
    svc.metrics.render()  # a scrape, as /metrics does
    return svc.metrics.registry.get_sample_value(name, labels)


def test_per_source_freshness_gauges_and_stale_count(svc: Services, tmp_path: Path) -> None:
    # Given two synced sources
    for name in ("docs", "wiki"):
        kb = _folder(tmp_path, name, {"a.md": f"# {name}\n\nText of {name}.\n"})
        svc.registry.add_source(name, kind="folder", location=str(kb), owner="t", kb="default")
        sync_inline(svc, name)
    # Then each has a lag since verified and since its last success, and none is stale
    for name in ("docs", "wiki"):
        lag = _value(svc, "freshindex_source_freshness_lag_seconds", kb="default", source=name)
        since = _value(svc, "freshindex_source_seconds_since_last_success", kb="default", source=name)
        assert lag is not None and 0 <= lag < 3600
        assert since is not None and 0 <= since < 3600
    assert _value(svc, "freshindex_stale_sources", kb="default", reason="unreachable") == 0
    # When one becomes unreachable, Then it is counted stale (unreachable) and keeps its last-success age
    shutil.move(tmp_path / "wiki", tmp_path / "gone")
    with pytest.raises(SourceError):
        sync_inline(svc, "wiki")
    assert _value(svc, "freshindex_stale_sources", kb="default", reason="unreachable") == 1
    assert _value(svc, "freshindex_source_seconds_since_last_success", kb="default", source="wiki") is not None
    # When it is removed, Then it has no series and is not counted
    svc.registry.remove_source("wiki")
    assert _value(svc, "freshindex_stale_sources", kb="default", reason="unreachable") == 0
    assert _value(svc, "freshindex_source_freshness_lag_seconds", kb="default", source="wiki") is None
    assert b'freshindex_source_freshness_lag_seconds{kb="default",source="docs"}' in svc.metrics.render()


def test_reconciliation_counts_the_orphans_it_finds(svc: Services, tmp_path: Path) -> None:
    kb = _folder(tmp_path, "docs", {"a.md": "# A\n\nalpha plum1.\n", "b.md": "# B\n\nbeta plum2.\n"})
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    docs = {d.key: d.id for d in svc.registry.documents_for_source("docs").values()}
    a_chunk = sorted(svc.registry.live_chunk_ids(docs["a.md"]))[0]
    b_chunk = sorted(svc.registry.live_chunk_ids(docs["b.md"]))[0]

    def ids(kb_: str) -> list[str]:
        return [i for i in svc.store.iter_ids(svc.registry.active_snapshot(kb_).collection) if i != b_chunk]

    # Given an index orphan (its registry row no longer live) and a registry orphan (missing from the index)
    with svc.registry.session() as s:
        s.get(Chunk, a_chunk).state = "removed"
    # When reconciliation runs with the process's metrics
    report = reconcile(svc.registry, point_ids=ids, locked=svc.builder.lock, metrics=svc.metrics)["default"]
    # Then both are counted by direction
    assert (report["index_orphans"], report["registry_orphans"]) == (1, 1)
    assert _value(svc, "freshindex_reconcile_orphans_total", kb="default", direction="index") == 1
    assert _value(svc, "freshindex_reconcile_orphans_total", kb="default", direction="registry") == 1
