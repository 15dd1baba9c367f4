"""Alembic environment, driven by :func:`registry.db.upgrade` (no alembic.ini).

The connection arrives in ``config.attributes["connection"]``; offline (SQL
script) mode is not supported.
"""

from alembic import context

from freshindex.registry.schema import Base

config = context.config
connection = config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
