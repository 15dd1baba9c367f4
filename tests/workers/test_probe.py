"""The worker and beat heartbeat probes, against real processes on the local Redis.

Given a separate `freshindex worker` (and `freshindex beat`) process, the
heartbeat file is created and refreshed while it runs, `freshindex probe`
exits 0; once the process is frozen (SIGSTOP: alive to the kernel, dead to
its queue) the file goes stale and the probe exits 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.workers.probe import age_s
from tests.conftest import ROOT

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    return {**clean, "FRESHINDEX_DATA_DIR": str(tmp_path / "data"), "FRESHINDEX_BROKER__URL": redis_url,
            "FRESHINDEX_BROKER__QUEUE_PREFIX": f"fi-probe-{uuid.uuid4().hex[:8]}"}


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "w")
    return subprocess.Popen([sys.executable, "-m", "freshindex", *args], cwd=ROOT, env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def _probe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "freshindex", "probe", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def _wait_for(path: Path, timeout: float, log: Path) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return path.stat().st_mtime
        time.sleep(0.2)
    raise AssertionError(f"{path} never appeared; log:\n{log.read_text()[-3000:]}")


@pytest.fixture
def worker(env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen]:
    proc = _start(["worker", "--pool", "solo", "-c", "1", "--hostname", f"probe-{uuid.uuid4().hex[:6]}@%h"], env,
                  tmp_path / "worker.log")
    try:
        yield proc
    finally:
        _stop(proc)


def test_worker_heartbeat_is_refreshed_and_goes_stale_when_frozen(worker: subprocess.Popen, env: dict[str, str],
                                                                   tmp_path: Path) -> None:
    beat_file = tmp_path / "data" / "worker.heartbeat"
    # Before the worker has connected, the probe says not alive
    started = time.monotonic()
    first = _wait_for(beat_file, 90, tmp_path / "worker.log")
    print(f"heartbeat file after {time.monotonic() - started:.1f}s")
    ok = _probe(env, "--max-age", "60")
    assert ok.returncode == 0, ok.stderr
    # The file is refreshed by the running consumer, not only written once at start
    deadline = time.monotonic() + 30
    while beat_file.stat().st_mtime == first and time.monotonic() < deadline:
        time.sleep(0.5)
    assert beat_file.stat().st_mtime > first
    # When the worker is frozen, nothing touches the file any more
    os.killpg(worker.pid, signal.SIGSTOP)
    time.sleep(3)
    frozen_at = beat_file.stat().st_mtime
    time.sleep(2)
    assert beat_file.stat().st_mtime == frozen_at
    stale = _probe(env, "--max-age", "2")
    assert stale.returncode == 1 and "not alive" in stale.stderr
    assert age_s(beat_file) > 2


def test_probe_fails_without_a_heartbeat_file(env: dict[str, str]) -> None:
    missing = _probe(env, "--role", "beat")
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_beat_heartbeat_is_touched_by_the_scheduler(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()  # beat's shelve file needs its folder (an emptyDir in Kubernetes)
    proc = _start(["beat"], env, tmp_path / "beat.log")
    try:
        _wait_for(tmp_path / "data" / "beat.heartbeat", 60, tmp_path / "beat.log")
        ok = _probe(env, "--role", "beat", "--max-age", "180")
        assert ok.returncode == 0, ok.stderr
    finally:
        _stop(proc)
