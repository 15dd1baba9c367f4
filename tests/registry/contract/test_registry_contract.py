"""The registry passes :class:`freshindex.testing.RegistryContract` on SQLite and on the local PostgreSQL.

One migrated database per class (creating and migrating a PostgreSQL
database takes about a second), shared by every part of the contract: the
source catalog, the run ledger, staging and chunks, snapshots, locks, source
state, twins, golden sets, refusals, webhooks, API keys.
"""

from __future__ import annotations

from pathlib import Path

from freshindex.testing import RegistryContract
from tests.registry.contract.conftest import drop_postgres_url, postgres_url


class TestSQLiteRegistry(RegistryContract):
    def registry_url(self, tmp: Path) -> str:
        return f"sqlite:///{tmp / 'registry.db'}"


class TestPostgresRegistry(RegistryContract):
    def registry_url(self, tmp: Path) -> str:
        return postgres_url()

    def drop_url(self, url: str) -> None:
        drop_postgres_url(url)
