"""Many Celery worker processes on one PostgreSQL registry: throughput, lock waits, deadlocks, lost chunks.

Per worker count (``--procs 1 2 8 16``): a fresh PostgreSQL database on
127.0.0.1, a private ``redis-server`` on a free port (so the broker counts
only this benchmark's messages), ``freshindex worker`` instances (at most 4
prefork processes each: 16 processes are 4 instances, each its own broker
and registry connections) consuming every queue, and ``--sources`` folder
sources of ``--docs`` small Markdown documents spread over two knowledge
bases, embedded by the hashing stand-in (``embedding.provider=hashing``) so
that the registry, not the model, is what is loaded.

Two rounds: the first syncs every source at once (every document new); the
second edits ``--edit-share`` of the documents, deletes 2 % and adds 2 %,
and syncs every source again.  Measured per round: document tasks per
second (from the first enqueue to the last document outcome recorded),
time to all builds done; sampled every 50 ms, the registry backends waiting
on a lock (``pg_stat_activity.wait_event_type = 'Lock'``) and what they
ran; ``pg_stat_database.deadlocks`` before and after; queue messages per
document (the broker's ``LPUSH`` count) and pub/sub messages (task events);
the RSS/USS of each worker process.  Checked after the second round (what
makes a run "ok"): the registry's live chunk ids equal the ids the parser
and chunker give for the final corpus (nothing lost, nothing extra), no
chunk is pending, each document has one outcome per run, every chunk was
embedded exactly once (sum of ``chunks_embedded`` = vector-cache rows), the
active collection of each knowledge base holds exactly the registry's live
chunks, and no tombstone waits.  Also: registry rows and bytes per chunk.

    python -m bench.workers_load [--procs 1 2 8 16] [--sources 6] [--docs 150] [--edit-share 0.1]

Writes bench/results/workers_load.json and bench/results/workers_load.md.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.report import table, write
from tests.conftest import PG_ADMIN_URL, _create_pg_database, _drop_pg_database, distributed_env, free_port

KBS = ("alpha", "beta")
WORDS = ("deploy rollback backup restore audit billing oncall access quota replica shard tenant index "
         "cache queue broker lease fence token budget snapshot alias version schema").split()
#: The instance layout: pool processes per `freshindex worker` instance.
PER_INSTANCE = 4


# -- corpus ---------------------------------------------------------------------------------------------------------


def _doc_text(source: str, n: int, revision: int, rng: random.Random) -> str:
    """A small Markdown document with two sections whose words are unique to (source, n, revision),
    so no two documents share content (no mirrors, no cache hits across documents)."""
    tag = f"{source}-{n}-r{revision}"
    sections = []
    for s in range(2):
        words = " ".join(rng.choice(WORDS) for _ in range(60))
        sections.append(f"## Section {s} of {tag}\n\nItem {tag}-{s} covers {words}. Owner team-{n % 17}.\n")
    return f"# Document {tag}\n\n" + "\n".join(sections)


def make_corpus(root: Path, sources: int, docs: int, seed: int = 7) -> dict[str, Path]:
    """``sources`` folders of ``docs`` documents each; returns source id -> folder."""
    rng = random.Random(seed)
    out = {}
    for i in range(sources):
        sid = f"src{i}"
        folder = root / sid
        folder.mkdir(parents=True)
        for n in range(docs):
            (folder / f"doc-{n:04d}.md").write_text(_doc_text(sid, n, 0, rng))
        out[sid] = folder
    return out


def edit_corpus(folders: dict[str, Path], share: float, seed: int = 11) -> dict[str, int]:
    """Edit ``share`` of each source's documents, delete 2 % and add 2 % (at least one of each)."""
    rng = random.Random(seed)
    counts = collections.Counter()
    for sid, folder in folders.items():
        files = sorted(folder.glob("*.md"))
        k_edit, k_small = max(1, round(len(files) * share)), max(1, round(len(files) * 0.02))
        picked = rng.sample(files, k_edit + k_small)
        for f in picked[:k_edit]:
            f.write_text(_doc_text(sid, int(f.stem.split("-")[1]), 1, rng))
        for f in picked[k_edit:]:
            f.unlink()
        for j in range(k_small):
            n = len(files) + j
            (folder / f"doc-{n:04d}.md").write_text(_doc_text(sid, n, 0, rng))
        counts.update(edited=k_edit, deleted=k_small, added=k_small)
    return dict(counts)


