"""Per-source connector state, promoted with the run that recorded it.

``source_state`` keeps, per source, the state its connector's last successful
run left (``state``: a partial listing's cursor, a web crawl's page
validators) and what the open run recorded (``pending``, ``pending_run``),
promoted when that run succeeds and dropped when it fails.  Nothing is
back-filled: a web source reads its old ``crawl-state.json`` once instead.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""
import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "source_state",
        sa.Column("source_id", sa.String(length=128), nullable=False),
        sa.Column("state", sa.JSON(), nullable=True),
        sa.Column("pending", sa.JSON(), nullable=True),
        sa.Column("pending_run", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["source_id"], ["sources.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("source_id"),
    )


def downgrade() -> None:
    op.drop_table("source_state")
