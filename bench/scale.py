"""Scale benchmark: a 0.1 % change built by copy and by blue/green against a full build.

A synthetic knowledge base of N chunks (10 per document, hashed random unit
vectors put in the vector cache, no model) is staged in bulk
(:func:`bulk_stage`: the rows ``stage_document`` writes, one ``executemany``
per table; 100k chunks in about 14 s instead of 13 minutes, the staged
registry cached in ``~/.cache/freshindex-bench/``), its changes through
``stage_document`` as a sync task writes them, and built by the real
:class:`snapshots.Builder` into Qdrant Edge with ``keep_versions = 2``:

1. v1: the full build;
2. v2: a 0.1 % change (N/1000 chunks, both ways: old chunks deleted, new ones
   added) built by *copy* (the ring of two is not full yet: what every
   incremental build cost before blue/green);
3. v3: another 0.1 % change built *bluegreen*: v1's collection is recycled
   and brought up to date by replaying v2's and v3's changes.

Per build: wall time, bytes this process wrote to storage (``write_bytes`` of
``/proc/self/io``: the Edge shard and the SQLite registry) and the growth of
the store's disk usage, and the time between the builder's phase marks;
per retained version: the disk its collection holds and what it costs in
registry deltas (:func:`version_delta`).

    python -m bench.scale [--points 100000 1000000] [--dim 384] [--no-cache]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import insert

from bench.report import table, write
from bench.snapshots import _sync, _text, du
from freshindex.core.enums import ChunkState, DocumentState
from freshindex.core.ids import chunk_point_id, document_id, sha256_hex
from freshindex.registry.schema import ChangesetEntry, Chunk, Document, DocumentResult, Embedding, utcnow
from freshindex.services import Services
from freshindex.settings import load_settings


class HashedEmbedder:
    """Unit vectors seeded by the text's hash; fills the cache at staging, never a model."""

    model_id = "bench-hashed"

    def __init__(self, dim: int) -> None:
        self.dimension = dim
        self.model_id = f"bench-hashed-{dim}"

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, t in enumerate(texts):
            v = np.random.default_rng(int(sha256_hex(t)[:12], 16)).normal(size=self.dimension).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        return out