def expected_chunks(services: Any, folders: dict[str, Path]) -> dict[str, set[str]]:
    """kb -> the chunk ids the parser and chunker give for the corpus as it is now (the reference)."""
    from freshindex.core.ids import document_id

    out: dict[str, set[str]] = {kb: set() for kb in KBS}
    for i, (sid, folder) in enumerate(sorted(folders.items())):
        for f in sorted(folder.glob("*.md")):
            parsed = services.parsers.parse(f.read_bytes(), f.name)
            out[KBS[i % len(KBS)]].update(c.id for c in services.chunker.chunk(document_id(sid, f.name), parsed))
    return out


# -- services the benchmark runs --------------------------------------------------------------------------------------


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of our own on a free loopback port (no persistence), stopped by its pid."""
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def instance_layout(procs: int) -> list[int]:
    """Pool processes per worker instance: ``procs`` split into instances of at most :data:`PER_INSTANCE`."""
    full, rest = divmod(procs, PER_INSTANCE)
    return [PER_INSTANCE] * full + ([rest] if rest else [])


@contextlib.contextmanager
def workers(env: dict[str, str], work: Path, procs: int) -> Iterator[list[subprocess.Popen]]:
    """``procs`` worker processes as ``freshindex worker`` instances (see :func:`instance_layout`)."""
    from tests.conftest import worker_process

    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(worker_process(env, work / f"worker{i}.log", f"load{i}", "-c", str(c)))
                   for i, c in enumerate(instance_layout(procs))]
        yield started


def wait_ready(app: Any, instances: int, timeout: float = 120.0) -> None:
    """Until every worker instance answers a ping (its pool is up and consuming)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=1.0) or []) >= instances:
            return
    raise RuntimeError(f"fewer than {instances} worker instances answered within {timeout} s")


# -- measuring --------------------------------------------------------------------------------------------------------


@dataclass
class LockSampler:
    """Samples the database's backends every ``interval`` s: how many wait on a lock, and on what."""

    db: str
    interval: float = 0.05
    samples: int = 0
    waiting: list[int] = field(default_factory=list)
    active: list[int] = field(default_factory=list)
    events: collections.Counter = field(default_factory=collections.Counter)
    queries: collections.Counter = field(default_factory=collections.Counter)
    #: CPU seconds (user + system) per backend pid: at first sight and at last sight
    cpu_first: dict[int, float] = field(default_factory=dict)
    cpu_last: dict[int, float] = field(default_factory=dict)

    def _cpu(self, pids: list[int], initial: bool) -> None:
        import psutil

        for pid in pids:
            try:
                t = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            # a backend born during the round started from zero
            self.cpu_first.setdefault(pid, t.user + t.system if initial else 0.0)
            self.cpu_last[pid] = t.user + t.system

    def registry_cpu_seconds(self) -> float:
        """CPU the database's backends spent while sampled (a backend that ended between samples is missed)."""
        return sum(self.cpu_last[p] - self.cpu_first.get(p, 0.0) for p in self.cpu_last)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        from sqlalchemy import create_engine, text

        engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        q = text("SELECT wait_event_type, wait_event, state, left(regexp_replace(query, '\\s+', ' ', 'g'), 90), pid "
                 "FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()")
        with engine.connect() as conn:
            tick = 0
            while not self._stop.is_set():
                rows = conn.execute(q, {"db": self.db}).all()
                if tick % 10 == 0 or self._stop.is_set():
                    self._cpu([r[4] for r in rows], initial=tick == 0)
                tick += 1
                locked = [r for r in rows if r[0] == "Lock"]
                self.samples += 1
                self.waiting.append(len(locked))
                self.active.append(sum(1 for r in rows if r[2] == "active"))
                for r in locked:
                    self.events[r[1]] += 1
                    self.queries[r[3]] += 1
                self._stop.wait(self.interval)
            self._cpu([r[4] for r in conn.execute(q, {"db": self.db}).all()], initial=False)
        engine.dispose()

    def __enter__(self) -> LockSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()

    def report(self, tasks: int) -> dict[str, Any]:
        total = sum(self.waiting)
        return {
            "samples": self.samples,
            "samples_with_waiters": sum(1 for w in self.waiting if w),
            "share_of_samples_waiting": round(sum(1 for w in self.waiting if w) / max(1, self.samples), 4),
            "mean_waiting_backends": round(total / max(1, self.samples), 4),
            "max_waiting_backends": max(self.waiting, default=0),
            "mean_active_backends": round(statistics.fmean(self.active), 3) if self.active else 0.0,
            # backend-seconds spent waiting on a lock, estimated from the samples, per document task
            "lock_wait_ms_per_task": round(1000 * total * self.interval / max(1, tasks), 3),
            "wait_events": dict(self.events.most_common(6)),
            "top_waiting_queries": dict(self.queries.most_common(4)),
        }


