"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-30 09:15:57.222811
"""
from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('alias_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('kb', sa.String(length=63), nullable=False),
    sa.Column('from_snapshot_id', sa.String(length=128), nullable=True),
    sa.Column('to_snapshot_id', sa.String(length=128), nullable=False),
    sa.Column('actor', sa.String(length=255), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('alias_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_alias_events_kb'), ['kb'], unique=False)

    op.create_table('changesets',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('kb', sa.String(length=63), nullable=False),
    sa.Column('source_id', sa.String(length=128), nullable=False),
    sa.Column('sync_run_id', sa.Integer(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('staged_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('applied_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('snapshot_id', sa.String(length=128), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('changesets', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_changesets_kb'), ['kb'], unique=False)
        batch_op.create_index(batch_op.f('ix_changesets_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_changesets_sync_run_id'), ['sync_run_id'], unique=False)

    op.create_table('embeddings',
    sa.Column('model_id', sa.String(length=128), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('dim', sa.Integer(), nullable=False),
    sa.Column('vector', sa.LargeBinary(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('model_id', 'content_hash')
    )
    op.create_table('locks',
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('owner', sa.String(length=255), nullable=True),
    sa.Column('token', sa.BigInteger(), nullable=False),
    sa.Column('expires_at', sa.Float(), nullable=False),
    sa.Column('acquired_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('snapshots',
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('kb', sa.String(length=63), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('parent_id', sa.String(length=128), nullable=True),
    sa.Column('collection', sa.String(length=255), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('strategy', sa.String(length=16), nullable=False),
    sa.Column('point_count', sa.Integer(), nullable=False),
    sa.Column('embedding_model', sa.String(length=128), nullable=False),
    sa.Column('parser_version', sa.String(length=64), nullable=False),
    sa.Column('changeset_ids', sa.JSON(), nullable=False),
    sa.Column('upserts', sa.Integer(), nullable=False),
    sa.Column('deletes', sa.Integer(), nullable=False),
    sa.Column('verification', sa.JSON(), nullable=False),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('archive_uri', sa.Text(), nullable=True),
    sa.Column('build_seconds', sa.Float(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('activated_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('kb', 'version', name='uq_snapshots_kb_version')
    )
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_snapshots_kb'), ['kb'], unique=False)
        batch_op.create_index(batch_op.f('ix_snapshots_status'), ['status'], unique=False)

    op.create_table('sources',
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('kb', sa.String(length=63), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('location', sa.Text(), nullable=False),
    sa.Column('owner', sa.String(length=255), nullable=False),
    sa.Column('options', sa.JSON(), nullable=False),
    sa.Column('acl', sa.JSON(), nullable=False),
    sa.Column('poll_interval_s', sa.Integer(), nullable=True),
    sa.Column('enabled', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('sources', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_sources_kb'), ['kb'], unique=False)

    op.create_table('tombstones',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('chunk_id', sa.String(length=36), nullable=False),
    sa.Column('document_id', sa.String(length=64), nullable=False),
    sa.Column('kb', sa.String(length=63), nullable=False),
    sa.Column('reason', sa.String(length=16), nullable=False),
    sa.Column('changeset_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('applied_snapshot_id', sa.String(length=128), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('tombstones', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_tombstones_changeset_id'), ['changeset_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_tombstones_chunk_id'), ['chunk_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_tombstones_kb'), ['kb'], unique=False)

    op.create_table('changeset_entries',
    sa.Column('changeset_id', sa.Integer(), nullable=False),
    sa.Column('chunk_id', sa.String(length=36), nullable=False),
    sa.Column('document_id', sa.String(length=64), nullable=False),
    sa.Column('op', sa.String(length=8), nullable=False),
    sa.ForeignKeyConstraint(['changeset_id'], ['changesets.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('changeset_id', 'chunk_id')
    )
    op.create_table('documents',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('source_id', sa.String(length=128), nullable=False),
    sa.Column('key', sa.Text(), nullable=False),
    sa.Column('etag', sa.String(length=255), nullable=True),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('error_reason', sa.String(length=64), nullable=True),
    sa.Column('error_detail', sa.Text(), nullable=True),
    sa.Column('parser', sa.String(length=64), nullable=True),
    sa.Column('parser_version', sa.String(length=32), nullable=True),
    sa.Column('title', sa.Text(), nullable=True),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('chunk_count', sa.Integer(), nullable=False),
    sa.Column('first_seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['source_id'], ['sources.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('source_id', 'key', name='uq_documents_source_key')
    )
    with op.batch_alter_table('documents', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_documents_source_id'), ['source_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_documents_state'), ['state'], unique=False)

    op.create_table('sync_runs',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('source_id', sa.String(length=128), nullable=False),
    sa.Column('kb', sa.String(length=63), nullable=False),
    sa.Column('trigger', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('docs_listed', sa.Integer(), nullable=False),
    sa.Column('docs_planned', sa.Integer(), nullable=False),
    sa.Column('changeset_id', sa.Integer(), nullable=True),
    sa.Column('snapshot_id', sa.String(length=128), nullable=True),
    sa.Column('build_status', sa.String(length=16), nullable=True),
    sa.Column('build_error', sa.Text(), nullable=True),
    sa.Column('summary', sa.JSON(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['source_id'], ['sources.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('sync_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_sync_runs_source_id'), ['source_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_sync_runs_status'), ['status'], unique=False)

    op.create_table('chunks',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('document_id', sa.String(length=64), nullable=False),
    sa.Column('source_id', sa.String(length=128), nullable=False),
    sa.Column('kb', sa.String(length=63), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('heading_path', sa.JSON(), nullable=False),
    sa.Column('anchor', sa.Text(), nullable=False),
    sa.Column('page', sa.Integer(), nullable=True),
    sa.Column('meta', sa.JSON(), nullable=False),
    sa.Column('doc_version', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('tombstoned', sa.Boolean(), nullable=False),
    sa.Column('added_changeset_id', sa.Integer(), nullable=True),
    sa.Column('snapshot_id', sa.String(length=128), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['document_id'], ['documents.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('chunks', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_chunks_content_hash'), ['content_hash'], unique=False)
        batch_op.create_index(batch_op.f('ix_chunks_document_id'), ['document_id'], unique=False)
        batch_op.create_index('ix_chunks_kb_state', ['kb', 'state'], unique=False)
        batch_op.create_index(batch_op.f('ix_chunks_source_id'), ['source_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_chunks_tombstoned'), ['tombstoned'], unique=False)

    op.create_table('document_results',
    sa.Column('sync_run_id', sa.Integer(), nullable=False),
    sa.Column('document_id', sa.String(length=64), nullable=False),
    sa.Column('key', sa.Text(), nullable=False),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('chunks_embedded', sa.Integer(), nullable=False),
    sa.Column('chunks_reused', sa.Integer(), nullable=False),
    sa.Column('chunks_kept', sa.Integer(), nullable=False),
    sa.Column('chunks_added', sa.Integer(), nullable=False),
    sa.Column('tombstones', sa.Integer(), nullable=False),
    sa.Column('error_reason', sa.String(length=64), nullable=True),
    sa.Column('error_detail', sa.Text(), nullable=True),
    sa.Column('seconds', sa.Float(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['sync_run_id'], ['sync_runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('sync_run_id', 'document_id')
    )


def downgrade() -> None:
    op.drop_table('document_results')
    with op.batch_alter_table('chunks', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_chunks_tombstoned'))
        batch_op.drop_index(batch_op.f('ix_chunks_source_id'))
        batch_op.drop_index('ix_chunks_kb_state')
        batch_op.drop_index(batch_op.f('ix_chunks_document_id'))
        batch_op.drop_index(batch_op.f('ix_chunks_content_hash'))

    op.drop_table('chunks')
    with op.batch_alter_table('sync_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_sync_runs_status'))
        batch_op.drop_index(batch_op.f('ix_sync_runs_source_id'))

    op.drop_table('sync_runs')
    with op.batch_alter_table('documents', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_documents_state'))
        batch_op.drop_index(batch_op.f('ix_documents_source_id'))

    op.drop_table('documents')
    op.drop_table('changeset_entries')
    with op.batch_alter_table('tombstones', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_tombstones_kb'))
        batch_op.drop_index(batch_op.f('ix_tombstones_chunk_id'))
        batch_op.drop_index(batch_op.f('ix_tombstones_changeset_id'))

    op.drop_table('tombstones')
    with op.batch_alter_table('sources', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_sources_kb'))

    op.drop_table('sources')
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_snapshots_status'))
        batch_op.drop_index(batch_op.f('ix_snapshots_kb'))

    op.drop_table('snapshots')
    op.drop_table('locks')
    op.drop_table('embeddings')
    with op.batch_alter_table('changesets', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_changesets_sync_run_id'))
        batch_op.drop_index(batch_op.f('ix_changesets_status'))
        batch_op.drop_index(batch_op.f('ix_changesets_kb'))

    op.drop_table('changesets')
    with op.batch_alter_table('alias_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_alias_events_kb'))

    op.drop_table('alias_events')
