"""Webhook intake rate: signed deliveries per second a real ``freshindex serve`` accepts.

Starts ``freshindex serve`` (embedded: SQLite registry, hashing embedder)
in a subprocess with one webhook source, then posts signed generic
deliveries (distinct delivery ids, so each is a registry write: replay row
plus ticket join) from ``--concurrency`` client threads, and reports
accepted requests per second, and the same for forged signatures (refused
before the registry is written).  The debounce is long, so no sync competes
with the intake: this measures the receiver, not the pipeline.  Client and
server share the machine's cores.

    python -m bench.webhooks [--requests 1000] [--concurrency 1 4 16] [--registry URL]

Writes bench/results/webhooks.json and bench/results/webhooks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from freshindex.api.webhooks import sign_generic

from bench.report import table, write

SECRET = "bench-secret"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post_all(url: str, n: int, concurrency: int, *, forged: bool) -> tuple[float, dict[int, int]]:
    body = json.dumps({"paths": ["guides/release.md"]}).encode()
    codes: dict[int, int] = {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx.Client(base_url=url, timeout=30, limits=limits) as http:
        def one(_: int) -> int:
            ts = str(int(time.time()))
            sig = sign_generic("wrong" if forged else SECRET, ts, body)
            return http.post("/v1/webhooks/generic/docs", content=body, headers={
                "X-Freshindex-Timestamp": ts, "X-Freshindex-Delivery": uuid.uuid4().hex,
                "X-Freshindex-Signature": sig}).status_code

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            for code in pool.map(one, range(n)):
                codes[code] = codes.get(code, 0) + 1
        return time.perf_counter() - started, codes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--registry", default=None, help="registry URL (default: SQLite in a temporary folder)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fi-bench-webhooks-"))
    (work / "kb").mkdir()
    (work / "kb" / "a.md").write_text("# A\n\nText.\n")
    env = {**os.environ, "FRESHINDEX_DATA_DIR": str(work / "data"), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing",
           "FRESHINDEX_WEBHOOKS__SECRETS": json.dumps({"docs": SECRET}),
           "FRESHINDEX_WEBHOOKS__DEBOUNCE_S": "86400", "FRESHINDEX_LOG_LEVEL": "WARNING"}
    if args.registry:
        env["FRESHINDEX_REGISTRY__URL"] = args.registry
    exe = [sys.executable, "-m", "freshindex"]
    subprocess.run([*exe, "sources", "add", "docs", "--kind", "folder", "--location", str(work / "kb")],
                   env=env, check=True, capture_output=True)
    port = _free_port()
    server = subprocess.Popen([*exe, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    rows: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("serve did not start")
            time.sleep(0.2)
        _post_all(url, 50, 4, forged=False)  # warm-up (connections, SQLite pages)
        for c in args.concurrency:
            for forged in (False, True):
                seconds, codes = _post_all(url, args.requests, c, forged=forged)
                rows.append({"kind": "forged (401)" if forged else "accepted (202)", "concurrency": c,
                             "requests": args.requests, "seconds": round(seconds, 3),
                             "per_second": round(args.requests / seconds, 1), "codes": codes})
    finally:
        server.terminate()
        server.wait(timeout=30)
    data = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "registry": "sqlite" if not args.registry else args.registry.split(":")[0], "rows": rows}
    md = ["# Webhook intake", "",
          f"`freshindex serve` (embedded, {data['registry']} registry) on {os.cpu_count()} cores shared with the "
          "client; signed generic deliveries, each a new delivery id (one registry write: replay row + ticket "
          "join); forged ones are refused before any write. `python -m bench.webhooks`.", ""]
    md += table(["outcome", "concurrency", "seconds", "per second", "status codes"], ["l", "r", "r", "r", "l"],
                [[r["kind"], r["concurrency"], r["seconds"], r["per_second"], r["codes"]] for r in rows])
    write("webhooks", data, md)


if __name__ == "__main__":
    main()
