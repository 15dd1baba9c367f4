"""End to end, distributed: a separate Celery worker process on the local Redis
broker (and again on the local RabbitMQ), the registry on the local
PostgreSQL, the real embedding model.

The test enqueues folder-source syncs; the worker lists, parses, embeds,
stages, builds and swaps; the test then queries the new snapshot.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.workers.runner import sync_distributed
from tests.conftest import EXAMPLES, coordinator, port_open, worker_process
from tests.conftest import distributed_env as make_env

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture(params=["redis", "rabbitmq"])
def broker_url(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        return request.getfixturevalue("redis_url")
    if not port_open("127.0.0.1", 5672):
        pytest.fail("RabbitMQ is not running on 127.0.0.1:5672 (.ci/run starts it)")
    return "amqp://guest:guest@127.0.0.1:5672//"


@pytest.fixture
def distributed_env(tmp_path: Path, pg_url: str, broker_url: str) -> dict[str, str]:
    return make_env(tmp_path, pg_url, broker_url, "fi-test")


@pytest.fixture
def worker(distributed_env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen]:
    with worker_process(distributed_env, tmp_path / "worker.log", "e2e") as proc:
        yield proc
        if proc.poll() not in (None, 0):
            print((tmp_path / "worker.log").read_text()[-5000:])


def test_a_separate_worker_syncs_and_the_new_snapshot_answers(
    distributed_env: dict[str, str], worker: subprocess.Popen, sample_kb: Path, tmp_path: Path, monkeypatch
) -> None:
    with coordinator(distributed_env, monkeypatch) as (svc, app):
        svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
        first = sync_distributed(svc, app, "docs", timeout=240)
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        assert first.run.status == "succeeded" and first.build_status == "built", first.as_dict()
        assert first.snapshot.id == "default-v1"
        assert first.run.summary["documents"]["added"] == 8

        shutil.copytree(EXAMPLES / "changes" / "add", sample_kb, dirs_exist_ok=True)
        second = sync_distributed(svc, app, "docs", timeout=240)
        assert second.build_status == "built" and second.snapshot.id == "default-v2"
        assert second.run.summary["documents"]["added"] == 1
        assert second.run.summary["chunks_embedded"] == 2

        packet = svc.client.retrieve("Who approves refunds above 10,000 USD?", kb="default")
        assert packet.snapshot_id == "default-v2"
        assert packet.evidence[0].key == "guides/faq.md"
        assert "CFO" in packet.evidence[0].text
