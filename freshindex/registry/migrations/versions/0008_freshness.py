"""Freshness: source policies and states, document provenance and validity, sync lag.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_SOURCE = ("stale_after_s", "hard_expiry_s", "paused", "removed_at", "last_verified_at",
           "last_successful_sync_at", "last_error")
_DOCUMENT = ("canonical_id", "source_uri", "mirrors", "source_version", "valid_from", "valid_until",
             "supersedes", "last_fetched_at", "last_error", "withdrawn_reason")
_RUN = ("observed_at", "visible_at", "lag_s")


def upgrade() -> None:
    with op.batch_alter_table("sources") as batch:
        batch.add_column(sa.Column("stale_after_s", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("hard_expiry_s", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_verified_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_successful_sync_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_error", sa.Text(), nullable=True))
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("canonical_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("source_uri", sa.Text(), nullable=True))
        batch.add_column(sa.Column("mirrors", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("source_version", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("valid_from", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("valid_until", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("supersedes", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("last_fetched_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("withdrawn_reason", sa.String(length=16), nullable=True))
    op.create_index("ix_documents_canonical_id", "documents", ["canonical_id"])
    with op.batch_alter_table("sync_runs") as batch:
        batch.add_column(sa.Column("observed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("visible_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("lag_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sync_runs") as batch:
        for name in reversed(_RUN):
            batch.drop_column(name)
    op.drop_index("ix_documents_canonical_id", table_name="documents")
    with op.batch_alter_table("documents") as batch:
        for name in reversed(_DOCUMENT):
            batch.drop_column(name)
    with op.batch_alter_table("sources") as batch:
        for name in reversed(_SOURCE):
            batch.drop_column(name)
