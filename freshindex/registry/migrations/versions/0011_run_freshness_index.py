"""A source's freshness reads its own runs by index, not the whole run history.

``FreshnessStore._verified`` (behind ``health``, the stale-source labels of
the query path and the freshness gauges) took the latest verified, succeeded
and finished run of *every* source: four aggregates over all of
``sync_runs``, 36-82 ms at 100k runs (bench/results/registry_plans.md) and
growing with the history. It now filters by the sources asked for, and two
indexes answer each figure per source.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_sync_runs_source_status_finished", "sync_runs", ["source_id", "status", "finished_at"])
    op.create_index("ix_sync_runs_source_id_id", "sync_runs", ["source_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_sync_runs_source_id_id", table_name="sync_runs")
    op.drop_index("ix_sync_runs_source_status_finished", table_name="sync_runs")
