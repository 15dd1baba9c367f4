"""Per-document accounting of moved chunks and re-chunk reasons.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("document_results") as batch_op:
        batch_op.add_column(sa.Column("chunks_moved", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("rechunk_reason", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("document_results") as batch_op:
        batch_op.drop_column("rechunk_reason")
        batch_op.drop_column("chunks_moved")
