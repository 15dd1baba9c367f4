"""Snapshot archive checksums and per-knowledge-base canary queries.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("snapshots") as batch_op:
        batch_op.add_column(sa.Column("archive_sha256", sa.String(length=64), nullable=True))
    op.create_table(
        "canaries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kb", sa.String(length=63), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("expected_key", sa.Text(), nullable=False),
        sa.Column("top_k", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("kb", "question", name="uq_canaries_kb_question"),
    )
    with op.batch_alter_table("canaries") as batch_op:
        batch_op.create_index(batch_op.f("ix_canaries_kb"), ["kb"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("canaries") as batch_op:
        batch_op.drop_index(batch_op.f("ix_canaries_kb"))
    op.drop_table("canaries")
    with op.batch_alter_table("snapshots") as batch_op:
        batch_op.drop_column("archive_sha256")
