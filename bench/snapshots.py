"""Snapshot benchmark: incremental build of a 1 % change against a full build,
alias swap latency, disk and memory per version.

A synthetic registry of N chunks (10 per document) is staged directly with
cached random unit vectors, so the numbers measure the builder and the store,
not the embedding model (see bench/build.py for that).

    python -m bench.snapshots [--chunks 10000 50000] [--swaps 200]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.report import table, write
from freshindex.core.ids import chunk_point_id, document_id, sha256_hex
from freshindex.core.types import ChunkDraft
from freshindex.registry import DocumentOutcome, StagedDocument
from freshindex.services import Services
from freshindex.settings import load_settings

DIM = 384


class RandomEmbedder:
    """Unit vectors from the text hash; only used if the cache misses."""

    model_id = "bench-random-384"
    dimension = DIM

    def embed(self, texts):
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            rng = np.random.default_rng(int(sha256_hex(t)[:8], 16))
            v = rng.normal(size=DIM).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        return out


def _text(doc: int, n: int, rev: int) -> str:
    return f"Document {doc} paragraph {n} revision {rev}. " + "Operational guidance text. " * 20


def stage_docs(svc: Services, docs: range, rev: int, run_id: int, cs_id: int, source) -> None:
    emb = svc.embedder
    for d in docs:
        doc = document_id(source.id, f"doc-{d}.md")
        drafts = []
        for n in range(10):
            text = _text(d, n, rev)
            h = sha256_hex(text)
            drafts.append(ChunkDraft(id=chunk_point_id(doc, ("S", str(n)), h), ordinal=n, text=text, content_hash=h,
                                     kind="paragraph", heading_path=("S",), anchor=f"p{n}"))
        vecs = emb.embed([c.text for c in drafts])
        svc.registry.cache_vectors(emb.model_id, {c.content_hash: vecs[i] for i, c in enumerate(drafts)})
        old = svc.registry.live_chunk_ids(doc)
        new = {c.id for c in drafts}
        svc.registry.stage_document(run_id, cs_id, StagedDocument(
            source=source, document_id=doc, key=f"doc-{d}.md", etag=str(rev), size=1,
            content_hash=sha256_hex(str(d), str(rev)), title=f"doc {d}", parser="bench", parser_version="bench",
            chunks=drafts, added_ids=new - old, removed_ids=old - new,
            outcome=DocumentOutcome(document_id=doc, key=f"doc-{d}.md", outcome="modified"),
        ))


def _sync(svc: Services, source, docs: range, rev: int) -> None:
    run, cs = svc.registry.start_sync_run(source.id, "bench")
    stage_docs(svc, docs, rev, run, cs, source)
    svc.registry.set_run_planned(run, listed=len(docs), planned=len(docs))
    svc.registry.finish_sync_run(run)


_OPEN_PROBE = """
import re, sys, qdrant_edge as qe
def rss_kb():
    return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
base = rss_kb()
shard = qe.EdgeShard.load(sys.argv[1])
for i in range(20):
    shard.query(qe.QueryRequest(limit=5, query=qe.Query.Nearest([0.05 * (1 + i % 3)] * 384, using="dense"),
                                with_payload=True))
print(rss_kb() - base)
"""


def memory_to_serve(path: Path) -> float:
    """Resident memory (MB) a fresh process adds by opening one version and
    answering 20 queries (mapped files count once touched)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _OPEN_PROBE, str(path)], capture_output=True, text=True, check=True)
    return round(int(out.stdout.strip()) / 1024, 1)


def du(path: Path) -> int:
    """Bytes allocated on disk (edge preallocates sparse files; apparent size overstates)."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def measure(chunks: int, swaps: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="fi-snap-bench-"))
    try:
        svc = Services(load_settings(data_dir=work / "data"), embedder=RandomEmbedder())
        source = svc.registry.add_source("bench", kind="folder", location=str(work), owner="bench", kb="bench")
        n_docs = chunks // 10
        t0 = time.perf_counter()
        _sync(svc, source, range(n_docs), 0)
        stage_s = time.perf_counter() - t0
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        first = svc.builder.build("bench", reason="bench full")
        full_s = time.perf_counter() - t0
        assert first.status == "built" and first.point_count == chunks, first
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        version_dir = svc.settings.vector_path / "collections" / svc.naming.collection(first.snapshot_id)
        svc.store.release()
        version_bytes = du(version_dir)
        version_rss = memory_to_serve(version_dir)

        results = {}
        for strategy_run in range(3):
            changed = range(strategy_run * (n_docs // 100), (strategy_run + 1) * (n_docs // 100))
            _sync(svc, source, changed, strategy_run + 1)
            t0 = time.perf_counter()
            inc = svc.builder.build("bench", reason="bench 1%")
            inc_s = time.perf_counter() - t0
            assert inc.status == "built", inc
            results.setdefault(inc.strategy, []).append(inc_s)
        t0 = time.perf_counter()
        full2 = svc.builder.build("bench", reason="bench full again", full=True)
        full2_s = time.perf_counter() - t0
        assert full2.status == "built"

        # Alias swap latency: the store-level atomic swap between two existing versions.
        store, alias = svc.store, svc.naming.alias("bench")
        versions = [c for c in store.list_collections() if c.startswith(svc.naming.collection("bench-v"))][-2:]
        lat = []
        for i in range(swaps):
            t0 = time.perf_counter()
            store.swap_alias(alias, versions[i % 2])
            lat.append((time.perf_counter() - t0) * 1000)
        store.swap_alias(alias, svc.naming.collection(full2.snapshot_id))
        lat.sort()
        svc.close()
        full_med = statistics.median([full_s, full2_s])
        row = {
            "chunks": chunks,
            "staging_s": round(stage_s, 2),
            "full_build_s": round(full_med, 3),
            "incremental_1pct_s": {k: round(statistics.median(v), 3) for k, v in results.items()},
            "ratio_incremental_over_full": {k: round(statistics.median(v) / full_med, 4) for k, v in results.items()},
            "swap_ms_p50": round(lat[len(lat) // 2], 3),
            "swap_ms_p95": round(lat[int(len(lat) * 0.95) - 1], 3),
            "disk_bytes_per_version": version_bytes,
            "memory_mb_to_serve_version": version_rss,
            "rss_growth_mb_full_build": round((rss1 - rss0) / 1024, 1),
        }
        return row
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, nargs="+", default=[10000, 50000])
    parser.add_argument("--swaps", type=int, default=200)
    args = parser.parse_args()
    rows = [measure(n, args.swaps) for n in args.chunks]
    lines = ["# Snapshot benchmark", "", f"`python -m bench.snapshots --chunks {' '.join(map(str, args.chunks))}` "
             "(embedded: Qdrant Edge, SQLite registry, 384-d vectors from the cache).", ""]
    lines += table(
        ["chunks", "full build s", "1 % change s (strategy)", "ratio", "swap p50 ms", "swap p95 ms",
         "disk per version MB", "memory to serve a version MB"],
        list("rrlrrrrr"),
        [[r["chunks"], r["full_build_s"], ", ".join(f"{v} ({k})" for k, v in r["incremental_1pct_s"].items()),
          ", ".join(f"{v:.3f} ({k})" for k, v in r["ratio_incremental_over_full"].items()), r["swap_ms_p50"],
          r["swap_ms_p95"], f"{r['disk_bytes_per_version'] / 1e6:.1f}", r["memory_mb_to_serve_version"]]
         for r in rows],
    )
    write("snapshots", {"rows": rows}, lines)

if __name__ == "__main__":
    main()
