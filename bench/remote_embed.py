"""A full build of a real corpus with a remote embedder against the in-process one.

``python -m bench.remote_embed [--limit-pages 80] [--rounds 1] [--max-in-flight 4]``

The corpus is the Django 3.2 documentation (``bench.corpora.django``: the
Debian package, materialised into ``~/.cache/freshindex-bench``), its first
``--limit-pages`` pages.  Each side syncs and builds the same pages from an
empty data dir (parse, chunk, embed, build, verify, swap):

* ``onnx``: the default, the bundled MiniLM inside this process;
* ``openai``: ``embedding.provider = openai`` against a local
  OpenAI-compatible server (``bench.embed_server`` in its own process,
  uvicorn) serving the same bundled model, so the difference is the cost of
  the HTTP hop, the JSON and the batching, not of another model.

Rounds alternate the order of the sides, so load drifts over both alike.
The ratio is remote wall time over in-process wall time (median of rounds).
Both sides run on the same 2 cores: the server's model competes with the
client's parser, as it would not on a separate embedding host.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

NOTE = ("Requests: one per document for its chunks (a document's new chunks are embedded in one call, in a "
        "thread ahead of the sync loop: workers/ahead.py), then the build's refusal calibration, which embeds its "
        "pseudo-questions in one call cut into requests of at most embedding.batch_max_inputs texts. 'wall s' covers "
        "the whole sync and build; 's in embed calls' the pipeline's embed calls, which overlap.")


def corpus(limit: int, dest: Path) -> Path:
    """The first ``limit`` pages of the Django corpus, copied under ``dest``."""
    from bench.corpora import django

    html = django.fetch(django.DEFAULT_CACHE)
    for rel in sorted(django.corpus_pages(html))[:limit]:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html / rel, target)
    return dest


def start_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "bench.embed_server", "--port", str(port)],
                            cwd=Path(__file__).resolve().parents[1], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                # The server loads its model on the first request: pay that before timing.
                httpx.post(f"http://127.0.0.1:{port}/v1/embeddings", json={"model": "m", "input": ["warm"]},
                           timeout=60).raise_for_status()
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("the embedding server did not start within 60 s")


def remote_settings(port: int, *, max_in_flight: int = 2, timeout_s: float = 120.0) -> dict[str, Any]:
    """``embedding.*`` settings of freshindex's remote side against ``bench.embed_server`` on ``port``."""
    return {"provider": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "model": "all-MiniLM-L6-v2",
            "dimensions": 384, "max_input_tokens": 256, "max_in_flight": max_in_flight, "timeout_s": timeout_s}


def build(side: str, pages: Path, work: Path, embedding: dict[str, Any]) -> dict[str, Any]:
    """One full sync and build from an empty data dir; wall time and counts."""
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    data = work / f"data-{side}-{time.monotonic_ns()}"
    svc = Services(load_settings(data_dir=data, embedding=embedding))
    try:
        svc.embedder.embed(["warm up"])  # model load (in-process) or first connection (remote): not timed
        svc.registry.add_source("django", kind="folder", location=str(pages), owner="bench", kb="default")
        started = time.perf_counter()
        report = sync_inline(svc, "django")
        seconds = time.perf_counter() - started
        m = svc.metrics.registry
        out = {
            "side": side, "seconds": round(seconds, 2), "status": report.run.status,
            "build": report.build_status, "errors": len(report.errors),
            "points": svc.registry.count_live("default"),
            "embedded": m.get_sample_value("freshindex_chunks_embedded_total", {"model": svc.embedder.model_id}),
            "embed_seconds": round(m.get_sample_value("freshindex_embed_seconds_total",
                                                      {"model": svc.embedder.model_id}) or 0.0, 2),
        }
        if side != "onnx":
            ok = m.get_sample_value("freshindex_remote_embed_requests_total", {"provider": "openai", "outcome": "ok"})
            total_s = m.get_sample_value("freshindex_remote_embed_request_seconds_sum", {"provider": "openai"})
            retries = [s.value for f in m.collect() if f.name == "freshindex_remote_embed_retries"
                       for s in f.samples if s.name.endswith("_total")]
            out |= {"requests": int(ok or 0), "request_seconds": round(total_s or 0.0, 2), "retries": sum(retries)}
        return out
    finally:
        svc.close()
        shutil.rmtree(data, ignore_errors=True)


def _uptime() -> str:
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit-pages", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--max-in-flight", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="embedding.timeout_s of the remote side")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--name", default="remote_embed")
    args = parser.parse_args()
    from bench.report import table, write

    load_before = _uptime()
    work = Path(tempfile.mkdtemp(prefix="fi-remote-embed-"))
    pages = corpus(args.limit_pages, work / "pages")
    server = start_server(args.port)
    remote = remote_settings(args.port, max_in_flight=args.max_in_flight, timeout_s=args.timeout)
    sides = {"onnx": {"provider": "onnx"}, "openai": remote}
    runs: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            for side in (["onnx", "openai"] if r % 2 == 0 else ["openai", "onnx"]):
                run = build(side, pages, work, sides[side]) | {"round": r + 1}
                print(run, flush=True)
                runs.append(run)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    median = {s: statistics.median(r["seconds"] for r in runs if r["side"] == s) for s in sides}
    ratio = round(median["openai"] / median["onnx"], 3)
    command = f"python -m bench.remote_embed --limit-pages {args.limit_pages} --rounds {args.rounds} " \
              f"--max-in-flight {args.max_in_flight} --timeout {args.timeout:g}"
    meta = {"command": command, "machine": platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "load_before": load_before, "load_after": _uptime(),
            "pages": args.limit_pages, "remote_settings": remote}
    lines = ["# Remote embedder against the in-process model: a full build of real pages", "",
             f"`{command}` on {meta['cores']} cores ({meta['machine']}); before: {load_before}; after: "
             f"{meta['load_after']}.", "",
             f"The first {args.limit_pages} pages of the Django 3.2 documentation, synced and built from an empty "
             "data dir by each side. `openai`: embedding.provider=openai against `bench.embed_server` (uvicorn, "
             "its own process) serving the same bundled MiniLM, so the difference is the HTTP hop, the JSON and "
             "the batching. Server and client share the same cores.", ""]
    lines += table(
        ["round", "side", "wall s", "points", "embedded", "s in embed calls", "requests", "request s", "retries",
         "errors"],
        ["r", "l", "r", "r", "r", "r", "r", "r", "r", "r"],
        [[r["round"], r["side"], r["seconds"], r["points"], int(r["embedded"] or 0), r["embed_seconds"],
          r.get("requests", "-"), r.get("request_seconds", "-"), r.get("retries", "-"), r["errors"]] for r in runs])
    lines += ["", f"Median wall time: in-process {median['onnx']} s, remote {median['openai']} s; "
              f"ratio remote / in-process = **{ratio}**.", "",
              NOTE]
    write(args.name, {"meta": meta, "runs": runs, "median_s": median, "ratio": ratio}, lines)


if __name__ == "__main__":
    main()
