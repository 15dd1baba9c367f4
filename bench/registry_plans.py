"""Registry query plans at scale on PostgreSQL: does every hot query use an index?

A scratch database is created on the local server, upgraded to the newest
migration and filled in SQL (``INSERT ... SELECT generate_series``): N
documents over 100 sources in 10 knowledge bases, their chunk rows, and the
history a registry grows over months (sync runs, webhook tickets,
changesets and their entries, tombstones, cached vectors).  Then each hot
registry call runs once through the real :class:`Registry` with every
statement it sends captured, and each captured statement is run again
under ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` inside a transaction that
is rolled back (writes included).  Per statement: the plan's scan nodes
(table, node type, index), the execution time and the shared buffers
touched; a sequential scan of a table that grows with the corpus or with
time is flagged.

    python -m bench.registry_plans [--documents 1000000] [--chunks-per-doc 3] [--keep]

The statements are the registry's own (captured, not copied), so a change in
``registry/`` is measured as it is.  ``tests/registry/test_query_plans.py``
runs the same check on a 50k-document registry.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine

from bench.report import table, write
from freshindex.registry import Registry, db

ADMIN_URL = os.environ.get("FRESHINDEX_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SOURCES, KBS = 100, 10
#: Tables that grow with the corpus or with time: a sequential scan of one of them in a hot query is a finding.
GROWING = {"documents", "chunks", "changeset_entries", "changesets", "sync_runs", "sync_tickets", "tombstones",
           "embeddings", "document_results", "webhook_deliveries", "acl_denials"}


def fill(engine: Engine, documents: int, chunks_per_doc: int) -> dict[str, int]:
    """Rows per table after filling an empty, migrated registry (then ANALYZE)."""
    runs, tickets, changesets = max(1000, documents // 10), max(1000, documents // 10), max(200, documents // 50)
    p = {"n": documents, "c": chunks_per_doc, "s": SOURCES, "k": KBS, "runs": runs, "tickets": tickets,
         "cs": changesets}
    src = "'src-' || lpad((i % :s)::text, 3, '0')"
    kb = "'kb-' || ((i % :s) % :k)"
    statements = [
        f"""INSERT INTO sources (id, kb, kind, location, owner, options, acl, tenant, sensitivity, acl_version,
                enabled, created_at, updated_at, paused, stale_after_s)
            SELECT {src}, {kb}, 'folder', '/srv/' || i, 'bench', '{{}}', '["group:all"]', 'default', 'internal', 1,
                   true, now(), now(), false, 86400 FROM generate_series(0, :s - 1) i""",
        # 0.5 % deleted, 1 % with a validity end, 0.1 % superseding another, 0.1 % withdrawn.
        f"""INSERT INTO documents (id, source_id, key, etag, size, content_hash, state, parser, parser_version, title,
                version, chunk_count, tenant, sensitivity, acl_version, acl_fingerprint, valid_until, supersedes,
                withdrawn_reason, first_seen_at, updated_at)
            SELECT md5('doc' || i), {src}, 'doc-' || i || '.md', 'e' || i, 1000, md5('c' || i) || md5('h' || i),
                   CASE WHEN i % 200 = 7 THEN 'deleted' ELSE 'active' END, 'markdown', '1', 'doc ' || i, 1, :c,
                   'default', 'internal', 1, md5('fp' || (i % 7)),
                   CASE WHEN i % 100 = 3 THEN now() + (i % 90) * interval '1 day' END,
                   CASE WHEN i % 1000 = 5 THEN md5('doc' || (i - 1)) END,
                   CASE WHEN i % 1000 = 9 THEN 'expired' END,
                   now() - (i % 365) * interval '1 day', now()
            FROM generate_series(0, :n - 1) i""",
        # Chunks: live, but those of the last 0.2 % of documents pending and 1 % of the rest removed (tombstoned).
        f"""INSERT INTO chunks (id, document_id, source_id, kb, ordinal, content_hash, text, kind, heading_path, anchor,
                meta, doc_version, state, tombstoned, added_changeset_id, snapshot_id, created_at, updated_at)
            SELECT md5('chunk' || i || '-' || o)::uuid::text, md5('doc' || i), {src}, {kb}, o,
                   md5('t' || i || '-' || o) || md5('u' || o), 'Paragraph ' || o || ' of document ' || i, 'paragraph',
                   '["Section"]', 'p' || o, '{{}}', 1,
                   CASE WHEN i >= :n - :n / 500 THEN 'pending' WHEN i % 100 = 11 THEN 'removed' ELSE 'live' END,
                   i % 100 = 11, (i % :cs) + 1, {kb} || '-v1', now(), now()
            FROM generate_series(0, :n - 1) i CROSS JOIN generate_series(0, :c - 1) o""",
        f"""INSERT INTO sync_runs (id, source_id, kb, trigger, status, started_at, finished_at, docs_listed,
                docs_planned, changeset_id, snapshot_id, build_status, summary, stale_tasks, followup_requested,
                heartbeat_at)
            SELECT i + 1, {src}, {kb}, 'poll', CASE WHEN i >= :runs - 3 THEN 'running' WHEN i % 50 = 1 THEN 'failed'
                   ELSE 'succeeded' END, now() - (:runs - i) * interval '1 minute',
                   CASE WHEN i < :runs - 3 THEN now() - (:runs - i) * interval '1 minute' + interval '20 s' END,
                   100, 3, (i % :cs) + 1, {kb} || '-v1',
                   CASE WHEN i >= :runs - 3 THEN NULL WHEN i >= :runs - 6 THEN 'pending' ELSE 'built' END, '{{}}', 0,
                   false, now() - (:runs - i) * interval '1 minute'
            FROM generate_series(0, :runs - 1) i""",
        f"""INSERT INTO sync_tickets (source_id, created_at, status, events, dispatched_at, finished_at)
            SELECT {src}, now() - (:tickets - i) * interval '10 s',
                   CASE WHEN i >= :tickets - 5 THEN 'queued' WHEN i >= :tickets - 8 THEN 'dispatched' ELSE 'done' END,
                   1, now(), now() FROM generate_series(0, :tickets - 1) i""",
        f"""INSERT INTO changesets (id, kb, source_id, sync_run_id, status, created_at, staged_at, applied_at, snapshot_id)
            SELECT i + 1, {kb}, {src}, i + 1, CASE WHEN i >= :cs - 2 THEN 'staged' ELSE 'applied' END, now(), now(),
                   now(), {kb} || '-v1' FROM generate_series(0, :cs - 1) i""",
        # One entry per chunk: every chunk was added by some changeset.
        """INSERT INTO changeset_entries (changeset_id, chunk_id, document_id, op)
            SELECT (i % :cs) + 1, md5('chunk' || i || '-' || o)::uuid::text, md5('doc' || i), 'upsert'
            FROM generate_series(0, :n - 1) i CROSS JOIN generate_series(0, :c - 1) o""",
        """INSERT INTO tombstones (chunk_id, document_id, kb, reason, changeset_id, created_at, applied_snapshot_id)
            SELECT md5('chunk' || i || '-0')::uuid::text, md5('doc' || i), 'kb-' || ((i % :s) % :k), 'superseded',
                   (i % :cs) + 1, now(), CASE WHEN i % 1000 <> 11 THEN 'kb-' || ((i % :s) % :k) || '-v1' END
            FROM generate_series(0, :n - 1) i WHERE i % 100 = 11""",
        """INSERT INTO embeddings (model_id, content_hash, dim, vector, created_at)
            SELECT 'bench-model', md5('t' || i || '-' || o) || md5('u' || o), 4, '\\x00000000000000000000000000000000',
                   now() FROM generate_series(0, :n - 1) i CROSS JOIN generate_series(0, :c - 1) o""",
        """INSERT INTO snapshots (id, kb, version, collection, status, strategy, point_count, embedding_model,
                parser_version, changeset_ids, upserts, deletes, verification, build_seconds, created_at)
            SELECT 'kb-' || k || '-v1', 'kb-' || k, 1, 'kb-' || k || '-v1', 'active', 'full', 0, 'bench-model', '1',
                   '[]', 0, 0, '{}', 0, now() FROM generate_series(0, :k - 1) k""",
    ]
    with engine.begin() as conn:
        for sql in statements:
            conn.execute(text(sql), p)
        conn.execute(text("SELECT setval(pg_get_serial_sequence('sync_runs', 'id'), :m)"), {"m": runs + 1})
        conn.execute(text("SELECT setval(pg_get_serial_sequence('changesets', 'id'), :m)"), {"m": changesets + 1})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
        counts = {}
        for name in ("documents", "chunks", "changeset_entries", "sync_runs", "sync_tickets", "tombstones",
                     "embeddings"):
            counts[name] = conn.execute(text(f"SELECT count(*) FROM {name}")).scalar_one()
    return counts


@dataclass
class Captured:
    label: str
    statements: list[tuple[str, Any]] = field(default_factory=list)


@contextlib.contextmanager
def capture(engine: Engine, label: str) -> Iterator[Captured]:
    """Record every statement (with its parameters) the engine sends while the block runs."""
    out = Captured(label)

    def listen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if not executemany and statement.lstrip().split(None, 1)[0].upper() in ("SELECT", "UPDATE", "DELETE", "WITH"):
            out.statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", listen)
    try:
        yield out
    finally:
        event.remove(engine, "before_cursor_execute", listen)


def hot_calls(reg: Registry) -> list[tuple[str, Callable[[], Any]]]:
    """The registry's hot calls, with arguments taken from the filled data."""
    from freshindex.acl.model import DocumentAcl

    doc = _one(reg, "SELECT id FROM documents WHERE source_id = 'src-042' AND state = 'active' LIMIT 1")
    chunk_ids = [r[0] for r in reg.engine.connect().execute(text(
        "SELECT id FROM chunks WHERE document_id IN (SELECT id FROM documents WHERE source_id = 'src-042' LIMIT 40)"))]
    content_hash = _one(reg, f"SELECT content_hash FROM documents WHERE id = '{doc}'")
    hashes = [r[0] for r in reg.engine.connect().execute(text(
        f"SELECT content_hash FROM chunks WHERE id IN ({', '.join(repr(c) for c in chunk_ids[:32])})"))]
    run = int(_one(reg, "SELECT max(id) FROM sync_runs WHERE status = 'running'"))
    cs = int(_one(reg, f"SELECT changeset_id FROM sync_runs WHERE id = {run}"))
    staged = reg.staged_changesets("kb-2")
    now = dt.datetime.now(dt.UTC)
    return [
        ("documents of a source (sync plan)", lambda: reg.documents_for_source("src-042")),
        ("one document (get_document)", lambda: reg.get_document(doc)),
        ("chunks of a document (live_chunk_ids)", lambda: reg.live_chunk_ids(doc)),
        ("changed-hash lookup: canonical twin by content hash",
         lambda: reg.canonical_twin("x", "kb-2", content_hash, acl=DocumentAcl(tokens=("group:all",)))),
        ("changed-hash lookup: vector cache by content hash", lambda: reg.cached_vectors("bench-model", hashes)),
        ("staging fence (run_refusal)", lambda: reg.run_refusal(run, cs)),
        ("heartbeat of a run", lambda: reg.heartbeat_run(run, "bench")),
        ("dispatch: claim due webhook tickets", lambda: reg.claim_due_tickets(now)),
        ("reaper: stalled runs", lambda: reg.stalled_runs(600.0)),
        ("freshness: sources of a knowledge base", lambda: reg.source_freshness("kb-2")),
        ("freshness sweep: withdraw due documents", lambda: reg.withdraw_due_documents(now)),
        ("tombstone backlog (health)", lambda: reg.tombstone_backlog("kb-2")),
        ("builder: staged changesets", lambda: reg.staged_changesets("kb-2")),
        ("builder: changeset operations", lambda: reg.changeset_ops(staged)),
        ("builder: chunk rows by id", lambda: reg.chunk_rows(chunk_ids)),
        ("builder: live count of a knowledge base", lambda: reg.count_live("kb-2")),
        ("query recheck: chunk status by id", lambda: reg.chunk_status(chunk_ids)),
    ]


