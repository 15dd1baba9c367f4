"""The refusal audit: one row per insufficient-evidence answer, for ``freshindex audit refusals``.

``query_refusals`` keeps, per refused question, its knowledge base, time,
snapshot, reason, key terms (and which of them the evidence lacked) and the
sources searched; the question text only where ``audit.store_questions``
allows it.  Nothing is back-filled: refusals before this revision were never
recorded.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""
import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "query_refusals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kb", sa.String(length=63), nullable=False),
        sa.Column("snapshot_id", sa.String(length=128), nullable=True),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("terms", sa.JSON(), nullable=False),
        sa.Column("missing", sa.JSON(), nullable=False),
        sa.Column("sources", sa.JSON(), nullable=False),
        sa.Column("question", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_query_refusals_kb_at", "query_refusals", ["kb", "at"])


def downgrade() -> None:
    op.drop_index("ix_query_refusals_kb_at", table_name="query_refusals")
    op.drop_table("query_refusals")
