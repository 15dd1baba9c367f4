"""The embedding model's rate in tokens per second, by embedder and by text length.

``python -m bench.embed_rate [--limit-pages 60] [--rounds 3]``

Two sets of texts from the same Django pages (``bench.evidence`` fetches
them): freshindex's chunks as embedded (context header included) and the
naive pipeline's 1,000-character splits of the page text
(``bench.realcorpus``).  Each set goes through freshindex's embedder (one
call per page: runs batched by token length), the same embedder one text
per run, and the naive pipeline's path (a default onnxruntime session, one
text per run).  Rounds interleave the embedders, so load drifts over all of
them alike; the table gives medians.

It answers whether a full build can beat the naive pipeline by embedding
faster: a tokens-per-second figure that depends on the text set more than
on the embedder says the model's cost follows the texts' lengths, not the
way they are fed to it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.realcorpus import (
    NaiveEmbedder,
    _uptime,
    chunk_release,
    django_trees,
    materialise,
    naive_text,
    split_recursive,
)


def text_sets(limit: int) -> dict[str, list[list[str]]]:
    """Per page, freshindex's embedded chunk texts and the naive splits."""
    old, _ = django_trees(limit)
    work = Path(tempfile.mkdtemp(prefix="fi-rate-"))
    materialise(old, work / "old")
    fresh = [[c.embed_text for c in cs] for cs in chunk_release(work / "old").values() if cs]
    naive = [p for p in (split_recursive(naive_text(k, path.read_bytes())) for k, path in sorted(old.items())) if p]
    return {"freshindex chunks": fresh, "naive 1,000-char splits": naive}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit-pages", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="embed_rate")
    args = parser.parse_args()
    from bench.report import table, write
    from freshindex.models.onnx import OnnxMiniLM

    sets = text_sets(args.limit_pages)
    naive = NaiveEmbedder()
    batched, single = OnnxMiniLM(), OnnxMiniLM(batch_size=1)
    for warm in (batched.embed, single.embed):
        warm(["warm up the model"])
    naive.embed_one("warm up the model")

    def per_page(embed: Any) -> Any:
        return lambda pages: [embed(p) for p in pages]

    embedders = {"freshindex (batched by length)": per_page(batched.embed),
                 "freshindex, one text per run": per_page(single.embed),
                 "naive path (one text per run)": lambda pages: [naive.embed_one(t) for p in pages for t in p]}
    tokens = {name: sum(len(naive.tokenizer.encode(t).ids) for p in pages for t in p) for name, pages in sets.items()}
    texts = {name: sum(map(len, pages)) for name, pages in sets.items()}
    load_before = os.getloadavg()
    seconds: dict[str, dict[str, list[float]]] = {s: {e: [] for e in embedders} for s in sets}
    for r in range(args.rounds):
        for set_name, pages in sets.items():
            for name, run in embedders.items():
                t0 = time.perf_counter()
                run(pages)
                seconds[set_name][name].append(round(time.perf_counter() - t0, 3))
        print(f"embed_rate: round {r + 1}/{args.rounds} done", file=sys.stderr)
    rows = []
    for set_name in sets:
        for name in embedders:
            median = statistics.median(seconds[set_name][name])
            rows.append({"texts": set_name, "embedder": name, "count": texts[set_name], "tokens": tokens[set_name],
                         "mean_tokens": round(tokens[set_name] / texts[set_name], 1), "median_s": round(median, 3),
                         "runs_s": seconds[set_name][name], "tokens_per_s": round(tokens[set_name] / median)})
    meta = {"command": "python -m bench.embed_rate " + " ".join(sys.argv[1:]), "cores": os.cpu_count(),
            "machine": platform.machine(), "load_before": [round(x, 2) for x in load_before], "uptime": _uptime()}
    lines = ["# Embedding rate by embedder and by text length", "",
             f"`{meta['command'].strip()}` on {meta['cores']} cores ({meta['machine']}); load before "
             f"{' '.join(map(str, meta['load_before']))}, at the end: {meta['uptime']}. Medians of "
             f"{args.rounds} interleaved rounds; tokens counted after the model's 256-token cut.", ""]
    lines += table(["texts", "embedder", "texts", "tokens", "mean tokens", "median s", "tokens/s", "runs s"],
                   list("llrrrrrl"),
                   [[r["texts"], r["embedder"], r["count"], r["tokens"], r["mean_tokens"], r["median_s"],
                     r["tokens_per_s"], " ".join(map(str, r["runs_s"]))] for r in rows])
    write(args.name, {"meta": meta, "rows": rows}, lines)


if __name__ == "__main__":
    main()
