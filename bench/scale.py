"""Scale benchmark: a 0.1 % change built by copy and by blue/green against a full build.

A synthetic knowledge base of N chunks (10 per document, hashed random unit
vectors put in the vector cache, no model) is staged through the registry
(``stage_document``, as a sync task writes it) and built by the real
:class:`snapshots.Builder` into Qdrant Edge with ``keep_versions = 2``:

1. v1: the full build;
2. v2: a 0.1 % change (N/1000 chunks, both ways: old chunks deleted, new ones
   added) built by *copy* (the ring of two is not full yet: what every
   incremental build cost before blue/green);
3. v3: another 0.1 % change built *bluegreen*: v1's collection is recycled
   and brought up to date by replaying v2's and v3's changes.

Per build: wall time, bytes this process wrote to storage (``write_bytes`` of
``/proc/self/io``: the Edge shard and the SQLite registry) and the growth of
the store's disk usage; per retained version: the disk its collection holds.

    python -m bench.scale [--points 100000 300000] [--dim 384]
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
from freshindex.core.ids import sha256_hex
from freshindex.settings import load_settings

from bench.report import table, write
from bench.snapshots import _sync, du
from freshindex.services import Services


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


def _build(svc: Services, root: Path, **kw: Any) -> dict[str, Any]:
    os.sync()
    disk0, io0, t0 = du(root), written_bytes(), time.perf_counter()
    result = svc.builder.build("bench", **kw)
    seconds = time.perf_counter() - t0
    svc.store.release()
    os.sync()
    assert result.status == "built", result
    return {"snapshot": result.snapshot_id, "strategy": result.strategy, "seconds": round(seconds, 3),
            "bytes_written": written_bytes() - io0, "disk_growth_bytes": du(root) - disk0,
            "points": result.point_count, "upserts": result.upserts, "deletes": result.deletes,
            "replayed": result.verification.get("replayed", 0)}


def measure(points: int, dim: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="fi-scale-bench-"))
    try:
        settings = load_settings(data_dir=work / "data", snapshots={"strategy": "bluegreen", "keep_versions": 2,
                                                                    "reader_grace": 0})
        svc = Services(settings, embedder=HashedEmbedder(dim))  # type: ignore[arg-type]
        source = svc.registry.add_source("bench", kind="folder", location=str(work), owner="bench", kb="bench")
        docs = points // 10
        t0 = time.perf_counter()
        _sync(svc, source, range(docs), 0)
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
        svc.close()
        registry_bytes = sum(p.stat().st_blocks * 512 for p in (work / "data").glob("*.db*"))

        def ratio(row: dict[str, Any], key: str) -> float:
            return round(row[key] / max(1, full[key]), 4)

        return {
            "points": points, "dim": dim, "changed_chunks_per_build": step * 10, "staging_s": round(staging_s, 1),
            "full": full, "copy": copy, "bluegreen": bluegreen,
            "ratio_time": {"copy": ratio(copy, "seconds"), "bluegreen": ratio(bluegreen, "seconds")},
            "ratio_bytes_written": {"copy": ratio(copy, "bytes_written"),
                                    "bluegreen": ratio(bluegreen, "bytes_written")},
            "disk_per_retained_version": disk,
            "disk_per_build": {"copy": copy["disk_growth_bytes"], "bluegreen": bluegreen["disk_growth_bytes"]},
            "registry_bytes": registry_bytes, "changeset_entries_of_retained_versions": entries,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, nargs="+", default=[100_000])
    parser.add_argument("--dim", type=int, default=384)
    args = parser.parse_args()
    load = os.getloadavg()
    rows = [measure(n, args.dim) for n in args.points]
    after = os.getloadavg()
    mb = 1e6
    lines = ["# Scale benchmark: a 0.1 % change, copy and blue/green against a full build", "",
             f"`python -m bench.scale --points {' '.join(map(str, args.points))} --dim {args.dim}` "
             "(Qdrant Edge, SQLite registry, hashed vectors from the cache, `keep_versions = 2`). "
             f"Load average before {load[0]:.1f}, after {after[0]:.1f} on {os.cpu_count()} cores: "
             "times are noisy, the ratios come from one run each.", ""]
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
    lines += ["", "Goal (issue 14): the 0.1 % build at most 2 % of the full build's time and bytes. "
              "`copy` is what every incremental build cost before blue/green (a sparse copy of the active "
              "collection); `bluegreen` replays the two changes the recycled standby had not seen. Disk per "
              "retained version stays a full collection (two are kept); what blue/green saves is the copy per "
              "build. Older versions live as registry deltas (changeset entries) and archives."]
    write("scale", {"command": f"python -m bench.scale --points {' '.join(map(str, args.points))} --dim {args.dim}",
                    "load_average": {"before": load, "after": after}, "rows": rows}, lines)


if __name__ == "__main__":
    main()
