"""The Celery app boots in a fresh process with the tasks and queues we expect."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from freshindex.workers.app import create_app
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
        "freshindex.build_snapshot", "freshindex.collect_tombstones", "freshindex.dispatch_documents",
        "freshindex.embed_document", "freshindex.evaluate_golden_sets", "freshindex.finish_sync", "freshindex.ocr_document",
        "freshindex.poll_sources", "freshindex.process_document", "freshindex.reap_runs",
        "freshindex.reconcile_index", "freshindex.retain_snapshots", "freshindex.sweep_freshness",
        "freshindex.sync_source",
    ]
    assert info["queues"] == ["freshindex.build", "freshindex.embed", "freshindex.ocr", "freshindex.parse",
                              "freshindex.sync"]
    assert info["routes"]["freshindex.process_document"] == {"queue": "freshindex.parse"}
    assert info["routes"]["freshindex.ocr_document"] == {"queue": "freshindex.ocr"}
    assert info["routes"]["freshindex.embed_document"] == {"queue": "freshindex.embed"}
    assert info["routes"]["freshindex.dispatch_documents"] == {"queue": "freshindex.parse"}  # behind its batch
    assert info["routes"]["freshindex.build_snapshot"] == {"queue": "freshindex.build"}
    assert info["routes"]["freshindex.evaluate_golden_sets"] == {"queue": "freshindex.build"}  # after the swap
    assert info["acks_late"] is True


def test_celery_dash_a_finds_the_wired_app_without_import_time_config() -> None:
    # `celery -A freshindex.celery` imports the module, then reads its `app` attribute; beat's
    # schedule must already be there (plain `celery beat` runs no freshindex code of its own).
    probe = ("import json, freshindex.celery as entry; assert entry._app is None; app = entry.app; "
             "print(json.dumps({'main': app.main, 'beat': sorted(e['task'] for e in app.conf.beat_schedule.values()),"
             " 'queues': sorted({e['options']['queue'] for e in app.conf.beat_schedule.values()})}))")
    env_run = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", "FRESHINDEX_BROKER__URL": "redis://127.0.0.1:6379/0"})
    assert env_run.returncode == 0, env_run.stderr
    info = json.loads(env_run.stdout.strip().splitlines()[-1])
    assert info == {"main": "freshindex", "beat": [
        "freshindex.collect_tombstones", "freshindex.evaluate_golden_sets", "freshindex.poll_sources",
        "freshindex.reap_runs", "freshindex.reconcile_index", "freshindex.retain_snapshots",
        "freshindex.sweep_freshness"],
                    "queues": ["freshindex.sync"]}


def test_an_app_built_without_services_refuses_to_run_a_task() -> None:
    # Given the bare app factory (no services factory: the workers build no services of their own)
    from freshindex.core.errors import ConfigError
    from freshindex.settings import load_settings

    app = create_app(load_settings(broker={"url": "memory://"}))
    # When a task runs in it, Then it says how to start a wired worker instead of building anything
    with pytest.raises(ConfigError, match=r"freshindex\.celery"):
        app.tasks["freshindex.finish_sync"].run(1)
    app.close()


def test_the_tasks_run_with_the_services_the_factory_builds() -> None:
    # Given an app whose factory hands out a stand-in (any object with the TaskServices attributes)
    from freshindex.settings import load_settings

    built: list[object] = []

    class Registry:
        def stalled_runs(self, lease_s: float) -> list:
            return []

    class Metrics:
        class tasks:
            @staticmethod
            def labels(*_: str):
                return Metrics.tasks

            @staticmethod
            def inc() -> None:
                built.append("counted")

    class Stub:
        registry, metrics = Registry(), Metrics()

        def close(self) -> None: ...

    def factory() -> Stub:
        built.append("factory")
        return Stub()

    app = create_app(load_settings(broker={"url": "memory://"}), services_factory=factory)
    # When the reaper task runs twice, Then the factory ran once and the task used what it built
    assert app.tasks["freshindex.reap_runs"].run() == {"reaped": []}
    assert app.tasks["freshindex.reap_runs"].run() == {"reaped": []}
    assert built == ["factory", "counted", "counted"]
    app.close()
