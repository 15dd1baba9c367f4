"""A worker serves the sum of its pool processes' metrics, task latency and queue depth.

Real parts: a `freshindex worker` process with two pool children on the local
Redis, the registry on PostgreSQL, a `freshindex sync` CLI following the run;
the test scrapes the worker's /metrics over HTTP.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, distributed_env, free_port, worker_process

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_the_worker_exports_its_pool_metrics_task_latency_and_queue_depth(
    tmp_path: Path, pg_url: str, redis_url: str, sample_kb: Path
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env.update(distributed_env(tmp_path, pg_url, redis_url, "fi-exp",
                               FRESHINDEX_BROKER__WORKER_METRICS_PORT=str(port),
                               FRESHINDEX_EMBEDDING__PROVIDER="hashing"))
    prefix = env["FRESHINDEX_BROKER__QUEUE_PREFIX"]
    with worker_process(env, tmp_path / "worker.log", "exp") as worker:
        # Given a worker whose exporter is up
        deadline = time.monotonic() + 90
        while True:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.5)

        # When a distributed sync of the sample knowledge base runs through it
        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "freshindex", *args], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=300)

        assert cli("sources", "add", "docs", "--kind", "folder", "--location", str(sample_kb)).returncode == 0
        synced = cli("sync", "docs", "--json")
        assert synced.returncode == 0, synced.stderr[-3000:]

        # Then one scrape shows the work of both pool processes, task latency by task, and queue depth
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert _value(text, "freshindex_documents_total", outcome="added") == 8, text[:3000]
        assert _value(text, "freshindex_task_seconds_count", task="freshindex.process_document") == 8
        assert _value(text, "freshindex_task_seconds_count", task="freshindex.build_snapshot") >= 1
        depths = dict(re.findall(r'freshindex_queue_depth\{queue="([^"]+)"\} ([0-9.]+)', text))
        assert set(depths) == {f"{prefix}.{q}" for q in ("sync", "parse", "ocr", "embed", "build")}
        assert all(float(v) == 0 for v in depths.values())  # the run is done: nothing waits
        # And the worker's own volumes, which the disk alert watches beside serve's
        assert _value(text, "freshindex_disk_free_bytes", dir="data") > 0, text[:3000]
        assert _value(text, "freshindex_disk_size_bytes", dir="vectors") > 0



def test_queue_depth_counts_waiting_messages_on_redis_and_rabbitmq(redis_url: str) -> None:
    from freshindex.celery import build_app
    from freshindex.settings import load_settings
    from freshindex.workers import exporter

    for url in (redis_url, "amqp://guest:guest@127.0.0.1:5672//"):
        app = build_app(load_settings(broker={"url": url}))
        queue = f"fi-depth-{uuid.uuid4().hex[:8]}"
        try:
            # Given three messages waiting in a queue nobody consumes
            for _ in range(3):
                app.send_task("freshindex.nothing", queue=queue)
            # Then the exporter reads 3 there, and 0 for a queue never declared
            depths = exporter.queue_depths(app, [queue, f"{queue}-never"])
            assert depths == {queue: 3, f"{queue}-never": 0}, (url, depths)
        finally:
            with app.connection_for_write() as conn:
                conn.default_channel.queue_delete(queue)
            app.close()
