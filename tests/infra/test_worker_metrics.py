"""The worker exporter: its bind address, no `pid` label, queue head age, heartbeat age, task states.

Real parts: prometheus-client's multiprocess mode across real forked
processes, the exporter's HTTP server, Redis as the broker. The worker
itself is stood in for by the signals Celery sends (task_prerun/postrun,
worker_ready): `tests/workers/test_exporter.py` runs a whole worker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import httpx
import pytest

from freshindex.settings import load_settings
from tests.conftest import ROOT, free_port

SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from freshindex.workers import exporter
    exporter.prepare(Path(sys.argv[1]))
    from celery.signals import task_postrun, task_prerun, worker_ready
    from freshindex.celery import build_app
    from freshindex.health.metrics import Metrics
    from freshindex.settings import load_settings
    from freshindex.workers.probe import heartbeat_path

    settings = load_settings(broker={"url": sys.argv[2]}, data_dir=sys.argv[5])
    app = build_app(settings)
    exporter.install(app, port=int(sys.argv[3]), queues=[sys.argv[4]], host=settings.broker.worker_metrics_bind,
                     heartbeat=heartbeat_path(settings, "worker"))
    # two "pool children", each with its own value of a worker gauge, then gone
    for stamp in (100.0, 123.0):
        pid = os.fork()
        if pid == 0:
            m = Metrics()
            m.last_sync.labels("docs").set(stamp)
            m.ocr_pages.labels("docs").inc(4)
            os._exit(0)
        os.waitpid(pid, 0)

    class Task:
        name = "freshindex.build_snapshot"

    for task_id, state in (("t1", "SUCCESS"), ("t2", "FAILURE"), ("t3", "FAILURE")):
        task_prerun.send(sender=Task, task_id=task_id, task=Task)
        task_postrun.send(sender=Task, task_id=task_id, task=Task, state=state)
    worker_ready.send(sender=None)
    print("ready", flush=True)
    sys.stdin.read()
""")


def _value(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def _listening(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) listening on ``port``."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                out.add(address)
    return out


@pytest.mark.services
def test_the_exporter_binds_loopback_exports_no_pid_and_reads_queue_head_and_heartbeat(
    tmp_path: Path, redis_url: str
) -> None:
    import redis

    broker = redis_url
    queue = f"fi-head-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(broker)
    port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    beat = data / "worker.heartbeat"
    beat.touch()
    os.utime(beat, (time.time() - 40, time.time() - 40))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path / "mp"), broker, str(port), queue, str(data)],
                            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        # Given two messages waiting in the queue
        from freshindex.celery import build_app

        app = build_app(load_settings(broker={"url": broker}))
        for i in range(2):
            app.send_task("freshindex.nothing", args=[i], queue=queue)

        def scrape() -> str:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text

        first = scrape()
        time.sleep(1.2)
        second = scrape()
        # Then: bound to the loopback only (the default of broker.worker_metrics_bind)
        assert _listening(port) == {"0100007F"}
        # no series has a pid label; the gauge of the two children is their max
        assert "pid=" not in second, [line for line in second.splitlines() if "pid=" in line]
        assert _value(second, "freshindex_last_successful_sync_timestamp_seconds", source="docs") == 123.0
        assert _value(second, "freshindex_ocr_pages_total", source="docs") == 8.0
        # task executions by Celery state
        assert _value(second, "freshindex_task_runs_total", task="freshindex.build_snapshot", state="FAILURE") == 2
        assert _value(second, "freshindex_task_runs_total", task="freshindex.build_snapshot", state="SUCCESS") == 1
        # depth, and a head that has not moved between two scrapes ages
        assert _value(second, "freshindex_queue_depth", queue=queue) == 2
        assert _value(first, "freshindex_queue_head_age_seconds", queue=queue) == 0
        assert 1.0 <= _value(second, "freshindex_queue_head_age_seconds", queue=queue) < 120
        # the heartbeat file was touched 40 s ago
        assert 39 <= _value(second, "freshindex_worker_heartbeat_age_seconds") < 600  # a slow start adds to it

        # When a consumer takes the head, the next message's age starts again from 0
        client.rpop(queue)
        third = scrape()
        assert _value(third, "freshindex_queue_depth", queue=queue) == 1
        assert _value(third, "freshindex_queue_head_age_seconds", queue=queue) == 0
        client.delete(queue)
        assert _value(scrape(), "freshindex_queue_head_age_seconds", queue=queue) == 0
        app.close()
    finally:
        proc.kill()
        proc.wait(timeout=10)
        client.delete(queue)


def test_head_ages_follow_the_head_and_reset_on_a_new_one() -> None:
    from freshindex.workers.exporter import HeadAges

    now = [0.0]
    ages = HeadAges(clock=lambda: now[0])
    assert ages.observe("q", "a") == 0
    now[0] = 30
    assert ages.observe("q", "a") == 30
    assert ages.observe("q", "b") == 0  # consumed: a new head
    now[0] = 45
    assert ages.observe("q", "b") == 15
    assert ages.observe("q", None) == 0  # empty
    assert ages.observe("q", "b") == 0


def test_the_bind_setting_defaults_to_loopback_and_the_manifests_open_it() -> None:
    import yaml

    assert load_settings().broker.worker_metrics_bind == "127.0.0.1"
    config = yaml.safe_load((ROOT / "infra" / "k8s" / "configmap.yaml").read_text())
    assert config["data"]["FRESHINDEX_BROKER__WORKER_METRICS_BIND"] == "0.0.0.0"
    compose = yaml.safe_load((ROOT / "infra" / "docker-compose.yml").read_text())
    for name in ("worker-sync", "worker-parse", "worker-ocr", "worker-embed"):
        env = compose["services"][name]["environment"]
        assert env["FRESHINDEX_BROKER__WORKER_METRICS_BIND"] == "0.0.0.0", name
        assert re.fullmatch(r"\d+", env["FRESHINDEX_BROKER__WORKER_METRICS_PORT"])
