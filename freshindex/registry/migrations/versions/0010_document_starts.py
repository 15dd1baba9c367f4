"""Document start markers and the parse-worker renewal of a run (the reaper's evidence).

* ``document_starts``: a ``process_document`` task began on a document of a
  running run.  The reaper re-sends only planned documents that started and
  have no outcome (their worker died); a document never started is still
  waiting in the queue behind other sources' work.
* ``sync_runs.worked_at``: when a parse-queue worker (``dispatch_documents``)
  last sent a batch of the run.  With the start markers, the only renewals
  that count as "the parse workers are alive" (the planner's and the
  reaper's renewals of ``heartbeat_at`` do not).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sync_runs") as batch_op:
        batch_op.add_column(sa.Column("worked_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "document_starts",
        sa.Column("sync_run_id", sa.Integer(), sa.ForeignKey("sync_runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("worker", sa.String(length=255), nullable=True),
    )
    op.create_index("ix_document_starts_started_at", "document_starts", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_document_starts_started_at", table_name="document_starts")
    op.drop_table("document_starts")
    with op.batch_alter_table("sync_runs") as batch_op:
        batch_op.drop_column("worked_at")