def pg_scalar(sql: str, **params: Any) -> Any:
    from sqlalchemy import create_engine, text

    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()
    finally:
        engine.dispose()


def deadlocks(db: str) -> int:
    # Statistics are flushed by backends at transaction end, at most once a second.
    return int(pg_scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = :db", db=db) or 0)


def redis_calls(url: str) -> dict[str, int]:
    import redis

    stats = redis.Redis.from_url(url).info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def worker_cpu_seconds(instances: list[subprocess.Popen]) -> float:
    """CPU seconds (user + system) of every worker instance and its pool processes so far."""
    import psutil

    total = 0.0
    for proc in instances:
        try:
            parent = psutil.Process(proc.pid)
            for p in [parent, *parent.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


def worker_memory(instances: list[subprocess.Popen]) -> dict[str, Any]:
    """RSS and USS (memory unique to the process) of every pool process and instance parent, MiB."""
    import psutil

    pool_rss, pool_uss, parent_rss = [], [], []
    for proc in instances:
        try:
            parent = psutil.Process(proc.pid)
            parent_rss.append(parent.memory_info().rss / 2**20)
            for child in parent.children(recursive=True):
                info = child.memory_full_info()
                pool_rss.append(info.rss / 2**20)
                pool_uss.append(info.uss / 2**20)
        except psutil.Error:
            continue
    med = lambda xs: round(statistics.median(xs), 1) if xs else None  # noqa: E731
    return {"pool_processes": len(pool_rss), "pool_rss_mib_median": med(pool_rss), "pool_uss_mib_median": med(pool_uss),
            "pool_rss_mib_max": round(max(pool_rss), 1) if pool_rss else None, "parent_rss_mib_median": med(parent_rss)}


# -- one round --------------------------------------------------------------------------------------------------------


def _utc(t: dt.datetime) -> dt.datetime:
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t


def sync_round(app: Any, registry: Any, sources: list[str], timeout: float) -> dict[str, Any]:
    """Enqueue a sync of every source at once; wait until every run finished and every build is done."""
    from sqlalchemy import func, select

    from freshindex.registry.schema import DocumentResult, SyncRun
    from freshindex.workers.names import TaskName

    with registry.session() as s:
        first_run = (s.scalar(select(func.max(SyncRun.id))) or 0) + 1
    t0, wall0 = dt.datetime.now(dt.UTC), time.perf_counter()
    for sid in sources:
        app.send_task(str(TaskName.SYNC_SOURCE), args=[sid, "bench"])
    deadline = time.monotonic() + timeout
    while True:
        with registry.session() as s:
            runs = s.scalars(select(SyncRun).where(SyncRun.id >= first_run)).all()
        done = (len({r.source_id for r in runs}) == len(sources) and all(r.status != "running" for r in runs)
                and all(r.build_status not in (None, "pending") for r in runs)
                and not any(registry.staged_changesets(kb) for kb in KBS))
        if done:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"round did not finish in {timeout} s: " +
                               ", ".join(f"{r.id}:{r.status}/{r.build_status}" for r in runs))
        time.sleep(0.2)
    total_s = time.perf_counter() - wall0
    run_ids = [r.id for r in runs]
    with registry.session() as s:
        where = (DocumentResult.sync_run_id.in_(run_ids), DocumentResult.outcome != "deleted")
        tasks, last = s.execute(select(func.count(), func.max(DocumentResult.at)).where(*where)).one()
        seconds = sorted(x or 0.0 for x in s.scalars(select(DocumentResult.seconds).where(*where)))
    docs_s = max(1e-6, (_utc(last) - t0).total_seconds()) if last else total_s
    return {"runs": len(runs), "run_status": dict(collections.Counter(r.status for r in runs)),
            "build_status": dict(collections.Counter(r.build_status for r in runs)),
            "document_tasks": int(tasks), "documents_seconds": round(docs_s, 2), "total_seconds": round(total_s, 2),
            "tasks_per_second": round(tasks / docs_s, 2),
            # the pipeline's own time per document (fetch to staged), as the task recorded it
            "task_seconds_median": round(statistics.median(seconds), 4) if seconds else None}


# -- the checks -------------------------------------------------------------------------------------------------------


def check_consistency(services: Any, folders: dict[str, Path]) -> dict[str, Any]:
    """Zero lost or duplicated chunks: registry vs the corpus, the index vs the registry (see the module doc)."""
    from sqlalchemy import func, select

    from freshindex.registry.schema import Chunk, DocumentResult, Embedding

    reg = services.registry
    expected = expected_chunks(services, folders)
    out: dict[str, Any] = {"kbs": {}}
    with reg.session() as s:
        pending = s.scalar(select(func.count()).select_from(Chunk).where(Chunk.state == "pending")) or 0
        embedded = s.scalar(select(func.coalesce(func.sum(DocumentResult.chunks_embedded), 0))) or 0
        cache_rows = s.scalar(select(func.count()).select_from(Embedding)) or 0
        dup_outcomes = s.scalar(select(func.count()).select_from(
            select(DocumentResult.sync_run_id, DocumentResult.document_id).group_by(
                DocumentResult.sync_run_id, DocumentResult.document_id).having(func.count() > 1).subquery())) or 0
    ok = pending == 0 and embedded == cache_rows and dup_outcomes == 0
    for kb in KBS:
        live = set(reg.live_chunk_ids_for_kb(kb))
        with reg.session() as s:
            servable = set(s.scalars(select(Chunk.id).where(Chunk.kb == kb, Chunk.state == "live",
                                                            Chunk.tombstoned.is_(False))))
        active = reg.active_snapshot(kb)
        points = list(services.store.iter_ids(active.collection)) if active else []
        services.store.release()
        row = {
            "expected_chunks": len(expected[kb]), "registry_live": len(live), "registry_servable": len(servable),
            "lost": len(expected[kb] - servable), "unexpected": len(servable - expected[kb]),
            "index_points": len(points), "index_duplicates": len(points) - len(set(points)),
            "index_missing": len(live - set(points)), "index_orphans": len(set(points) - live),
            "tombstone_backlog": reg.tombstone_backlog(kb),
        }
        row["ok"] = (row["lost"] == row["unexpected"] == row["index_duplicates"] == row["index_missing"]
                     == row["index_orphans"] == row["tombstone_backlog"] == 0 and live == servable)
        ok = ok and row["ok"]
        out["kbs"][kb] = row
    out.update(pending_chunks=pending, chunks_embedded=int(embedded), vector_cache_rows=int(cache_rows),
               duplicate_outcomes=int(dup_outcomes), ok=ok)
    return out


def registry_footprint(db: str, services: Any) -> dict[str, Any]:
    """Rows and bytes (tables, indexes and TOAST) per live chunk, by table."""
    from sqlalchemy import text

    with services.registry.session() as s:
        live = s.execute(text("SELECT count(*) FROM chunks WHERE state = 'live'")).scalar() or 1
        sizes = s.execute(text(
            "SELECT c.relname, pg_total_relation_size(c.oid), c.reltuples FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
        )).all()
        counts = {name: s.execute(text(f'SELECT count(*) FROM "{name}"')).scalar() or 0 for name, _, _ in sizes}
    total = sum(int(b) for _, b, _ in sizes)
    by_table = {name: {"rows": counts[name], "bytes": int(b), "rows_per_chunk": round(counts[name] / live, 3),
                       "bytes_per_chunk": round(int(b) / live, 1)}
                for name, b, _ in sorted(sizes, key=lambda r: -int(r[1])) if counts[name] or int(b) > 16384}
    return {"live_chunks": int(live), "database_bytes": int(pg_scalar("SELECT pg_database_size(:db)", db=db)),
            "table_bytes": total, "bytes_per_chunk": round(total / live, 1),
            "rows_per_chunk": round(sum(counts.values()) / live, 2), "tables": by_table}


# -- one configuration ------------------------------------------------------------------------------------------------


def run_config(procs: int, *, sources: int, docs: int, edit_share: float, broker_url: str,
               timeout: float = 900.0, keep: Path | None = None) -> dict[str, Any]:
    """One worker count end to end on a fresh database; returns its measurements and checks."""
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.app import create_app

    work = Path(tempfile.mkdtemp(prefix=f"fi-load{procs}-", dir=keep))
    db, pg_url = _create_pg_database()
    saved = dict(os.environ)
    try:
        folders = make_corpus(work / "corpus", sources, docs)
        env = distributed_env(work, pg_url, broker_url, f"fi-load{procs}", FRESHINDEX_EMBEDDING__PROVIDER="hashing",
                              FRESHINDEX_REGISTRY__POOL_SIZE="2")
        os.environ.update(env)
        settings = load_settings()
        svc, app = Services(settings), create_app(settings)
        for i, (sid, folder) in enumerate(sorted(folders.items())):
            svc.registry.add_source(sid, kind="folder", location=str(folder), owner="bench", kb=KBS[i % len(KBS)])
        layout = instance_layout(procs)
        result: dict[str, Any] = {"procs": procs, "instances": layout, "sources": sources, "docs_per_source": docs}
        with workers(env, work, procs) as started:
            wait_ready(app, len(layout))
            rounds = {}
            for name in ("initial", "edit"):
                if name == "edit":
                    result["edits"] = edit_corpus(folders, edit_share)
                before_dl, before_redis, before_cpu = deadlocks(db), redis_calls(broker_url), worker_cpu_seconds(started)
                with LockSampler(db) as sampler:
                    try:
                        rnd = sync_round(app, svc.registry, sorted(folders), timeout)
                    except RuntimeError as exc:
                        errors = [line for p in sorted(work.glob("worker*.log"))
                                  for line in p.read_text(errors="replace").splitlines()
                                  if "ERROR" in line or "Error" in line][-20:]
                        raise RuntimeError(f"{exc}\n" + "\n".join(errors)) from exc
                time.sleep(1.2)  # let the backends flush their statistics
                after_redis = redis_calls(broker_url)
                per_task = max(1, rnd["document_tasks"])
                # CPU per document task over the whole round (syncs, finishes and builds included)
                rnd["worker_cpu_ms_per_task"] = round(1000 * (worker_cpu_seconds(started) - before_cpu) / per_task, 1)
                rnd["registry_cpu_ms_per_task"] = round(1000 * sampler.registry_cpu_seconds() / per_task, 1)
                rnd["deadlocks"] = deadlocks(db) - before_dl
                rnd["locks"] = sampler.report(rnd["document_tasks"])
                per = max(1, rnd["document_tasks"])
                rnd["queue_messages_per_document"] = round(
                    (after_redis.get("lpush", 0) - before_redis.get("lpush", 0)) / per, 3)
                rnd["pubsub_messages_per_document"] = round(
                    (after_redis.get("publish", 0) - before_redis.get("publish", 0)) / per, 3)
                rounds[name] = rnd
            result["memory"] = worker_memory(started)
        result["rounds"] = rounds
        result["retries_logged"] = sum(p.read_text(errors="replace").count("Retry in")
                                       for p in work.glob("worker*.log"))
        result["deadlock_errors_logged"] = sum(p.read_text(errors="replace").count("deadlock detected")
                                               for p in work.glob("worker*.log"))
        result["consistency"] = check_consistency(svc, folders)
        result["registry"] = registry_footprint(db, svc)
        svc.close()
        app.close()
        return result
    finally:
        os.environ.clear()
        os.environ.update(saved)
        _drop_pg_database(db)
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def embedding_per_core(chunks: int = 384) -> dict[str, Any]:
    """Chunks per second of the real model (all-MiniLM-L6-v2 int8, ONNX) on one intra-op thread, after
    loading, over chunks of this benchmark's corpus; the figure the capacity table scales per core."""
    from freshindex.models.onnx import OnnxMiniLM

    rng = random.Random(3)
    texts = [_doc_text("e", n, 0, rng).split("\n\n", 2)[2][:900] for n in range(chunks)]
    model = OnnxMiniLM(batch_size=32, threads=1)
    model.embed(texts[:32])  # load and warm up
    started = time.perf_counter()
    model.embed(texts)
    seconds = time.perf_counter() - started
    return {"chunks": chunks, "seconds": round(seconds, 3), "chunks_per_second_one_thread": round(chunks / seconds, 1),
            "chars_per_chunk": round(statistics.fmean(len(t) for t in texts))}


# -- the command ------------------------------------------------------------------------------------------------------


def _markdown(data: dict[str, Any]) -> list[str]:
    results = data["results"]
    base = {r["procs"]: r["rounds"]["initial"]["tasks_per_second"] for r in results}
    rows = []
    for r in results:
        for name, rnd in r["rounds"].items():
            tps = rnd["tasks_per_second"]
            rows.append([r["procs"], "+".join(map(str, r["instances"])), name, rnd["document_tasks"], f"{tps:.1f}",
                         f"{tps / base[1]:.2f}" if 1 in base and name == "initial" else "",
                         f"{tps / base[2]:.2f}" if 2 in base and name == "initial" else "",
                         f"{rnd['total_seconds']:.1f}", rnd["locks"]["share_of_samples_waiting"],
                         rnd["locks"]["mean_waiting_backends"], rnd["locks"]["max_waiting_backends"],
                         rnd["locks"]["lock_wait_ms_per_task"], rnd["deadlocks"],
                         rnd["queue_messages_per_document"], rnd["worker_cpu_ms_per_task"],
                         rnd["registry_cpu_ms_per_task"], "yes" if r["consistency"]["ok"] else "NO"])
    md = ["# Many workers on one PostgreSQL registry", "",
          f"{data['sources']} folder sources x {data['docs']} small Markdown documents in 2 knowledge bases, hashing "
          f"embedder, `freshindex worker` instances of at most {PER_INSTANCE} prefork processes on a private Redis, "
          f"PostgreSQL {data['postgres']} on 127.0.0.1, {data['cpus']} CPUs. Round *initial*: every document new; "
          f"round *edit*: {data['edit_share']:.0%} edited, 2 % deleted, 2 % added. Load average before: "
          f"{data['load_before']}, after: {data['load_after']}.", "",
          *table(["procs", "instances", "round", "doc tasks", "tasks/s", "x vs 1", "x vs 2", "round s (incl. builds)",
                  "samples with lock waiters", "mean waiters", "max waiters", "lock wait ms/task", "deadlocks",
                  "queue msgs/doc", "worker CPU ms/task", "PostgreSQL CPU ms/task", "0 lost/dup"],
                 ["r", "l", "l", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "l"], rows), ""]
    md += ["Consistency after the edit round (registry vs the corpus re-chunked here; index vs registry):", "",
           *table(["procs", "kb", "expected", "servable", "lost", "unexpected", "points", "dup points", "missing",
                   "orphans", "embedded = cache rows"], ["r", "l", "r", "r", "r", "r", "r", "r", "r", "r", "l"],
                  [[r["procs"], kb, k["expected_chunks"], k["registry_servable"], k["lost"], k["unexpected"],
                    k["index_points"], k["index_duplicates"], k["index_missing"], k["index_orphans"],
                    f"{r['consistency']['chunks_embedded']} = {r['consistency']['vector_cache_rows']}"]
                   for r in results for kb, k in r["consistency"]["kbs"].items()]), ""]
    last = results[-1]
    md += ["Worker memory and registry footprint:", "",
           *table(["procs", "pool RSS MiB (median)", "pool USS MiB (median)", "instance parent RSS MiB",
                   "registry bytes/chunk", "registry rows/chunk"], ["r", "r", "r", "r", "r", "r"],
                  [[r["procs"], r["memory"]["pool_rss_mib_median"], r["memory"]["pool_uss_mib_median"],
                    r["memory"]["parent_rss_mib_median"], r["registry"]["bytes_per_chunk"],
                    r["registry"]["rows_per_chunk"]] for r in results]), "",
           f"Registry bytes per live chunk by table ({last['procs']} procs, {last['registry']['live_chunks']} live "
           "chunks, tables + indexes + TOAST; small absolute sizes carry PostgreSQL's per-relation minimum):", "",
           *table(["table", "rows", "rows/chunk", "bytes/chunk"], ["l", "r", "r", "r"],
                  [[t, v["rows"], v["rows_per_chunk"], v["bytes_per_chunk"]]
                   for t, v in last["registry"]["tables"].items()][:10]), ""]
    waits = {r["procs"]: r["rounds"]["initial"]["locks"]["top_waiting_queries"] for r in results}
    md += ["What the waiting backends ran (initial round, most frequent first):", ""]
    md += [f"- {p} procs: " + ("; ".join(f"`{q}` x{n}" for q, n in w.items()) or "none sampled")
           for p, w in waits.items()]
    if data.get("embedding"):
        e = data["embedding"]
        md += ["", f"Embedding on one core (all-MiniLM-L6-v2 int8 ONNX, one intra-op thread, {e['chunks']} chunks of "
               f"~{e['chars_per_chunk']} characters): **{e['chunks_per_second_one_thread']} chunks/s**."]
    md += ["", f"Command: `{data['command']}`"]
    return md


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 8, 16])
    parser.add_argument("--sources", type=int, default=6)
    parser.add_argument("--docs", type=int, default=150)
    parser.add_argument("--edit-share", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--no-embedding-probe", action="store_true", help="skip the one-core model measurement")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the workers, redis and the database are cleaned up
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results = []
    with private_redis() as broker:
        for procs in args.procs:
            print(f"-- {procs} worker processes", flush=True)
            results.append(run_config(procs, sources=args.sources, docs=args.docs, edit_share=args.edit_share,
                                      broker_url=broker, timeout=args.timeout))
            print({k: v for k, v in results[-1].items() if k != "registry"}, flush=True)
    data = {
        "command": "python -m bench.workers_load --procs " + " ".join(map(str, args.procs)) +
                   f" --sources {args.sources} --docs {args.docs} --edit-share {args.edit_share}",
        "sources": args.sources, "docs": args.docs, "edit_share": args.edit_share, "cpus": os.cpu_count(),
        "postgres": pg_scalar("SHOW server_version"), "load_before": load_before,
        "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()), "results": results,
        "embedding": None if args.no_embedding_probe else embedding_per_core(),
    }
    write("workers_load", data, _markdown(data))


if __name__ == "__main__":
    main()
