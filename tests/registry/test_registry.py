"""The registry's schema on SQLite and on the local PostgreSQL: migrated to head, agreeing with the models.

What a registry does with its rows is :class:`freshindex.testing.RegistryContract`'s
(``tests/registry/contract``); this module checks the migrations alone.
"""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from freshindex.core.errors import ConfigError
from freshindex.registry import Registry
from freshindex.registry import db as registry_db
from freshindex.registry.schema import Base


def test_an_upgraded_schema_is_at_head_and_the_models_and_migrations_agree(registry: Registry) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    tables = set(inspect(registry.engine).get_table_names())
    assert set(Base.metadata.tables) <= tables
    assert registry_db.current_revision(registry.engine) == registry_db.head_revision()
    # Autogenerate against the upgraded database finds nothing to do
    with registry.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []


def test_a_postgres_registry_behind_head_refuses_to_open(pg_url: str) -> None:
    with pytest.raises(ConfigError, match="freshindex db upgrade"):
        Registry.open(pg_url)
