"""End to end on beat: ``celery -A freshindex.celery beat`` and a worker poll a folder source on their own.

Real parts: a Celery beat process started exactly as an operator would
(``celery -A freshindex.celery beat``, no extra step), a ``freshindex
worker`` process, Redis, PostgreSQL, Qdrant Edge in the shared data dir, and
the hashing embedder (this test is about scheduling, not embeddings).  The
test never triggers a sync: it edits the folder and waits until a query of
the active snapshot answers with the edit, then checks that the freshness
sweep ran on beat too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from tests.conftest import ROOT, worker_process
from tests.conftest import distributed_env as make_env

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def env(tmp_path: Path, pg_url: str, redis_url: str) -> dict[str, str]:
    return make_env(tmp_path, pg_url, redis_url, "fi-beat", FRESHINDEX_EMBEDDING__PROVIDER="hashing",
                    FRESHINDEX_SCHEDULES__POLL_TICK_S="1", FRESHINDEX_SCHEDULES__SWEEP_INTERVAL_S="1")


@contextlib.contextmanager
def beat_process(env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen]:
    """``celery -A freshindex.celery beat`` started as an operator would, from an empty directory."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    log = open(tmp_path / "beat.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "freshindex.celery", "beat", "-l", "INFO"],
                            cwd=workdir, env={**base, **env, "PYTHONPATH": str(ROOT)}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        assert list(workdir.iterdir()) == []  # beat keeps its state in the data dir, not where it was started


#: Deadlines for conditions, not expected durations: on a loaded 2-core machine a worker's first build
#: (imports, Celery start, PostgreSQL migrations) has taken minutes; a passing run returns as soon as it holds.
DEADLINE_S = 240.0


def _wait(predicate, timeout: float, what: str, logs: list[Path]) -> None:
    """Poll ``predicate`` until it is true; an exception in it (a read racing the worker's swap) is retried.

    Only a deadline fails the test, with the last exception and the logs' tails.
    """
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as exc:  # retried until the deadline, reported then
            last = exc
        time.sleep(0.5)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs if p.exists())
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last!r})\n{tails}")


# Above the suite's 300 s per test: five conditions each get DEADLINE_S, so a slow machine fails (if at all)
# on the condition that did not hold, with the worker's and beat's logs, not on the global timeout.
@pytest.mark.timeout(6 * DEADLINE_S)
def test_beat_and_a_worker_poll_a_folder_source_and_pick_up_an_edit(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "guide.md").write_text("# Guide\n\nThe deploy freeze starts on Friday pelican4.\n")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    svc = Services(load_settings())
    logs = [tmp_path / "worker.log", tmp_path / "beat.log"]
    question = "When does the deploy freeze start? pelican4"
    try:
        svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default",
                                setup=SourceSetup(poll_interval_s=2))
        svc.registry.set_freshness_policy("docs", stale_after_s=3600)
        with worker_process(env, logs[0], "beat-e2e", "-c", "1"), \
                beat_process(env, tmp_path):
            # Given beat polls the never-synced source on its own
            def serves(word: str) -> bool:
                packet = svc.client.retrieve(question, kb="default")
                return bool(packet.evidence) and word in packet.evidence[0].text

            def built_runs() -> list[int]:
                return [r.id for r in svc.registry.sync_runs("docs") if r.build_status == "built"]

            _wait(lambda: serves("Friday"), DEADLINE_S, "the first scheduled build to serve the file", logs)
            _wait(lambda: bool(built_runs()), DEADLINE_S, "the first polling run to be recorded built", logs)
            first_built = built_runs()
            # When the file is edited (a size change too, so a coarse mtime cannot hide it),
            # the next poll picks it up without anyone asking
            (kb / "guide.md").write_text("# Guide\n\nThe deploy freeze starts on Thursday pelican4.\n")
            _wait(lambda: serves("Thursday"), DEADLINE_S, "the scheduled poll to serve the edit", logs)

            # (the run's build status and lag are recorded around the swap: wait for them, do not race them)
            _wait(lambda: max(built_runs()) > max(first_built), DEADLINE_S,
                  "the polling run that served the edit to be recorded built", logs)
            assert {r.trigger for r in svc.registry.sync_runs("docs")} == {"schedule"}
            # And the run's sync lag was recorded from the edit's modification time
            _wait(lambda: any(r["lag_s"] is not None for r in svc.registry.run_lags(source_id="docs")), DEADLINE_S,
                  "a recorded sync lag", logs)
            assert all(r["lag_s"] >= 0 for r in svc.registry.run_lags(source_id="docs"))
            # And the freshness sweep ran on beat (it writes last_verified_at onto the source row)
            from freshindex.registry.schema import Source

            def swept() -> bool:
                with svc.registry.session() as s:
                    return s.get(Source, "docs").last_verified_at is not None

            _wait(swept, DEADLINE_S, "a freshness sweep on beat", logs)
            assert svc.registry.source_freshness(source_id="docs")[0].last_verified_at is not None
    finally:
        svc.close()


