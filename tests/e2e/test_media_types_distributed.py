"""A listing's media types reach the document tasks of distributed workers, and such documents settle.

Given a source whose listing types keys without an extension a parser reads
(``pages/ferry`` as text/html, ``exports/1234`` as text/markdown: the toy
kind of tests/e2e/typed_source.py, which the worker process loads), a Redis
broker, a PostgreSQL registry and one ``freshindex worker`` process with
stage queues on: the first sync parses each key by its media type and
records that parser's version; the second sync plans nothing and runs no
document task.  Before the planned documents and the task arguments carried
the media type, the workers read a bare key as plain text, recorded the text
parser's version, and the planner (which compares the media type's parser)
re-processed those documents at every sync.  A document without a media
type keeps the six arguments a worker of the previous release takes.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.workers.chunking import CHUNKER_VERSION
from freshindex.workers.parsing import registry
from freshindex.workers.runner import sync_distributed
from tests.conftest import ROOT, coordinator, distributed_env
from tests.e2e import typed_source

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def env(tmp_path: Path, pg_url: str, redis_url: str) -> dict[str, str]:
    return distributed_env(tmp_path, pg_url, redis_url, "fi-media", FRESHINDEX_BROKER__STAGE_QUEUES="true",
                           FRESHINDEX_EMBEDDING__PROVIDER="hashing")


@pytest.fixture
def worker_log(env: dict[str, str], tmp_path: Path) -> Iterator[Path]:
    """One worker on every queue, started through tests/e2e/typed_source.py so it knows the ``typed`` kind."""
    log_path = tmp_path / "worker.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.e2e.typed_source", "worker", "-c", "2",
                                 "--hostname", f"typed-{uuid.uuid4().hex[:6]}@%h"],
                                cwd=ROOT, env={**base, **env}, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            yield log_path
            assert proc.poll() is None, log_path.read_text()[-3000:]
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def typed_kind() -> Iterator[None]:
    typed_source.install()
    yield
    with contextlib.suppress(Exception):
        typed_source.uninstall()


def _document_tasks(log: Path) -> list[tuple[object, ...]]:
    """The arguments of every ``process_document`` a worker received (Celery's "Task ... received" line
    carries none, so they are read from the trace line of its end)."""
    found = re.findall(r"Task freshindex\.process_document\[[^\]]+\] succeeded in [^:]+: '[^']*' .*?"
                       r"'args': \"(\([^\"]*\))\"", log.read_text())
    return [ast.literal_eval(args) for args in found]


def _version(parser: str) -> str:
    spec = registry.spec_named(parser)
    assert spec is not None
    return f"{spec.version}.{CHUNKER_VERSION}"


def test_a_bare_key_parsed_by_its_media_type_on_a_worker_settles(
        env: dict[str, str], worker_log: Path, typed_kind: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with coordinator(env, monkeypatch) as (svc, app):
        svc.registry.add_source("typed", kind=typed_source.KIND, location="typed://x", owner="t", kb="default")
        # When the source is synced through the worker
        first = sync_distributed(svc, app, "typed", timeout=120)
        # Then each document is read by the parser its media type (or extension) names, and records its version
        assert first.run.status == "succeeded" and first.build_status == "built", first.as_dict()
        assert first.run.summary["documents"]["added"] == len(typed_source.LISTED)
        versions = {k: d.parser_version for k, d in svc.registry.documents_for_source("typed").items()}
        assert versions == {"pages/ferry": _version("html"), "export.php": _version("html"),
                            "exports/1234": _version("markdown"), "guide/plain.md": _version("markdown")}
        hits = svc.client.retrieve("When does the ferry leave?", kb="default", limit=1).evidence
        assert hits and hits[0].key == "pages/ferry" and hits[0].title == "Ferry"  # read as HTML, not text
        # the media type travelled as the task's seventh argument, and only where there is one
        tasks = {str(args[3]): args for args in _document_tasks(worker_log)}
        assert sorted(tasks) == sorted(typed_source.LISTED), worker_log.read_text()[-3000:]
        assert {k: args[6:] for k, args in tasks.items()} == {
            "pages/ferry": ("text/html; charset=utf-8",), "export.php": ("text/html",),
            "exports/1234": ("text/markdown",), "guide/plain.md": ()}

        # When it is synced again, nothing having changed
        second = sync_distributed(svc, app, "typed", timeout=120)
        # Then nothing is planned and no document task runs
        assert second.run.status == "succeeded", second.as_dict()
        assert second.run.docs_planned == 0, second.run.summary
        assert second.run.summary["documents"].get("unchanged") == len(typed_source.LISTED)
        assert len(_document_tasks(worker_log)) == len(typed_source.LISTED)
