"""The registry passes :class:`freshindex.testing.RegistryContract` on SQLite and on the local PostgreSQL.

One migrated database per class (creating and migrating a PostgreSQL
database takes about a second); the other protocols' suites in this folder
use the ``reg`` fixture of ``conftest.py`` instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from freshindex.testing import RegistryContract
from tests.conftest import _create_pg_database, _drop_pg_database, port_open


class TestSQLiteRegistry(RegistryContract):
    def registry_url(self, tmp: Path) -> str:
        return f"sqlite:///{tmp / 'registry.db'}"


class TestPostgresRegistry(RegistryContract):
    def registry_url(self, tmp: Path) -> str:
        if not port_open("127.0.0.1", 5432):
            pytest.fail("PostgreSQL is not running on 127.0.0.1:5432 (.ci/run starts it)")
        return _create_pg_database()[1]

    def drop_url(self, url: str) -> None:
        _drop_pg_database(url.rsplit("/", 1)[-1])
