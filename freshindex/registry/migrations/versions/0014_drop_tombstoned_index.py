"""A document's chunks are read by its own index on SQLite too: the boolean index on ``tombstoned`` goes.

SQLite plans without statistics (nothing runs ``ANALYZE`` on an embedded
registry), and between two equality indexes it took ``ix_chunks_tombstoned``
for ``live_chunk_ids`` (``document_id = ? AND tombstoned IS 0 AND state IN
(...)``): a walk over every chunk not tombstoned, once per document, so a
full build grew with the square of the corpus (8 ms a document at 15k chunks,
6.5 % of a 689-page build).  No query filters on ``tombstoned`` alone, and
half or more of the rows share each of its two values, so the index served
nothing; without it every such query goes through ``ix_chunks_document_id``
or ``ix_chunks_kb_state``.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_chunks_tombstoned", table_name="chunks")


def downgrade() -> None:
    op.create_index("ix_chunks_tombstoned", "chunks", ["tombstoned"], unique=False)