def written_bytes() -> int:
    """Bytes this process caused to be written to storage so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def bulk_stage(svc: Services, source: Any, docs: range, run_id: int, cs_id: int, *, batch: int = 2000) -> None:
    """Stage ``docs`` (first revision) as :func:`bench.snapshots.stage_docs` does, in bulk.

    The same rows ``Registry.stage_document`` writes for a new document (the
    document, its ``pending`` chunks, one upsert entry each, the run's
    document result) and one cached vector per chunk, but inserted with one
    ``executemany`` per table and batch instead of a transaction per
    document (``tests/bench/test_scale_staging.py`` checks the rows are the
    same).  Vectors are random unit vectors drawn a block at a time: the
    cache is keyed by content hash, so no embedder ever runs.  Only for a
    source with no documents yet: nothing is diffed.
    """
    model, dim = svc.embedder.model_id, svc.embedder.dimension
    rng = np.random.default_rng(len(docs))
    with svc.registry.engine.begin() as conn:
        for lo in range(docs.start, docs.stop, batch):
            now = utcnow()
            d_rows, c_rows, e_rows, r_rows, v_rows = [], [], [], [], []
            block = range(lo, min(lo + batch, docs.stop))
            vectors = rng.standard_normal((len(block) * 10, dim), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            for j, d in enumerate(block):
                key = f"doc-{d}.md"
                doc = document_id(source.id, key)
                d_rows.append(dict(id=doc, source_id=source.id, key=key, etag="0", size=1,
                                   content_hash=sha256_hex(str(d), "0"), state=DocumentState.ACTIVE, parser="bench",
                                   parser_version="bench", title=f"doc {d}", version=1, chunk_count=10,
                                   first_seen_at=now, updated_at=now))
                r_rows.append(dict(sync_run_id=run_id, document_id=doc, key=key, outcome="modified", at=now))
                for n in range(10):
                    text = _text(d, n, 0)
                    h = sha256_hex(text)
                    cid = chunk_point_id(doc, ("S", str(n)), h)
                    c_rows.append(dict(id=cid, document_id=doc, source_id=source.id, kb=source.kb, ordinal=n,
                                       content_hash=h, text=text, kind="paragraph", heading_path=["S"],
                                       anchor=f"p{n}", page=None, meta={}, doc_version=1, state=ChunkState.PENDING,
                                       tombstoned=False, added_changeset_id=cs_id, created_at=now, updated_at=now))
                    e_rows.append(dict(changeset_id=cs_id, chunk_id=cid, document_id=doc, op="upsert"))
                    v_rows.append(dict(model_id=model, content_hash=h, dim=dim,
                                       vector=vectors[j * 10 + n].tobytes(), created_at=now))
            for table_, rows in ((Document, d_rows), (Chunk, c_rows), (ChangesetEntry, e_rows),
                                 (DocumentResult, r_rows), (Embedding, v_rows)):
                conn.execute(insert(table_), rows)


def _build(svc: Services, root: Path, **kw: Any) -> dict[str, Any]:
    os.sync()
    disk0, io0 = du(root), written_bytes()
    marks: list[tuple[str, float]] = []
    svc.builder.on_phase = lambda name: marks.append((name, time.perf_counter()))
    t0 = time.perf_counter()
    result = svc.builder.build("bench", **kw)
    seconds = time.perf_counter() - t0
    svc.builder.on_phase = None
    # Seconds from each phase mark to the next (the first from the call, the last to the return).
    phases: dict[str, float] = {}
    for (name, at), nxt in zip([("start", t0), *marks], [*(m[1] for m in marks), t0 + seconds], strict=True):
        phases[name] = round(phases.get(name, 0.0) + nxt - at, 3)
    svc.store.release()
    os.sync()
    assert result.status == "built", result
    return {"snapshot": result.snapshot_id, "strategy": result.strategy, "seconds": round(seconds, 3),
            "bytes_written": written_bytes() - io0, "disk_growth_bytes": du(root) - disk0,
            "points": result.point_count, "upserts": result.upserts, "deletes": result.deletes,
            "replayed": result.verification.get("replayed", 0), "phases": phases}


def version_delta(svc: Services, snapshot_id: str) -> dict[str, Any]:
    """What retaining ``snapshot_id`` costs in the registry: rows and payload bytes, by kind.

    * ``entries``, ``tombstones``: the version's changeset entries and
      tombstones (what a replay or a rollback across it reads);
    * ``superseded_chunks``, ``superseded_vectors``: the chunk rows it removed
      and their cached vectors, kept (state ``removed``) so that going back
      to the version before it rewrites them without re-embedding;
    * ``new_chunks``, ``new_vectors``: the content it added (the live corpus's
      cost, not retention's).

    Payload bytes (``length()`` of each column, 8 per number); SQLite's page
    and index overhead is not counted (``registry_bytes`` / chunk includes it).
    """
    snap = svc.registry.get_snapshot(snapshot_id)
    ids = ", ".join(str(int(c)) for c in snap.changeset_ids) or "NULL"
    removed = f"SELECT chunk_id FROM changeset_entries WHERE changeset_id IN ({ids}) AND op = 'delete'"
    chunk_bytes = ("length(id) + length(document_id) + length(source_id) + length(kb) + length(content_hash) "
                   "+ length(text) + length(kind) + length(anchor) + length(heading_path) + length(meta) + 48")
    queries = {
        "entries": f"SELECT count(*), sum(length(chunk_id) + length(document_id) + length(op) + 8) "
                   f"FROM changeset_entries WHERE changeset_id IN ({ids})",
        "tombstones": f"SELECT count(*), sum(length(chunk_id) + length(document_id) + length(kb) + length(reason) + 24 "
                      f"+ coalesce(length(applied_snapshot_id), 0)) FROM tombstones WHERE changeset_id IN ({ids})",
        "superseded_chunks": f"SELECT count(*), sum({chunk_bytes}) FROM chunks WHERE id IN ({removed})",
        "superseded_vectors": f"SELECT count(*), sum(length(vector) + length(content_hash) + length(model_id) + 16) "
                              f"FROM embeddings WHERE content_hash IN (SELECT content_hash FROM chunks "
                              f"WHERE id IN ({removed}))",
        "new_chunks": f"SELECT count(*), sum({chunk_bytes}) FROM chunks WHERE added_changeset_id IN ({ids})",
        "new_vectors": f"SELECT count(*), sum(length(vector) + length(content_hash) + length(model_id) + 16) "
                       f"FROM embeddings WHERE content_hash IN (SELECT content_hash FROM chunks "
                       f"WHERE added_changeset_id IN ({ids}))",
    }
    out: dict[str, Any] = {}
    with svc.registry.engine.connect() as conn:
        for name, sql in queries.items():
            rows, size = conn.exec_driver_sql(sql).one()
            out[name] = {"rows": int(rows or 0), "bytes": int(size or 0)}
    kinds = ("entries", "tombstones", "superseded_chunks", "superseded_vectors")
    out["retention_bytes"] = sum(out[k]["bytes"] for k in kinds)
    return out


#: Staged registries (before any build), reused by the next run with the same size and schema.
CACHE = Path.home() / ".cache" / "freshindex-bench"


def _staged_base(settings: Any, work: Path, points: int, dim: int, use_cache: bool) -> tuple[Services, Any, bool]:
    """Services over a registry holding the staged, never built base of ``points`` chunks.

    Copied from :data:`CACHE` when an earlier run left one for this size,
    dimension and schema revision; otherwise staged by :func:`bulk_stage`
    and then saved there (a 1M-chunk registry is about 3 GB)."""
    from freshindex.registry import db

    cache = CACHE / f"scale-base-{points}-{dim}-{db.head_revision()}.db"
    registry_file = settings.data_dir / "registry.db"
    cached = use_cache and cache.exists()
    if cached:
        registry_file.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cache, registry_file)
    svc = Services(settings, embedder=HashedEmbedder(dim))  # type: ignore[arg-type]
    if cached:
        return svc, svc.registry.list_sources("bench")[0], True
    source = svc.registry.add_source("bench", kind="folder", location=str(work), owner="bench", kb="bench")
    docs = points // 10
    run, cs = svc.registry.start_sync_run(source.id, "bench")
    bulk_stage(svc, source, range(docs), run, cs)
    svc.registry.set_run_planned(run, listed=docs, planned=docs)
    svc.registry.finish_sync_run(run)
    if use_cache:
        svc.registry.engine.dispose()  # the last connection's close checkpoints the WAL into the file
        CACHE.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(registry_file, cache.with_suffix(".tmp"))
        cache.with_suffix(".tmp").replace(cache)
    return svc, source, False


def measure(points: int, dim: int, use_cache: bool = True) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="fi-scale-bench-"))
    try:
        settings = load_settings(data_dir=work / "data", snapshots={"strategy": "bluegreen", "keep_versions": 2,
                                                                    "reader_grace": 0})
        docs = points // 10
        t0 = time.perf_counter()
        svc, source, cached = _staged_base(settings, work, points, dim, use_cache)
        staging_s = time.perf_counter() - t0
        root = svc.settings.vector_path
        full = _build(svc, root, reason="bench full")
        step = max(1, docs // 1000)  # 0.1 % of the chunks
        _sync(svc, source, range(0, step), 1)
        copy = _build(svc, root, reason="bench 0.1 % copy")
        _sync(svc, source, range(step, 2 * step), 2)
        bluegreen = _build(svc, root, reason="bench 0.1 % bluegreen")
        assert (copy["strategy"], bluegreen["strategy"]) == ("incremental", "bluegreen"), (copy, bluegreen)
        verified = svc.snapshots.verify(bluegreen["snapshot"])
        assert verified["ok"], verified
        retained = {s.id: s for s in svc.registry.list_snapshots("bench") if s.status in ("active", "retired")}
        disk = {sid: du(root / "collections" / s.collection) for sid, s in retained.items()}
        entries = sum(s.upserts + s.deletes for s in retained.values())
        deltas = {b["snapshot"]: version_delta(svc, b["snapshot"]) for b in (copy, bluegreen)}
        standby = next(s for s in retained.values() if s.status == "retired")
        svc.close()
        registry_bytes = sum(p.stat().st_blocks * 512 for p in (work / "data").glob("*.db*"))

        def ratio(row: dict[str, Any], key: str) -> float:
            return round(row[key] / max(1, full[key]), 4)

        return {
            "points": points, "dim": dim, "changed_chunks_per_build": step * 10, "staging_s": round(staging_s, 1),
            "staging_from_cache": cached,
            "full": full, "copy": copy, "bluegreen": bluegreen,
            "ratio_time": {"copy": ratio(copy, "seconds"), "bluegreen": ratio(bluegreen, "seconds")},
            "ratio_bytes_written": {"copy": ratio(copy, "bytes_written"),
                                    "bluegreen": ratio(bluegreen, "bytes_written")},
            "disk_per_retained_version": disk,
            "disk_per_build": {"copy": copy["disk_growth_bytes"], "bluegreen": bluegreen["disk_growth_bytes"]},
            "registry_bytes": registry_bytes, "registry_bytes_per_chunk": round(registry_bytes / max(1, points)),
            "changeset_entries_of_retained_versions": entries,
            "registry_delta_per_version": deltas,
            "standby": {"snapshot": standby.id, "disk_bytes": disk[standby.id],
                        "disk_added_per_bluegreen_build": bluegreen["disk_growth_bytes"]},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, nargs="+", default=[100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--no-cache", action="store_true", help=f"stage afresh, ignoring {CACHE}")
    args = parser.parse_args()
    load = os.getloadavg()
    rows = [measure(n, args.dim, use_cache=not args.no_cache) for n in args.points]
    after = os.getloadavg()
    command = f"python -m bench.scale --points {' '.join(map(str, args.points))} --dim {args.dim}"
    write("scale", {"command": command, "load_average": {"before": load, "after": after}, "rows": rows},
          render(rows, command, f"Load average before {load[0]:.1f}, after {after[0]:.1f} on {os.cpu_count()} cores"))


def render(rows: list[dict[str, Any]], command: str, load: str) -> list[str]:
    """The Markdown report of :func:`measure` rows."""
    mb = 1e6
    lines = ["# Scale benchmark: a 0.1 % change, copy and blue/green against a full build", "",
             f"`{command}` (Qdrant Edge, SQLite registry, hashed vectors from the cache, `keep_versions = 2`). "
             f"{load}: times are noisy, the ratios come from one run each.", ""]
    lines += table(
        ["points", "full s", "copy s", "bluegreen s", "time ratio copy / bg", "full MB written",
         "copy MB written", "bluegreen MB written", "bytes ratio copy / bg", "disk per retained version MB",
         "disk added per build MB copy / bg"],
        list("rrrrrrrrrrr"),
        [[r["points"], r["full"]["seconds"], r["copy"]["seconds"], r["bluegreen"]["seconds"],
          f"{r['ratio_time']['copy']} / {r['ratio_time']['bluegreen']}",
          f"{r['full']['bytes_written'] / mb:.1f}", f"{r['copy']['bytes_written'] / mb:.1f}",
          f"{r['bluegreen']['bytes_written'] / mb:.1f}",
          f"{r['ratio_bytes_written']['copy']} / {r['ratio_bytes_written']['bluegreen']}",
          ", ".join(f"{k}: {v / mb:.1f}" for k, v in sorted(r["disk_per_retained_version"].items())),
          f"{r['disk_per_build']['copy'] / mb:.1f} / {r['disk_per_build']['bluegreen'] / mb:.1f}"]
         for r in rows],
    )
    lines += ["", "Where the time goes (seconds from each builder phase mark to the next; `locked` runs to the "
              "first write for a full build, `recycled` is the replay onto the recycled side, `optimize` the "
              "engine's optimize, `verifying` the checks, `verified` the release and alias swap, `swapped` the "
              "registry record and retention):", ""]
    lines += table(["points", "build", "seconds", "phases"], list("rlrl"),
                   [[r["points"], name, r[name]["seconds"],
                     ", ".join(f"{k} {v}" for k, v in r[name]["phases"].items() if v >= 0.01)]
                    for r in rows for name in ("full", "copy", "bluegreen")])
    kb = 1e3
    lines += ["", "Retention in deltas: what one more retained version costs in the registry (payload bytes; "
              "page and index overhead excluded), beside the standby side's fixed cost:", ""]
    lines += table(["points", "version", "changeset entries", "tombstones", "superseded chunk rows + vectors",
                    "retention KB per version", "new content KB (not retention)", "standby side MB (fixed)",
                    "standby disk added per build MB", "registry bytes per chunk"], list("rlrrrrrrrr"),
                   [[r["points"], sid, f"{d['entries']['rows']} ({d['entries']['bytes'] / kb:.1f} KB)",
                     f"{d['tombstones']['rows']} ({d['tombstones']['bytes'] / kb:.1f} KB)",
                     f"{d['superseded_chunks']['rows']} ({(d['superseded_chunks']['bytes'] + d['superseded_vectors']['bytes']) / kb:.1f} KB)",
                     f"{d['retention_bytes'] / kb:.1f}",
                     f"{(d['new_chunks']['bytes'] + d['new_vectors']['bytes']) / kb:.1f}",
                     f"{r['standby']['disk_bytes'] / mb:.1f}", f"{r['standby']['disk_added_per_bluegreen_build'] / mb:.1f}",
                     r["registry_bytes_per_chunk"]]
                    for r in rows for sid, d in r.get("registry_delta_per_version", {}).items()])
    lines += ["", "Goal (issue 14): the 0.1 % build at most 2 % of the full build's time and bytes. "
              "`copy` is what every incremental build cost before blue/green (a sparse copy of the active "
              "collection); `bluegreen` replays the two changes the recycled standby had not seen. Disk per "
              "retained version stays a full collection (two are kept); what blue/green saves is the copy per "
              "build. Older versions live as registry deltas (changeset entries, tombstones and the superseded chunk rows "
              "with their cached vectors, the table above) and archives. The base registry is staged in bulk "
              "(`bulk_stage`, the rows `stage_document` writes) and cached in `~/.cache/freshindex-bench/`; the two "
              "0.1 % changes go through `stage_document`."]
    return lines


if __name__ == "__main__":
    main()
