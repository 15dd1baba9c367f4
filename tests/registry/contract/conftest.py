"""Fixtures of the registry contract suites: one registry per backend per module.

Each suite states the guarantees of one protocol of :mod:`registry.protocols`
and runs them on SQLite and on the local PostgreSQL.  Creating and migrating a
PostgreSQL database takes about a second, so a module shares one database per
backend; tests keep apart by naming everything they create with
:func:`fresh` (unique source ids, knowledge bases, lock names, model ids).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from freshindex.registry import Registry
from freshindex.registry import db as registry_db
from tests.conftest import _create_pg_database, _drop_pg_database, port_open


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def reg(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A migrated registry on each backend, shared by the tests of one module."""
    name = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('registry') / 'registry.db'}"
    else:
        if not port_open("127.0.0.1", 5432):
            pytest.fail("PostgreSQL is not running on 127.0.0.1:5432 (.ci/run starts it)")
        name, url = _create_pg_database()
    engine = registry_db.make_engine(url)
    registry_db.upgrade(engine)
    engine.dispose()
    registry = Registry.open(url, auto_migrate=False)
    try:
        yield registry
    finally:
        registry.close()
        if name is not None:
            _drop_pg_database(name)


@pytest.fixture
def fresh() -> Callable[[str], str]:
    """Unique lower-case names (valid as source ids, knowledge bases, lock names)."""
    tag = uuid.uuid4().hex[:8]
    return lambda prefix: f"{prefix}-{tag}"

