"""Webhook intake rate: signed deliveries per second a real ``freshindex serve`` accepts, coalesced.

Starts ``freshindex serve`` (embedded: SQLite registry, hashing embedder)
in a subprocess with one webhook source, then posts signed generic
deliveries, each with a new delivery id (so each is a durable replay row
plus a ticket join), and reports accepted requests per second; the same for
forged signatures (refused before any registry write) and for ``/healthz``
(the HTTP stack alone).  The debounce is long, so no sync competes with the
intake: this measures the receiver, not the pipeline.  After the accepted
rounds it reads the registry: every accepted delivery must be on the one
queued ticket (coalesced), or the bench fails.

The load generator and the server share the machine's cores, so the
generator must be cheap: ``--clients N`` processes, each one keep-alive
``http.client`` connection, signing with a precomputed HMAC key.  For
comparison one round uses the previous generator (httpx, 16 threads in one
process), and one measures the server's decision without HTTP
(:meth:`WebhookIntake.receive` in this process on its own SQLite file, 8
threads): the split between client, HTTP stack and intake.  Each figure is the
median of ``--repeats`` rounds; the load average is printed beside it
(other jobs share the machine).

    python -m bench.webhooks [--requests 2000] [--clients 1 2 4 8] [--repeats 3] [--registry URL]

Writes bench/results/webhooks.json and bench/results/webhooks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.report import table, write
from freshindex.api.routes_webhooks import sign_generic

SECRET = "bench-secret"
PATH = "/v1/webhooks/generic/docs"


def _body() -> bytes:
    """One event's body: its own id in it, as a sender's (the same signed body twice is a replay, 409)."""
    return json.dumps({"paths": ["guides/release.md"], "event": uuid.uuid4().hex}).encode()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stack() -> str:
    """Which HTTP parser and event loop uvicorn finds in this interpreter (the server's)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("uvicorn", "httptools", "uvloop"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} absent")
    return ", ".join(out)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# -- the load generator: one keep-alive connection per process ------------------------------


def _client(args: tuple[int, str, int, bool | None]) -> dict[int, int]:
    """Send ``n`` requests over one connection; ``forged`` None means GET /healthz."""
    port, _, n, forged = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    key = hmac.new((("wrong" if forged else SECRET)).encode(), digestmod=hashlib.sha256)
    codes: dict[int, int] = {}
    for _ in range(n):
        if forged is None:
            conn.request("GET", "/healthz")
        else:
            ts = str(int(time.time()))
            mac, body = key.copy(), _body()
            mac.update(ts.encode() + b"." + body)
            conn.request("POST", PATH, body=body, headers={
                "Content-Type": "application/json", "X-Freshindex-Timestamp": ts,
                "X-Freshindex-Delivery": uuid.uuid4().hex, "X-Freshindex-Signature": "sha256=" + mac.hexdigest()})
        resp = conn.getresponse()
        resp.read()
        codes[resp.status] = codes.get(resp.status, 0) + 1
    conn.close()
    return codes


def _raw_round(pool: Any, port: int, n: int, clients: int, forged: bool | None) -> tuple[float, dict[int, int]]:
    pool.map(_client, [(port, "", 3, forged)] * clients)  # connect and warm every process first
    started = time.perf_counter()
    parts = pool.map(_client, [(port, "", n // clients, forged)] * clients)
    seconds = time.perf_counter() - started
    codes: dict[int, int] = {}
    for part in parts:
        for k, v in part.items():
            codes[k] = codes.get(k, 0) + v
    return seconds, codes


def _httpx_round(url: str, n: int, concurrency: int, forged: bool) -> tuple[float, dict[int, int]]:
    """The previous generator (httpx threads in one process): what it costs the client side."""
    codes: dict[int, int] = {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx.Client(base_url=url, timeout=30, limits=limits) as http_:
        def one(_: int) -> int:
            ts, body = str(int(time.time())), _body()
            return http_.post(PATH, content=body, headers={
                "X-Freshindex-Timestamp": ts, "X-Freshindex-Delivery": uuid.uuid4().hex,
                "X-Freshindex-Signature": sign_generic("wrong" if forged else SECRET, ts, body)}).status_code

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            for code in pool.map(one, range(n)):
                codes[code] = codes.get(code, 0) + 1
        return time.perf_counter() - started, codes


def _in_process_round(n: int, threads: int) -> tuple[float, dict[int, int]]:
    """The intake's decision and registry write without HTTP, on a SQLite file of its own."""
    from freshindex.api.routes_webhooks import Rejected, WebhookIntake
    from freshindex.health.metrics import Metrics
    from freshindex.registry import Registry
    from freshindex.settings import load_settings

    work = Path(tempfile.mkdtemp(prefix="fi-bench-intake-"))
    reg = Registry.open(f"sqlite:///{work / 'r.db'}")
    reg.add_source("docs", kind="folder", location=str(work), owner="bench", kb="default")
    intake = WebhookIntake(load_settings(data_dir=work, webhooks={"secrets": {"docs": SECRET}}).webhooks,
                           type("S", (), {"registry": reg, "metrics": Metrics()})())

    def one(_: int) -> int:
        ts, body = str(int(time.time())), _body()
        headers = {"X-Freshindex-Timestamp": ts, "X-Freshindex-Delivery": uuid.uuid4().hex,
                   "X-Freshindex-Signature": sign_generic(SECRET, ts, body)}
        try:
            intake.receive("generic", "docs", headers, body)
            return 202
        except Rejected as exc:
            return exc.status

    codes: dict[int, int] = {}
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for code in pool.map(one, range(n)):
            codes[code] = codes.get(code, 0) + 1
    seconds = time.perf_counter() - started
    reg.close()
    return seconds, codes


# -- the run --------------------------------------------------------------------------------


def _median_of(repeats: int, once: Callable[[], tuple[float, dict[int, int]]], n: int) -> dict[str, Any]:
    rates, codes, loads, accepted = [], {}, [], 0
    for _ in range(repeats):
        seconds, codes = once()
        rates.append(n / seconds)
        loads.append(_load())
        accepted += codes.get(202, 0)
    return {"per_second": round(statistics.median(rates), 1), "rounds": [round(r, 1) for r in rates],
            "codes": codes, "load": loads[-1], "accepted_total": accepted}


def _start_server(env: dict[str, str], work: Path) -> tuple[subprocess.Popen[bytes], int]:
    exe = [sys.executable, "-m", "freshindex"]
    subprocess.run([*exe, "sources", "add", "docs", "--kind", "folder", "--location", str(work / "kb")],
                   env=env, check=True, capture_output=True)
    port = _free_port()
    server = subprocess.Popen([*exe, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return server, port
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.terminate()
            raise SystemExit("serve did not start")
        time.sleep(0.2)


def _accepted_metric(url: str) -> int:
    """The server's own count of accepted generic deliveries (``freshindex_webhook_events_total``)."""
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("freshindex_webhook_events_total{") and 'outcome="accepted"' in line \
                and 'provider="generic"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def _coalesced(env: dict[str, str]) -> dict[str, int]:
    """Tickets of the source and events on them, read from the server's registry after the rounds."""
    from freshindex.services import Services
    from freshindex.settings import load_settings

    saved = dict(os.environ)
    os.environ.update(env)
    try:
        svc = Services(load_settings())
        tickets = svc.registry.sync_tickets("docs", limit=100)
        out = {"tickets": len(tickets), "events": sum(t.events for t in tickets),
               "queued": sum(t.status == "queued" for t in tickets)}
        svc.close()
        return out
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--registry", default=None, help="registry URL (default: SQLite in a temporary folder)")
    args = ap.parse_args()
    n = args.requests
    work = Path(tempfile.mkdtemp(prefix="fi-bench-webhooks-"))
    (work / "kb").mkdir()
    (work / "kb" / "a.md").write_text("# A\n\nText.\n")
    env = {**os.environ, "FRESHINDEX_DATA_DIR": str(work / "data"), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing",
           "FRESHINDEX_WEBHOOKS__SECRETS": json.dumps({"docs": SECRET}),
           "FRESHINDEX_WEBHOOKS__DEBOUNCE_S": "86400", "FRESHINDEX_LOG_LEVEL": "WARNING"}
    if args.registry:
        env["FRESHINDEX_REGISTRY__URL"] = args.registry
    rows: list[dict[str, Any]] = []
    server, port = _start_server(env, work)
    url = f"http://127.0.0.1:{port}"
    try:
        with mp.get_context("spawn").Pool(max(args.clients)) as pool:
            _raw_round(pool, port, 60, 2, False)  # warm-up (SQLite pages, imports)
            for c in args.clients:
                for kind, forged in (("accepted (202)", False), ("forged (401)", True), ("GET /healthz", None)):
                    def once(c: int = c, forged: bool | None = forged) -> tuple[float, dict[int, int]]:
                        return _raw_round(pool, port, n, c, forged)

                    row = _median_of(args.repeats, once, n - n % c)
                    rows.append({"client": f"http.client, {c} process(es)", "kind": kind, **row})
        for kind, forged in (("accepted (202)", False), ("forged (401)", True)):
            row = _median_of(args.repeats, lambda forged=forged: _httpx_round(url, n, 16, forged), n)
            rows.append({"client": "httpx, 16 threads (previous bench)", "kind": kind, **row})
        accepted = _accepted_metric(url)
    finally:
        server.terminate()
        server.wait(timeout=30)
    coalesced = _coalesced(env)
    seen = sum(r["accepted_total"] for r in rows)  # 202s the clients saw in measured rounds (no warm-ups)
    if coalesced != {"tickets": 1, "events": accepted, "queued": 1} or accepted < seen:
        raise SystemExit(f"accepted deliveries were not coalesced into one queued ticket: {coalesced}, "
                         f"{accepted} accepted by the server's metric, {seen} 202s seen by the clients")
    row = _median_of(args.repeats, lambda: _in_process_round(n, 8), n)
    rows.append({"client": "none: WebhookIntake.receive in-process, 8 threads", "kind": "accepted (202)", **row})
    data = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "registry": "sqlite" if not args.registry else args.registry.split(":")[0], "requests": n,
            "repeats": args.repeats, "coalesced": coalesced, "http_stack": _stack(), "rows": rows}
    md = ["# Webhook intake", "",
          f"`freshindex serve` (embedded, {data['registry']} registry; {data['http_stack']}) "
          f"on {os.cpu_count()} cores shared with the load generator; {n} signed generic deliveries per round, each "
          "a new delivery id (a durable replay row + ticket join, group-committed); forged ones are refused before "
          f"any write. Median of {args.repeats} rounds. After the rounds the registry held {coalesced['tickets']} "
          f"ticket with {coalesced['events']} events: every accepted delivery coalesced.", "",
          f"Command: `python -m bench.webhooks --requests {n} --clients {' '.join(map(str, args.clients))} "
          f"--repeats {args.repeats}`", ""]
    md += table(["client", "request", "per second (median)", "rounds", "status codes", "load average"],
                ["l", "l", "r", "l", "l", "l"],
                [[r["client"], r["kind"], r["per_second"], r["rounds"], r["codes"], r["load"]] for r in rows])
    write("webhooks", data, md)


if __name__ == "__main__":
    main()
