"""A document records the version of the parser that read it, not the parser set's: one parser's upgrade
re-parses only its own documents.

``documents.parser_version`` held the pipeline version shared by every
format (``p7.c5``: the parser set's and the chunker's), so any parser's
change re-fetched and re-parsed every document.  From this revision it holds
``<the parser's own version>.<the chunker's>`` (``md-2.c6``, ``none.c6`` for
a document no parser reads; :func:`workers.versions.document_version`), and
is widened to 64 characters so a registered parser's version (up to 48, no
dot) fits.  Rows are not rewritten: a value of the old form equals no new
one, so every document is processed once after the upgrade, as the chunker
version c6 (the parser's version left the chunk content hash) needs anyway.

``snapshots.parser_version`` keeps its name and now holds what the builder
compares for a full build: the chunker's and the lexical versions
(``c6.l3``), no parser's.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""
import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.alter_column("parser_version", existing_type=sa.String(length=32), type_=sa.String(length=64),
                           existing_nullable=True)


def downgrade() -> None:
    # Values over 32 characters (only a registered parser's long version makes one) are cut to fit;
    # the older code then sees a version it does not know and processes the document again.
    op.execute("UPDATE documents SET parser_version = substr(parser_version, 1, 32) "
               "WHERE length(parser_version) > 32")
    with op.batch_alter_table("documents") as batch:
        batch.alter_column("parser_version", existing_type=sa.String(length=64), type_=sa.String(length=32),
                           existing_nullable=True)
