"""A document remembers its parser's shape hash: a release that changed only a page's furniture costs no parse.

``documents.shape_hash`` holds ``ParsedDocument.meta["shape_hash"]`` (HTML:
the hash of the cleaned element the walk reads and the page's title).  When
the next fetch's bytes differ but hash to the same shape, the pipeline
touches the document without walking it.  Null (documents indexed before
this revision, and formats without a shape) means the parse decides, as
before.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("shape_hash", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("shape_hash")
