"""End to end: a registered golden set is asked after each swap, and its figures appear on the worker's port.

Real parts: ``celery -A freshindex.celery beat`` (it polls the folder source, so no sync is triggered by the
test), a ``freshindex worker`` process with its metrics exporter, Redis, PostgreSQL, Qdrant Edge in the shared
data dir and the hashing embedder.  Two paths lead to an evaluation, one test each:

* the build task's own send after a swap (beat's evaluation tick set to an hour, so it never fires here);
* beat's ``evaluate-golden-sets`` tick, for a set registered after the swap it is asked on (the build task
  had nothing to send then).
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from tests.conftest import distributed_env as make_env
from tests.conftest import free_port, worker_process
from tests.e2e.test_freshness import DEADLINE_S, _wait, beat_process

pytestmark = [pytest.mark.services, pytest.mark.slow]

GOLDEN = ('{"id": "install", "question": "How do I install freshindex?", "expected": "install.md", '
          '"required_passage": "pip install freshindex"}\n'
          '{"id": "refunds", "question": "Who approves refunds above 10,000 USD?", "expected": "refunds.md", '
          '"required_passage": "approval of the CFO"}\n')


def _env(tmp_path: Path, pg_url: str, redis_url: str, eval_interval_s: str) -> dict[str, str]:
    return make_env(tmp_path, pg_url, redis_url, "fi-eval", FRESHINDEX_EMBEDDING__PROVIDER="hashing",
                    FRESHINDEX_SCHEDULES__POLL_TICK_S="1", FRESHINDEX_SCHEDULES__EVAL_INTERVAL_S=eval_interval_s,
                    FRESHINDEX_BROKER__WORKER_METRICS_PORT=str(free_port()))


def _folder(tmp_path: Path) -> Path:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "install.md").write_text("# Install\n\nTo install freshindex run pip install freshindex on Python 3.11.\n")
    (kb / "refunds.md").write_text("# Refunds\n\nRefunds above 10,000 USD need the approval of the CFO first.\n")
    return kb


def _eval_samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The ``freshindex_eval_*`` samples the worker's exporter serves: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) if f.name.startswith("freshindex_eval_") for s in f.samples}


def _ratio(port: int, name: str) -> float | None:
    return _eval_samples(port).get((name, (("golden", "smoke"), ("kb", "default"))))


@pytest.mark.timeout(6 * DEADLINE_S)
def test_a_swap_made_by_the_worker_sends_the_evaluation_and_its_figures_reach_the_worker_port(
        tmp_path: Path, pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env(tmp_path, pg_url, redis_url, eval_interval_s="3600")
    port = int(env["FRESHINDEX_BROKER__WORKER_METRICS_PORT"])
    folder = _folder(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    svc = Services(load_settings())
    logs = [tmp_path / "worker.log", tmp_path / "beat.log"]
    try:
        # Given a golden set registered on kb default before anything is indexed, and a polled source
        svc.registry.add_source("docs", kind="folder", location=str(folder), owner="t", kb="default",
                                setup=SourceSetup(poll_interval_s=2))
        svc.registry.register_golden_set("default", "smoke", GOLDEN, thresholds={"min_hit": 1.0})
        with worker_process(env, logs[0], "eval-e2e", "-c", "1"), beat_process(env, tmp_path):
            # When beat's poll syncs the source and the worker swaps to default-v1
            # Then the set is asked on default-v1 and the worker's port serves its figures
            _wait(lambda: _ratio(port, "freshindex_eval_hit_ratio") == 1.0, DEADLINE_S,
                  "the evaluation of default-v1 on the worker's metrics port", logs)
            assert _ratio(port, "freshindex_eval_passage_ratio") == 1.0
            assert _ratio(port, "freshindex_eval_passed") == 1.0
            (row,) = svc.registry.list_golden_sets("default")
            assert (row.last_snapshot_id, row.last_passed) == ("default-v1", True)
            # When a document goes from the source and the next poll swaps to default-v2
            (folder / "refunds.md").unlink()
            _wait(lambda: _ratio(port, "freshindex_eval_hit_ratio") == 0.5, DEADLINE_S,
                  "the evaluation of default-v2 on the worker's metrics port", logs)
            # Then the figures dropped, the gate failed and the lost question is counted by its stage
            assert _ratio(port, "freshindex_eval_passed") == 0.0
            failures = {dict(lb)["stage"]: v for (name, lb), v in _eval_samples(port).items()
                        if name == "freshindex_eval_failures"}
            assert sum(failures.values()) == 1.0, failures
            (row,) = svc.registry.list_golden_sets("default")
            assert (row.last_snapshot_id, row.last_passed) == ("default-v2", False)
            assert svc.registry.active_snapshot("default").id == "default-v2"
    finally:
        svc.close()


@pytest.mark.timeout(4 * DEADLINE_S)
def test_beats_tick_asks_a_set_registered_after_the_swap(
        tmp_path: Path, pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env(tmp_path, pg_url, redis_url, eval_interval_s="1")
    port = int(env["FRESHINDEX_BROKER__WORKER_METRICS_PORT"])
    folder = _folder(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    svc = Services(load_settings())
    logs = [tmp_path / "worker.log", tmp_path / "beat.log"]
    try:
        svc.registry.add_source("docs", kind="folder", location=str(folder), owner="t", kb="default",
                                setup=SourceSetup(poll_interval_s=3600))
        with worker_process(env, logs[0], "eval-tick-e2e", "-c", "1"), beat_process(env, tmp_path):
            # Given default-v1 serves, built by the worker while no set was registered
            _wait(lambda: svc.registry.active_snapshot("default") is not None, DEADLINE_S, "default-v1", logs)
            assert _ratio(port, "freshindex_eval_hit_ratio") is None
            # When a set is registered now (no swap follows: the source polls hourly)
            svc.registry.register_golden_set("default", "smoke", GOLDEN)
            # Then beat's tick finds it due on default-v1 and the worker asks it
            _wait(lambda: _ratio(port, "freshindex_eval_hit_ratio") == 1.0, DEADLINE_S,
                  "beat's tick to evaluate the set on default-v1", logs)
            (row,) = svc.registry.list_golden_sets("default")
            assert row.last_snapshot_id == "default-v1"
    finally:
        svc.close()
