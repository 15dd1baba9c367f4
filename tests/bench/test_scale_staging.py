"""The scale benchmark's bulk staging writes the rows the registry's own staging writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from bench.scale import HashedEmbedder, bulk_stage
from bench.snapshots import stage_docs
from freshindex.registry.schema import ChangesetEntry, Chunk, Document, DocumentResult, Embedding
from freshindex.services import Services
from freshindex.settings import load_settings

#: Columns whose values differ between two stagings by nature (clocks, random vectors).
_VOLATILE = {"created_at", "updated_at", "first_seen_at", "at", "vector", "seconds"}


def _rows(svc: Services, table: Any) -> list[dict[str, Any]]:
    with svc.registry.engine.connect() as conn:
        out = [{k: v for k, v in r._mapping.items() if k not in _VOLATILE} for r in conn.execute(select(table))]
    return sorted(out, key=lambda r: sorted((k, str(v)) for k, v in r.items()))


def _staged(tmp_path: Path, name: str, bulk: bool) -> Services:
    svc = Services(load_settings(data_dir=tmp_path / name), embedder=HashedEmbedder(16))  # type: ignore[arg-type]
    source = svc.registry.add_source("bench", kind="folder", location=str(tmp_path), owner="bench", kb="bench")
    run, cs = svc.registry.start_sync_run(source.id, "bench")
    if bulk:
        bulk_stage(svc, source, range(7), run, cs, batch=3)
    else:
        stage_docs(svc, range(7), 0, run, cs, source)
    svc.registry.set_run_planned(run, listed=7, planned=7)
    svc.registry.finish_sync_run(run)
    return svc


def test_bulk_staging_writes_the_rows_stage_document_writes(tmp_path: Path) -> None:
    # Given seven documents staged once per document and once in bulk
    slow, fast = _staged(tmp_path, "slow", bulk=False), _staged(tmp_path, "fast", bulk=True)
    try:
        # Then every registry row agrees but for clocks and the random vectors
        for table in (Document, Chunk, ChangesetEntry, DocumentResult):
            assert _rows(fast, table) == _rows(slow, table), table.__tablename__
        assert len(_rows(fast, Chunk)) == 70
        fast_vectors = fast.registry.cached_vectors("bench-hashed-16", [r["content_hash"] for r in _rows(fast, Embedding)])
        assert len(fast_vectors) == 70 and all(v.shape == (16,) for v in fast_vectors.values())
        # And both build into a version of the same 70 points
        built = [svc.builder.build("bench", reason="test") for svc in (slow, fast)]
        assert [(b.status, b.point_count) for b in built] == [("built", 70), ("built", 70)]
        assert sorted(slow.store.iter_ids(slow.naming.collection(built[0].snapshot_id))) == sorted(
            fast.store.iter_ids(fast.naming.collection(built[1].snapshot_id)))
    finally:
        slow.close()
        fast.close()
