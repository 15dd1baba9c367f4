"""Fixtures of the registry tests that are not the package's contract: one registry per backend per module.

The contract itself (:class:`freshindex.testing.RegistryContract`) runs from
``test_registry_contract.py`` with a class fixture of its own; this module's
``reg`` serves the tests here that check a consumer (the reaper, the
scheduler) over the registry's records, on SQLite and on the local
PostgreSQL.  Both migrate and open through
:func:`freshindex.testing.registry.open_migrated`.  Tests keep apart by
naming everything they create with :func:`fresh`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from freshindex.registry import Registry
from freshindex.testing.registry import open_migrated
from tests.conftest import _create_pg_database, _drop_pg_database, port_open


def postgres_url() -> str:
    """A new, empty database on the local PostgreSQL (drop it with :func:`drop_postgres_url`)."""
    if not port_open("127.0.0.1", 5432):
        pytest.fail("PostgreSQL is not running on 127.0.0.1:5432 (.ci/run starts it)")
    return _create_pg_database()[1]


def drop_postgres_url(url: str) -> None:
    _drop_pg_database(url.rsplit("/", 1)[-1])


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def reg(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A migrated registry on each backend, shared by the tests of one module."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('registry') / 'registry.db'}"
    else:
        url = postgres_url()
    try:
        with open_migrated(url) as registry:
            yield registry
    finally:
        if request.param != "sqlite":
            drop_postgres_url(url)


@pytest.fixture
def fresh() -> Callable[[str], str]:
    """Unique lower-case names (valid as source ids, knowledge bases, lock names)."""
    tag = uuid.uuid4().hex[:8]
    return lambda prefix: f"{prefix}-{tag}"