def _one(reg: Registry, sql: str) -> Any:
    with reg.engine.connect() as conn:
        return conn.execute(text(sql)).scalar_one()


def _scans(node: dict[str, Any], out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if "Relation Name" in node or "Index Name" in node:
        out.append({"node": node["Node Type"], "table": node.get("Relation Name"), "index": node.get("Index Name"),
                    "rows": node.get("Actual Rows")})
    for child in node.get("Plans", ()):
        _scans(child, out)
    return out


def explain(engine: Engine, statement: str, parameters: Any) -> dict[str, Any]:
    """The executed plan of one statement, in a transaction rolled back afterwards."""
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, parameters)
        plan = cur.fetchone()[0][0]
        raw.rollback()
    finally:
        raw.close()
    top = plan["Plan"]
    scans = _scans(top, [])
    return {
        "sql": " ".join(statement.split())[:300],
        "scans": scans,
        "seq_scans_of_growing_tables": sorted({s["table"] for s in scans if s["node"] == "Seq Scan"
                                               and s["table"] in GROWING}),
        "execution_ms": round(plan["Execution Time"], 3),
        "shared_buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
    }


def plans(reg: Registry) -> list[dict[str, Any]]:
    """Every hot call's statements with their plans."""
    out = []
    for label, call in hot_calls(reg):
        with capture(reg.engine, label) as got:
            call()
        seen: dict[str, dict[str, Any]] = {}
        for statement, parameters in got.statements:  # a statement repeated per row or batch is shown once
            if statement in seen:
                seen[statement]["times"] += 1
                continue
            seen[statement] = {"call": label, "times": 1, **explain(reg.engine, statement, parameters)}
        out.extend(seen.values())
    return out


