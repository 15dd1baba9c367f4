"""Run heartbeats (reaper), stale-task counts (fencing), follow-up requests and deletion holds.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sync_runs") as batch_op:
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("worker", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("stale_tasks", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("followup_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column("held_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sync_runs") as batch_op:
        batch_op.drop_column("held_reason")
        batch_op.drop_column("followup_requested")
        batch_op.drop_column("stale_tasks")
        batch_op.drop_column("worker")
        batch_op.drop_column("heartbeat_at")
