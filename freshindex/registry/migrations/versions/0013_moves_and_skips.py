"""Moves and held deletions: a document's raw-bytes hash and the held run that found it gone.

* ``documents.source_hash``: sha256 of the bytes last fetched (``content_hash``
  may be a parser's hash of the extracted text), so the planner can tell a
  document whose bytes reappear under a new key in the same sync (a move).
* ``documents.pending_deletion_run``: set while the deletion guard holds the
  document's deletion (the held run's id); the query path labels its
  evidence ``pending deletion``.  Cleared when it is listed again or deleted.

Skipped documents need no column: their state is ``skipped`` and the reason
is in ``error_reason``.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("source_hash", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("pending_deletion_run", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("pending_deletion_run")
        batch.drop_column("source_hash")
