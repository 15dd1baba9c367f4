"""A real HTTP server for the tests: a ``freshindex serve`` process (its own data dir, keys made by
``freshindex keys create``), or the app of in-process services under uvicorn in a thread."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from tests.conftest import ROOT, free_port


@dataclass
class Served:
    url: str
    proc: subprocess.Popen
    log: Path

    def status(self, field: str) -> int:
        """A ``/proc/PID/status`` figure in kB (VmRSS now, VmHWM the peak resident set)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} for pid {self.proc.pid}")


def serve_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """The environment of a serve process on ``tmp_path``: hashing embedder, keys mode, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env.update(FRESHINDEX_DATA_DIR=str(tmp_path / "data"), FRESHINDEX_EMBEDDING__PROVIDER="hashing",
               FRESHINDEX_AUTH__MODE="keys", FRESHINDEX_LOG_LEVEL="WARNING", **settings)
    return env


def cli(env: dict[str, str], *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "freshindex", *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def create_key(env: dict[str, str], principal: str, *groups: str, tenant: str | None = None) -> str:
    """A key made the way an operator makes one: ``freshindex keys create``."""
    args = ["keys", "create", principal, "--json", *[a for g in groups for a in ("--group", g)]]
    if tenant:
        args += ["--tenant", tenant]
    return json.loads(cli(env, *args))["key"]


@contextlib.contextmanager
def app_in_thread(app: object) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a thread; yields its base URL, stops it after."""
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def serving(env: dict[str, str], tmp_path: Path, *, probe: str = "/healthz") -> Iterator[Served]:
    """A ``freshindex serve`` process with ``env``, once ``probe`` answers 200; terminated after."""
    port = free_port()
    log_path = tmp_path / f"serve-{port}.log"
    log = log_path.open("w")
    proc = subprocess.Popen([sys.executable, "-m", "freshindex", "serve", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    served = Served(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(served.url + probe, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"serve did not start:\n{log_path.read_text()}")
            time.sleep(0.2)
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@dataclass
class WebhookServer:
    """In-process services behind a real HTTP server, with the webhook dispatcher running: what the webhook
    tests read back (the source ``docs``'s tickets and runs, metrics)."""

    url: str
    svc: Any
    data_dir: Path | None = None
    kb: Path | None = None

    def tickets(self) -> list[Any]:
        return self.svc.registry.sync_tickets("docs", limit=1000)

    def runs(self) -> list[Any]:
        return self.svc.registry.sync_runs("docs", limit=1000)

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics").text

    def rejections(self, reason: str) -> float:
        return self.svc.metrics.value("freshindex_webhook_rejections_total", reason=reason) or 0.0

    def settle(self, timeout: float = 60.0) -> None:
        """Wait until no ticket of the source is queued or dispatched."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(t.status in ("done", "failed") for t in self.tickets()):
                return
            time.sleep(0.1)
        raise AssertionError(f"tickets did not settle: {self.tickets()}")
