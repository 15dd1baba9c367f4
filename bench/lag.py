"""Webhook-to-visible sync lag for a one-document change: local Redis, one worker, PostgreSQL.

A fresh PostgreSQL database, one ``freshindex worker -c 1`` process on the
local Redis broker, a folder source of ``--docs`` Markdown documents (the
real ONNX model unless ``--embedding hashing``), synced once.  Then, per
round: one document is edited, the clock starts and a signed generic
webhook naming it is POSTed over HTTP to ``serve``'s app (uvicorn in a
thread of this process, with ``serve``'s dispatcher, ``debounce_s`` 0, so
the debounce window is excluded), which starts the sync through Celery; the clock
stops when a query of the active snapshot returns the edited text.  Reported:
p50/p95 of that wall-clock lag, and of the lag the registry recorded on the
run (``sync_runs.lag_s``: the event's time to the snapshot's activation),
which ``freshindex sources runs`` and ``GET /v1/sources/SOURCE/runs`` show.

    python -m bench.lag --rounds 10 [--docs 50] [--embedding onnx|hashing]

Writes bench/results/lag.json and bench/results/lag.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from bench.report import table, write
from tests.conftest import (
    REDIS_URL,
    _create_pg_database,
    _drop_pg_database,
    distributed_env,
    free_port,
    worker_process,
)

SECRET = "bench-lag-secret"


def _post_webhook(port: int, paths: list[str]) -> int:
    """POST one signed generic delivery to the running app; returns its ticket id (202 expected)."""
    from freshindex.api.routes_webhooks import sign_generic

    body = json.dumps({"paths": paths}).encode()
    ts = str(int(time.time()))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/webhooks/generic/docs", body=body, headers={
        "Content-Type": "application/json", "X-Freshindex-Timestamp": ts,
        "X-Freshindex-Delivery": uuid.uuid4().hex, "X-Freshindex-Signature": sign_generic(SECRET, ts, body)})
    resp = conn.getresponse()
    data = json.loads(resp.read())
    conn.close()
    if resp.status != 202:
        raise SystemExit(f"webhook refused: {resp.status} {data}")
    return int(data["ticket"])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(rounds: int, docs: int, embedding: str) -> dict:
    import uvicorn

    from freshindex.api.app import create_app as create_http_app
    from freshindex.dispatch import start_dispatcher
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.app import create_app
    from freshindex.workers.runner import sync_distributed

    work = Path(tempfile.mkdtemp(prefix="fi-lag-"))
    name, pg_url = _create_pg_database()
    saved = dict(os.environ)
    try:
        kb = work / "kb"
        kb.mkdir()
        for i in range(docs):
            (kb / f"doc-{i:03d}.md").write_text(f"# Document {i}\n\nDocument {i} describes topic {i} in detail.\n")
        env = distributed_env(work, pg_url, REDIS_URL + "/0", "fi-lag", FRESHINDEX_EMBEDDING__PROVIDER=embedding,
                              FRESHINDEX_WEBHOOKS__DEBOUNCE_S="0",
                              FRESHINDEX_WEBHOOKS__SECRETS=json.dumps({"docs": SECRET}))
        os.environ.update(env)
        settings = load_settings()
        svc, app = Services(settings), create_app(settings)
        with worker_process(env, work / "worker.log", "lag", "-c", "1"):
            svc.registry.add_source("docs", kind="folder", location=str(kb), owner="bench", kb="default")
            sync_distributed(svc, app, "docs", timeout=600)
            dispatcher = start_dispatcher(svc)
            port = free_port()
            server = uvicorn.Server(uvicorn.Config(create_http_app(svc), host="127.0.0.1", port=port,
                                                   log_level="warning", access_log=False))
            thread = threading.Thread(target=server.run, daemon=True)
            thread.start()
            deadline = time.monotonic() + 60
            while not server.started:
                if time.monotonic() > deadline or not thread.is_alive():
                    raise SystemExit("the HTTP app did not start")
                time.sleep(0.05)
            wall, recorded = [], []
            try:
                for r in range(rounds):
                    word = f"marker{uuid.uuid4().hex[:8]}"
                    (kb / "doc-007.md").write_text(f"# Document 7\n\nDocument 7 now says {word} round {r}.\n")
                    started = time.perf_counter()
                    ticket_id = _post_webhook(port, ["doc-007.md"])
                    while True:
                        packet = svc.client.retrieve(f"Document 7 now says {word}", kb="default", limit=3)
                        if any(word in e.text for e in packet.evidence):
                            break
                        time.sleep(0.02)
                    wall.append(time.perf_counter() - started)
                    while svc.registry.get_ticket(ticket_id).status != "done":
                        time.sleep(0.05)
                    run_id = svc.registry.get_ticket(ticket_id).run_id
                    lag = next((x["lag_s"] for x in svc.registry.run_lags(source_id="docs") if x["run"] == run_id), None)
                    if lag is not None:
                        recorded.append(lag)
            finally:
                server.should_exit = True
                thread.join(timeout=10)
                dispatcher.stop()
        svc.close()
        app.close()
        return {
            "rounds": rounds, "docs": docs, "embedding": embedding, "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "wall_p50_s": statistics.median(wall), "wall_p95_s": _pct(wall, 0.95),
            "recorded_p50_s": statistics.median(recorded) if recorded else None,
            "recorded_p95_s": _pct(recorded, 0.95) if recorded else None,
            "wall_s": wall, "recorded_s": recorded,
            "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        }
    finally:
        os.environ.clear()
        os.environ.update(saved)
        _drop_pg_database(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--docs", type=int, default=50)
    parser.add_argument("--embedding", choices=["onnx", "hashing"], default="onnx")
    args = parser.parse_args()
    data = run(args.rounds, args.docs, args.embedding)
    md = ["# Sync lag: webhook event to visible in the active snapshot", "",
          f"One-document change, {data['docs']} documents, one worker (`-c 1`) on local Redis, PostgreSQL registry, "
          f"{data['embedding']} embedder, debounce 0 (excluded), {data['rounds']} rounds, {data['cpus']} CPUs, "
          f"load average at the end {data['load_average']}.", "",
          *table(["measure", "p50 s", "p95 s"], ["l", "r", "r"], [
              ["wall clock (signed POST sent -> query returns the edit)", f"{data['wall_p50_s']:.2f}",
               f"{data['wall_p95_s']:.2f}"],
              ["recorded on the run (`sync_runs.lag_s`)",
               f"{data['recorded_p50_s']:.2f}" if data["recorded_p50_s"] is not None else "-",
               f"{data['recorded_p95_s']:.2f}" if data["recorded_p95_s"] is not None else "-"]]),
          "", "Command: `python -m bench.lag " + f"--rounds {data['rounds']} --docs {data['docs']} "
          f"--embedding {data['embedding']}`"]
    write("lag", data, md)


if __name__ == "__main__":
    main()