@contextlib.contextmanager
def scratch_database(admin_url: str = ADMIN_URL) -> Iterator[str]:
    """A new, empty database on the server of ``admin_url``, dropped afterwards."""
    name = f"fi_plans_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def measure(documents: int, chunks_per_doc: int) -> dict[str, Any]:
    with scratch_database() as url:
        engine = db.make_engine(url)
        db.upgrade(engine)
        t0 = time.perf_counter()
        counts = fill(engine, documents, chunks_per_doc)
        fill_s = time.perf_counter() - t0
        engine.dispose()
        reg = Registry.open(url, auto_migrate=False)
        try:
            rows = plans(reg)
        finally:
            reg.close()
    return {"documents": documents, "chunks_per_doc": chunks_per_doc, "rows": counts, "fill_s": round(fill_s, 1),
            "revision": db.head_revision(), "plans": rows}


def _scan_text(scans: list[dict[str, Any]]) -> str:
    return "; ".join(" ".join(filter(None, (s["node"], s["table"], s["index"] and "via " + s["index"])))
                     for s in scans) or "(no table)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--chunks-per-doc", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()
    result = measure(args.documents, args.chunks_per_doc)
    after = os.getloadavg()
    command = f"python -m bench.registry_plans --documents {args.documents} --chunks-per-doc {args.chunks_per_doc}"
    flagged = [p for p in result["plans"] if p["seq_scans_of_growing_tables"]]
    lines = [f"# Registry query plans at {args.documents:,} documents (PostgreSQL)", "",
             f"`{command}` (migration {result['revision']}; filled in {result['fill_s']} s: "
             + ", ".join(f"{k} {v:,}" for k, v in result["rows"].items())
             + f"). Load average before {load[0]:.1f}, after {after[0]:.1f} on {os.cpu_count()} cores (other "
             "benchmarks and test suites were running): times are indicative, the plan shapes are the finding.", "",
             f"Statements with a sequential scan of a growing table: {len(flagged)} of {len(result['plans'])}.", ""]
    lines += table(["call", "statement (times sent)", "scans (node, table, index)", "ms", "buffers", "seq scan of"],
                   list("lllrrl"),
                   [[p["call"], "`" + p["sql"][:90].replace("|", "\\|") + f"` ({p['times']})", _scan_text(p["scans"]),
                     p["execution_ms"], p["shared_buffers"], ", ".join(p["seq_scans_of_growing_tables"]) or "-"]
                    for p in result["plans"]])
    write("registry_plans", {"command": command, "load_average": {"before": load, "after": after}, **result}, lines)


if __name__ == "__main__":
    main()
