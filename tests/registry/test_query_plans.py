"""The registry's hot queries use an index on PostgreSQL (a regression fails here, not in production).

A scratch database of 50k documents (and their chunks, runs, tickets,
changesets, tombstones, cached vectors), analysed, and every statement of
each hot registry call captured and run under ``EXPLAIN ANALYZE``
(``bench/registry_plans.py``, which measures the same at 1M documents).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench.registry_plans import ADMIN_URL, fill, plans, scratch_database
from freshindex.registry import Registry, db
from tests.conftest import port_open

#: Statements allowed to read a growing table whole, and why (known, reported in bench/results/registry_plans.md).
_KNOWN: set[str] = set()


@pytest.fixture(scope="module")
def analysed_plans() -> Iterator[list[dict[str, Any]]]:
    if not port_open("127.0.0.1", 5432):
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (CI starts it; .ci/run here)")
    with scratch_database(ADMIN_URL) as url:
        engine = db.make_engine(url)
        db.upgrade(engine)
        fill(engine, 50_000, 2)
        engine.dispose()
        reg = Registry.open(url, auto_migrate=False)
        try:
            yield plans(reg)
        finally:
            reg.close()


def test_no_hot_query_reads_a_growing_table_whole(analysed_plans: list[dict[str, Any]]) -> None:
    # Given every statement of the hot registry calls, planned on 50k analysed documents
    calls = {p["call"] for p in analysed_plans}
    assert len(calls) >= 15 and len(analysed_plans) >= 20
    # Then none scans a table that grows with the corpus or with time sequentially, but the known ones
    offending = [(p["call"], p["sql"], p["seq_scans_of_growing_tables"]) for p in analysed_plans
                 if p["seq_scans_of_growing_tables"] and not any(k in p["sql"] for k in _KNOWN)]
    assert offending == []


@pytest.mark.parametrize(("call", "index"), [
    ("changed-hash lookup: canonical twin by content hash", "ix_documents_content_hash"),
    ("reaper: stalled runs", "ix_sync_runs_build_status"),
    ("tombstone backlog (health)", "ix_tombstones_unapplied"),
    ("chunks of a document (live_chunk_ids)", "ix_chunks_document_id"),
    ("documents of a source (sync plan)", "ix_documents_source_id"),
    ("freshness: sources of a knowledge base", "ix_sync_runs_source_status_finished"),
])
def test_the_hot_lookups_use_their_index(analysed_plans: list[dict[str, Any]], call: str, index: str) -> None:
    used = {s["index"] for p in analysed_plans if p["call"] == call for s in p["scans"]}
    assert index in used, (call, used)


def test_the_freshness_sweep_finds_due_documents_by_partial_indexes(analysed_plans: list[dict[str, Any]]) -> None:
    used = {s["index"] for p in analysed_plans if p["call"] == "freshness sweep: withdraw due documents"
            for s in p["scans"]}
    assert {"ix_documents_valid_until", "ix_documents_supersedes", "ix_documents_withdrawn_reason"} <= used, used


def test_a_documents_chunks_are_read_by_its_index_on_sqlite_without_statistics(tmp_path) -> None:
    """The embedded registry is never analysed: SQLite must still read a document's chunks by
    ``ix_chunks_document_id``, not walk every chunk not tombstoned (one walk per document: a
    full build that grew with the square of the corpus)."""
    from sqlalchemy import event

    reg = Registry.open(f"sqlite:///{tmp_path / 'registry.db'}")
    try:
        statements: list[tuple[str, Any]] = []

        def capture(conn, cursor, statement, params, context, executemany) -> None:
            if statement.lstrip().upper().startswith("SELECT") and "chunks" in statement:
                statements.append((statement, params))

        event.listen(reg.engine, "before_cursor_execute", capture)
        # When a document's live chunks are read
        reg.live_chunk_ids("doc-1")
        event.remove(reg.engine, "before_cursor_execute", capture)
        assert statements, "live_chunk_ids issued no SELECT on chunks"
        # Then the plan of that statement searches by the document's index, on an unanalysed database
        with reg.engine.connect() as conn:
            for sql, params in statements:
                plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params))
                assert "ix_chunks_document_id" in plan, plan
    finally:
        reg.close()
