"""A task's lease is touched while it works: a long parse, OCR page or embedding is not a dead worker.

The heartbeat is a thread (schedules/reaper.py ``Heartbeat``), started around
each run task (workers/task_base.py) and around an inline sync (workers/runner.py).
These tests hold the work in the ways long work holds a worker: pure Python
holding the GIL between switches, and a child process (tesseract is one) being
waited on, and count the renewals that land in the registry meanwhile.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

from freshindex.registry import Registry
from freshindex.registry.runs import lease_alive
from freshindex.schedules.reaper import Heartbeat


class Counting:
    """The real registry, counting the renewals that reached it."""

    def __init__(self, registry: Registry) -> None:
        self.registry, self.beats = registry, 0

    def heartbeat_run(self, run_id: int, worker: str | None = None) -> None:
        self.registry.heartbeat_run(run_id, worker)
        self.beats += 1


def _run(tmp_path: Path) -> tuple[Registry, int]:
    registry = Registry.open(f"sqlite:///{tmp_path / 'registry.db'}")
    registry.add_source("docs", kind="folder", location=str(tmp_path), owner="t", kb="default")
    run, _ = registry.start_sync_run("docs", "test")
    return registry, run


def test_the_lease_is_touched_while_pure_python_work_holds_the_gil(tmp_path: Path) -> None:
    # Given a run whose heartbeat renews every 20 ms
    registry, run = _run(tmp_path)
    counting = Counting(registry)
    with Heartbeat(counting, run, 0.02):  # type: ignore[arg-type]
        first = counting.beats
        # When the task computes in pure Python, never sleeping, until renewals land (or 60 s pass)
        deadline = time.monotonic() + 60
        while counting.beats < first + 5 and time.monotonic() < deadline:
            sum(i * i for i in range(20_000))
        during = counting.beats - first
    # Then the lease was renewed during the work, not only before and after it
    assert during >= 5
    assert lease_alive(registry.get_sync_run(run), now=dt.datetime.now(dt.UTC), lease_s=60)
    registry.close()


def test_the_lease_is_touched_while_a_child_process_runs(tmp_path: Path) -> None:
    # Given a run whose heartbeat renews every 20 ms
    registry, run = _run(tmp_path)
    counting = Counting(registry)
    with Heartbeat(counting, run, 0.02):  # type: ignore[arg-type]
        first = counting.beats
        # When the task waits on a child process (as the OCR step waits on tesseract) until renewals land
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while counting.beats < first + 5 and time.monotonic() < deadline:
            try:
                child.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        child.communicate(b"")
        during = counting.beats - first
    # Then the lease was renewed while the child ran
    assert during >= 5
    registry.close()
