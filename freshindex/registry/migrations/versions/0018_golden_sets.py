"""Golden sets registered per knowledge base, run after each swap (``freshindex golden-sets``).

``golden_sets`` keeps, per (kb, name), the set's JSONL text, its gates and k, and the newest evaluation's
snapshot, time, pass and figures.  Nothing is back-filled: no set is registered before this revision.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""
import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "golden_sets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kb", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("thresholds", sa.JSON(), nullable=False),
        sa.Column("top_k", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_snapshot_id", sa.String(length=128), nullable=True),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_passed", sa.Boolean(), nullable=True),
        sa.Column("last_metrics", sa.JSON(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("kb", "name", name="uq_golden_sets_kb_name"),
    )
    op.create_index("ix_golden_sets_kb", "golden_sets", ["kb"])


def downgrade() -> None:
    op.drop_index("ix_golden_sets_kb", table_name="golden_sets")
    op.drop_table("golden_sets")