def test_s3_notifications_through_sqs_drive_the_syncs(s3_server: str, tmp_path: Path) -> None:
    """moto's server: S3 ObjectCreated/ObjectRemoved notifications land in an SQS queue, the poller
    turns them into sync tickets, ``serve``'s dispatcher (in this process, embedded) syncs them."""
    import uuid

    import boto3

    from freshindex.api.sqs import SqsPoller, sqs_client
    from freshindex.dispatch import start_dispatcher

    creds = {"endpoint_url": s3_server, "region_name": "us-east-1", "aws_access_key_id": "k",
             "aws_secret_access_key": "s"}
    s3, sqs = boto3.client("s3", **creds), boto3.client("sqs", **creds)
    bucket = f"notify-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    queue_url = sqs.create_queue(QueueName=bucket)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={"QueueConfigurations": [
        {"QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})
    settings = load_settings(
        data_dir=tmp_path / "data", embedding={"provider": "hashing"},
        sources={"s3": {"endpoint_url": s3_server, "access_key_id": "k", "secret_access_key": "s"}},
        webhooks={"sqs_queue_url": queue_url, "sqs_wait_s": 1, "debounce_s": 0.2})
    svc = Services(settings)
    dispatcher = start_dispatcher(svc)
    poller = SqsPoller(svc.registry, svc.metrics, queue_url=queue_url, client=sqs_client(settings), wait_s=1)
    question = "What is the parking rule? ibis3"
    try:
        svc.registry.add_source("policies", kind="s3", location=f"s3://{bucket}/policies", owner="t", kb="default")
        s3.put_object(Bucket=bucket, Key="other/ignored.md", Body=b"# Ignored\n\nnot under the prefix.\n")
        s3.put_object(Bucket=bucket, Key="policies/parking level.md",
                      Body=b"# Parking\n\nVisitors park on level two ibis3.\n")

        def served(expect: bool) -> bool:
            poller.poll_once()
            keys = [e.key for e in svc.client.retrieve(question, kb="default").evidence]
            return ("parking level.md" in keys) == expect

        _wait(lambda: served(True), 120, "the created object to be served", [])
        runs = svc.registry.sync_runs("policies")
        assert runs and all(r.trigger.startswith("webhook:") for r in runs)
        ticket = svc.registry.sync_tickets("policies")[0]
        assert list(ticket.paths) == ["parking level.md"]  # URL-decoded, relative to the prefix
        # When the object is removed, its notification withdraws it
        s3.delete_object(Bucket=bucket, Key="policies/parking level.md")
        s3.put_object(Bucket=bucket, Key="policies/keep.md", Body=b"# Keep\n\nunrelated.\n")  # no deletion guard
        _wait(lambda: served(False), 120, "the removed object to be withdrawn", [])
        # A malformed message is counted and deleted, not retried for ever
        sqs.send_message(QueueUrl=queue_url, MessageBody="not json")
        assert poller.poll_once().malformed == 1
        assert poller.poll_once().messages == 0
    finally:
        dispatcher.stop()
        svc.close()
