"""The Celery app boots in a fresh process with the tasks and queues we expect."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import json
from freshindex.settings import load_settings
from freshindex.workers.app import create_app
app = create_app(load_settings(broker={"url": "redis://127.0.0.1:6379/0"}))
print(json.dumps({
    "tasks": sorted(t for t in app.tasks if t.startswith("freshindex.")),
    "routes": app.conf.task_routes,
    "queues": sorted(q.name for q in app.conf.task_queues),
    "acks_late": app.conf.task_acks_late,
}))
"""


def test_the_worker_app_registers_every_task_on_its_queue() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["tasks"] == [
        "freshindex.build_snapshot", "freshindex.finish_sync", "freshindex.poll_sources",
        "freshindex.process_document", "freshindex.reap_runs", "freshindex.sync_source",
    ]
    assert info["queues"] == ["freshindex.build", "freshindex.parse", "freshindex.sync"]
    assert info["routes"]["freshindex.process_document"] == {"queue": "freshindex.parse"}
    assert info["routes"]["freshindex.build_snapshot"] == {"queue": "freshindex.build"}
    assert info["acks_late"] is True


def test_celery_dash_a_workers_finds_the_app_without_import_time_config() -> None:
    # `celery -A freshindex.workers` imports the package, then reads its `app` attribute.
    probe = ("import freshindex.workers as workers, sys; assert '_app' in vars(workers) and workers._app is None; "
             "print(workers.app.main)")
    env_run = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", "FRESHINDEX_BROKER__URL": "redis://127.0.0.1:6379/0"})
    assert env_run.returncode == 0, env_run.stderr
    assert env_run.stdout.strip() == "freshindex"
