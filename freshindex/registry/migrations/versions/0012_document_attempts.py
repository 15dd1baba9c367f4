"""Document attempts: a document whose processing kills its worker is retried a bounded number of times.

* ``document_attempts``: one row per document a worker process began and
  has not finished with an outcome; ``open`` while an attempt runs, so the
  next attempt that finds it open knows the last one's process died, and
  counts it in ``crashes``.  Past ``sync.document_crash_retries`` the
  document is recorded as ``worker_crashed`` instead of processed again.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "document_attempts",
        sa.Column("document_id", sa.String(length=64), primary_key=True),
        sa.Column("etag", sa.Text(), nullable=True),
        sa.Column("crashes", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("open", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("sync_run_id", sa.Integer(), nullable=True),
        sa.Column("worker", sa.String(length=255), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("document_attempts")
