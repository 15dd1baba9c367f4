"""Indexes for the registry's hot queries that scanned whole tables at scale.

Found by ``bench/registry_plans.py`` (EXPLAIN ANALYZE of every hot registry
statement at 1M documents on PostgreSQL, ``bench/results/registry_plans.md``):

* ``documents.content_hash``: the canonical-twin lookup of every staged
  document (``FreshnessStore.canonical_twin``) read all documents;
* ``documents.valid_until`` / ``supersedes`` / ``withdrawn_reason`` (partial:
  only the rows that have one): the freshness sweep read all documents three
  times per run;
* ``sync_runs.build_status``: the reaper's "running or build pending" scan
  read every run ever recorded (``status`` was indexed, ``build_status`` not,
  so the OR could not use either);
* ``tombstones (kb) WHERE applied_snapshot_id IS NULL`` (partial): the
  tombstone-backlog gauge read every tombstone of the knowledge base.

Plain ``CREATE INDEX`` (it blocks writes to the table while it builds; at
1M documents each takes seconds, see the benchmark).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

#: name -> (table, column, partial-index condition or None)
_INDEXES = {
    "ix_documents_content_hash": ("documents", "content_hash", None),
    "ix_documents_valid_until": ("documents", "valid_until", "valid_until IS NOT NULL"),
    "ix_documents_supersedes": ("documents", "supersedes", "supersedes IS NOT NULL"),
    "ix_documents_withdrawn_reason": ("documents", "withdrawn_reason", "withdrawn_reason IS NOT NULL"),
    "ix_sync_runs_build_status": ("sync_runs", "build_status", None),
    "ix_tombstones_unapplied": ("tombstones", "kb", "applied_snapshot_id IS NULL"),
}


def upgrade() -> None:
    for name, (table, column, where) in _INDEXES.items():
        cond: dict[str, Any] = {} if where is None else {"postgresql_where": sa.text(where), "sqlite_where": sa.text(where)}
        op.create_index(name, table, [column], **cond)


def downgrade() -> None:
    for name, (table, _column, _where) in reversed(list(_INDEXES.items())):
        op.drop_index(name, table_name=table)
