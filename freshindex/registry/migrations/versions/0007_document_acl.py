"""Per-document ACLs with versions, source tenant/sensitivity/ACL rules, and the ACL denial log.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("acl", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("tenant", sa.String(length=63), nullable=False, server_default="default"))
        batch.add_column(sa.Column("sensitivity", sa.String(length=16), nullable=False, server_default="internal"))
        batch.add_column(sa.Column("acl_version", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("acl_fingerprint", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("acl_origin", sa.String(length=16), nullable=True))
    with op.batch_alter_table("sources") as batch:
        batch.add_column(sa.Column("tenant", sa.String(length=63), nullable=False, server_default="default"))
        batch.add_column(sa.Column("acl_rules", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("sensitivity", sa.String(length=16), nullable=False, server_default="internal"))
        batch.add_column(sa.Column("acl_version", sa.Integer(), nullable=False, server_default="1"))
    op.create_table(
        "acl_denials",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kb", sa.String(length=63), nullable=False),
        sa.Column("principal", sa.String(length=255), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("document_id", sa.String(length=64), nullable=True),
        sa.Column("chunk_id", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("policy_version", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_acl_denials_kb_at", "acl_denials", ["kb", "at"])


def downgrade() -> None:
    op.drop_index("ix_acl_denials_kb_at", table_name="acl_denials")
    op.drop_table("acl_denials")
    with op.batch_alter_table("sources") as batch:
        for name in ("acl_version", "sensitivity", "acl_rules", "tenant"):
            batch.drop_column(name)
    with op.batch_alter_table("documents") as batch:
        for name in ("acl_origin", "acl_fingerprint", "acl_version", "sensitivity", "tenant", "acl"):
            batch.drop_column(name)
