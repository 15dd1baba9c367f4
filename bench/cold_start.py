"""A reader's first queries after it starts: original vectors cold (the store's default) against the engine's cached tier.

New Edge collections keep their original dense vectors at ``Memory.Cold``
(:mod:`freshindex.vectorstore.edge_schema`): a search scans the int8 copy in
RAM and reads originals only to rescore.  ``bench.query`` measures queries on
a warm process; this measures what the tier changes for a process that has
just started: the same collection of ``--points`` points (``bench.query``'s
synthetic corpus: 384-d vectors, lexical text, payloads as the builder writes
them), written and optimised twice, once with the store's settings and once
with the dense vector's tier left to the engine (``Cached``).  Each round, in
alternating order, a fresh child process opens one of them and times
``--queries`` hybrid queries (dense + lexical, limit 10), after the page
cache is dropped where this process may (``/proc/sys/vm/drop_caches``, as
root; otherwise the files are in the page cache and the run says so).
Reported per tier, medians over the rounds: the first query (it opens the
shard), the next four, the median of the rest, and the child's resident
memory after them.

    python -m bench.cold_start [--points 100000] [--queries 30] [--rounds 3]

Writes bench/results/cold_start.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import table, write

TIERS = ("cold", "cached")


def build(root: Path, points: int) -> dict[str, float]:
    """Both collections under ``root/<tier>``; returns the seconds each took to write and optimise."""
    import numpy as np
    import qdrant_edge as qe

    from bench.query import _build, _corpus
    from freshindex.vectorstore import edge_schema
    from freshindex.vectorstore.base import DENSE, LEXICAL
    from freshindex.vectorstore.edge import EdgeStore

    vecs, texts, payloads = _corpus(points)
    np.save(root / "vecs.npy", vecs[: min(points, 2000)])
    shipped = edge_schema.new_config
    seconds = {}
    for tier in TIERS:
        def config(dim: int, hnsw_m: int, threshold: int | None, tier: str = tier) -> Any:
            if tier == "cold":
                return shipped(dim, hnsw_m, threshold)
            # The engine's default tier for the originals; everything else as new_config makes it.
            return qe.EdgeConfig(vectors={DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)},
                                 sparse_vectors={LEXICAL: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
                                 wal_enabled=False, **edge_schema.index_params(hnsw_m, threshold))
        edge_schema.new_config = config
        try:
            started = time.perf_counter()
            store = EdgeStore(root / tier)
            _build(store, "c", vecs, texts, payloads)
            store.optimize("c")
            store.close()
            seconds[tier] = round(time.perf_counter() - started, 1)
        finally:
            edge_schema.new_config = shipped
        persisted = json.loads((root / tier / "collections" / "c" / "edge_config.json").read_text())
        memory = persisted["vectors"][DENSE].get("memory")
        if (memory == "cold") != (tier == "cold"):
            raise RuntimeError(f"the {tier} collection was written with memory={memory!r}")
    return seconds


def child(root: Path, tier: str, n_queries: int) -> dict[str, Any]:
    """Open ``root/<tier>`` in this (fresh) process and time ``n_queries`` hybrid queries."""
    import numpy as np

    from bench.query import _queries
    from freshindex.vectorstore.edge import EdgeStore

    queries = _queries(n_queries, np.load(root / "vecs.npy"), seed=5)
    store = EdgeStore(root / tier)
    ms = []
    for vector, text in queries:
        started = time.perf_counter()
        store.search("c", vector, limit=10, text=text)
        ms.append((time.perf_counter() - started) * 1000)
    rss = next(int(line.split()[1]) // 1024 for line in open("/proc/self/status") if line.startswith("VmRSS"))
    store.close()
    return {"first_ms": ms[0], "next4_ms": statistics.median(ms[1:5]), "rest_ms": statistics.median(ms[5:]),
            "rss_mb": rss}


def _drop_page_cache() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="cold_start")
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "TIER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1], args.queries)))
        return
    if args.queries < 6:
        parser.error("--queries must be at least 6 (the first, the next four, and the rest)")
    runs: dict[str, list[dict[str, Any]]] = {tier: [] for tier in TIERS}
    dropped = []
    with tempfile.TemporaryDirectory(prefix="fi-cold-start-") as tmp:
        root = Path(tmp)
        build_s = build(root, args.points)
        for n in range(args.rounds):
            for tier in TIERS if n % 2 == 0 else TIERS[::-1]:
                dropped.append(_drop_page_cache())
                out = subprocess.run([sys.executable, "-m", "bench.cold_start", "--child", str(root), tier,
                                      "--queries", str(args.queries)], capture_output=True, text=True, check=True)
                runs[tier].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(tier, runs[tier][-1], flush=True)
    summary = {tier: {k: round(statistics.median(r[k] for r in runs[tier]), 1) for k in runs[tier][0]}
               for tier in TIERS}
    data = {"points": args.points, "queries": args.queries, "rounds": args.rounds, "build_s": build_s,
            "page_cache_dropped": all(dropped), "load_avg_end": os.getloadavg(), "runs": runs, "median": summary}
    cache = ("the page cache dropped before every child" if all(dropped)
             else "the page cache could NOT be dropped (not root): the files were cached")
    md = [f"# A reader's first queries after it starts: original vectors cold against cached ({args.points} points)",
          "", f"`python -m bench.cold_start --points {args.points} --queries {args.queries} --rounds {args.rounds}`: "
          f"{args.rounds} rounds, tiers alternated, {cache}; hybrid queries (dense + lexical, limit 10), ms; "
          "medians over the rounds. cold = the store's default (`Memory.Cold` originals), cached = the engine's "
          f"default tier. Load average at the end {os.getloadavg()[0]:.2f}.", "",
          *table(["originals", "first query (opens the shard)", "queries 2-5", f"queries 6-{args.queries}",
                  "resident MB after"], ["l", "r", "r", "r", "r"],
                 [[tier, s["first_ms"], s["next4_ms"], s["rest_ms"], s["rss_mb"]] for tier, s in summary.items()])]
    write(args.name, data, md)


if __name__ == "__main__":
    main()
