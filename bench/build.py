"""Build benchmark: full build, then a re-sync with nothing changed.

Measures, in one run per corpus: wall time of the full build, chunks per
second, the share of wall time spent inside the embedding model, and the
no-change re-sync as a fraction of the full build (goal: at most 5 %).
Writes bench/results/build.json and bench/results/build.md.

    python -m bench.build [--docs 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.corpus import write_corpus
from bench.report import table, write
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

ROOT = Path(__file__).resolve().parent.parent


def measure(name: str, source: Path, repeat: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="fi-bench-"))
    try:
        svc = Services(load_settings(data_dir=work / "data"))
        svc.registry.add_source("bench", kind="folder", location=str(source), owner="bench", kb="bench")
        svc.embedder.embed(["warm up the model"])  # load time is not build time
        embed_before = svc.metrics.value("freshindex_embed_seconds_total", model=svc.embedder.model_id)
        t0 = time.perf_counter()
        full = sync_inline(svc, "bench")
        full_s = time.perf_counter() - t0
        embed_s = svc.metrics.value("freshindex_embed_seconds_total", model=svc.embedder.model_id) - embed_before
        chunks = full.run.summary["chunks_embedded"]
        resyncs = []
        for _ in range(repeat):
            t1 = time.perf_counter()
            again = sync_inline(svc, "bench")
            resyncs.append(time.perf_counter() - t1)
            assert again.run.summary["chunks_embedded"] == 0 and again.build_status == "unchanged"
        svc.close()
        resync = statistics.median(resyncs)
        return {
            "corpus": name,
            "documents": full.run.summary["documents"]["added"],
            "chunks": chunks,
            "points": full.snapshot.point_count,
            "full_build_s": round(full_s, 3),
            "chunks_per_s": round(chunks / full_s, 1),
            "embed_s": round(embed_s, 3),
            "embed_share": round(embed_s / full_s, 3),
            "resync_unchanged_median_s": round(resync, 3),
            "resync_over_full": round(resync / full_s, 4),
            "resync_runs": len(resyncs),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=2000, help="documents in the generated corpus")
    parser.add_argument("--repeat", type=int, default=3, help="no-change re-syncs (median reported)")
    args = parser.parse_args()
    rows = [measure("sample (examples/kb)", ROOT / "examples" / "kb", args.repeat)]
    gen = Path(tempfile.mkdtemp(prefix="fi-corpus-"))
    try:
        write_corpus(gen, args.docs)
        rows.append(measure(f"generated ({args.docs} Markdown docs)", gen, args.repeat))
    finally:
        shutil.rmtree(gen, ignore_errors=True)
    meta = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "python": platform.python_version(),
            "cores": os.cpu_count(), "embedding_model": "all-MiniLM-L6-v2-onnx-int8",
            "store": "qdrant-edge (embedded)", "registry": "sqlite"}
    lines = ["# Build benchmark", "", f"`python -m bench.build --docs {args.docs}` on {meta['cores']} cores, "
             f"{meta['embedding_model']}, {meta['store']}, {meta['registry']} registry.", ""]
    lines += table(
        ["corpus", "docs", "chunks", "full build s", "chunks/s", "share in embedder", "no-change re-sync s (median)",
         "re-sync / full"],
        list("lrrrrrrr"),
        [[r["corpus"], r["documents"], r["chunks"], r["full_build_s"], r["chunks_per_s"], f"{r['embed_share']:.0%}",
          r["resync_unchanged_median_s"], f"{r['resync_over_full']:.2%}"] for r in rows],
    )
    write("build", {"meta": meta, "rows": rows}, lines)

if __name__ == "__main__":
    main()
