"""Recovery time after a worker is SIGKILLed mid-sync, with the DEFAULT lease settings.

Each trial: a fresh PostgreSQL database and fresh queues on the local Redis,
``freshindex beat`` (whose ``reap_runs`` is the only recovery here: no CLI
follows the run) and two ``freshindex worker -c 1`` processes, the default
settings throughout (``sync.run_lease_s``, ``sync.heartbeat_interval_s``, the
reap interval and the broker's visibility timeout as shipped).  The corpus:
the bundled examples/kb (its scanned PDF left out), 40 generated runbooks
(bench/corpus.py) and one 100-section handbook that takes seconds to embed.
The sync is sent as a task; the worker embedding the handbook is killed
with SIGKILL (its process group: no goodbye, its message unacknowledged)
and started again at once, as a supervisor would.  Measured from the kill:
until a worker begins the lost handbook again (resumed progress) and until
the run has finished and its build settled.

    python -m bench.recovery [--trials 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.corpus import write_corpus
from bench.report import table, write
from tests.conftest import EXAMPLES, REDIS_URL, ROOT, _create_pg_database, _drop_pg_database
from tests.e2e.test_faults import BIG_KEY, Workers, active_tasks, write_big_document


def _env(work: Path, pg_url: str) -> dict[str, str]:
    from freshindex.registry import db

    engine = db.make_engine(pg_url)
    db.upgrade(engine)
    engine.dispose()
    # Only where things are: every lease, heartbeat and timeout stays at its default.
    return {"FRESHINDEX_DATA_DIR": str(work / "data"), "FRESHINDEX_REGISTRY__URL": pg_url,
            "FRESHINDEX_BROKER__URL": REDIS_URL + "/0",
            "FRESHINDEX_BROKER__QUEUE_PREFIX": f"fi-recovery-{uuid.uuid4().hex[:8]}", "FRESHINDEX_LOG_LEVEL": "INFO"}


def one_trial(n: int) -> dict:
    from freshindex.core.enums import BuildStatus, RunStatus
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.app import create_app
    from freshindex.workers.names import TaskName

    work = Path(tempfile.mkdtemp(prefix="fi-recovery-"))
    name, pg_url = _create_pg_database()
    saved = dict(os.environ)
    workers = svc = app = beat = None
    try:
        kb = work / "kb"
        shutil.copytree(EXAMPLES / "kb", kb)
        (kb / "pdf" / "scanned-policy.pdf").unlink()
        write_corpus(kb / "runbooks", 40)
        write_big_document(kb, sections=100, seed=n)
        env = _env(work, pg_url)
        os.environ.update(env)
        settings = load_settings()
        svc, app = Services(settings), create_app(settings)
        workers = Workers(env, work)
        hosts = [workers.start("wa"), workers.start("wb")]
        workers.wait_ready(app, hosts, timeout=120)
        beat_log = open(work / "beat.log", "w")
        beat = subprocess.Popen([sys.executable, "-m", "freshindex", "beat"], cwd=ROOT, env={**os.environ, **env},
                                stdout=beat_log, stderr=subprocess.STDOUT, start_new_session=True)
        beat_log.close()
        svc.registry.add_source("docs", kind="folder", location=str(kb), owner="bench", kb="default")
        app.send_task(str(TaskName.SYNC_SOURCE), args=["docs", "bench"])
        victim, deadline = None, time.monotonic() + 300
        while victim is None:
            if time.monotonic() > deadline:
                raise RuntimeError("never saw the handbook being processed")
            for host, tasks in active_tasks(app, "freshindex.process_document").items():
                if any(BIG_KEY in (t.get("args") or []) for t in tasks):
                    victim = host
            time.sleep(0.2)
        time.sleep(1.0)  # inside the handbook: parsing and embedding take seconds
        run = svc.registry.sync_runs("docs", limit=1)[0]
        done_at_kill, planned = svc.registry.run_progress(run.id)
        workers.kill(victim)
        killed, killed_wall = time.monotonic(), time.time()
        workers.start(victim.split("-")[0])  # the supervisor restarts it
        resumed = ended = None
        while ended is None:
            if time.monotonic() - killed > 600:
                raise RuntimeError(f"run {run.id} did not end within 600 s of the kill")
            if resumed is None:
                started = svc.registry.started_documents(run.id).get(BIG_KEY)
                result = [e for e in svc.registry.document_errors(run_id=run.id) if e.key == BIG_KEY]
                if (started is not None and started.timestamp() > killed_wall) or result:
                    resumed = time.monotonic() - killed
            current = svc.registry.get_sync_run(run.id)
            if current.status != RunStatus.RUNNING and current.build_status != BuildStatus.PENDING:
                ended = time.monotonic() - killed
                resumed = ended if resumed is None else resumed  # finished between two looks
            time.sleep(0.2)
        docs = svc.registry.documents_for_source("docs")
        return {"kill_to_resumed_s": round(resumed, 1), "kill_to_run_ended_s": round(ended, 1),
                "done_at_kill": done_at_kill, "planned": planned, "status": current.status,
                "build": current.build_status, "handbook": docs[BIG_KEY].state,
                "reaps": [r["action"] for r in current.summary.get("reaps", [])]}
    finally:
        if beat is not None:
            os.killpg(beat.pid, signal.SIGTERM)
            beat.wait(timeout=30)
        if workers is not None:
            workers.stop_all()
        if svc is not None:
            svc.close()
        if app is not None:
            app.close()
        os.environ.clear()
        os.environ.update(saved)
        _drop_pg_database(name)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    from freshindex.schedules.beat import reap_interval
    from freshindex.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    trials = [one_trial(n) for n in range(args.trials)]
    defaults = Settings()
    resumed = [t["kill_to_resumed_s"] for t in trials]
    ended = [t["kill_to_run_ended_s"] for t in trials]
    meta = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "python": platform.python_version(),
            "cores": os.cpu_count(), "broker": "redis (local)", "registry": "postgresql (local)",
            "embedding_provider": defaults.embedding.provider, "run_lease_s": defaults.sync.run_lease_s,
            "heartbeat_interval_s": defaults.sync.heartbeat_interval_s, "reap_interval_s": reap_interval(defaults),
            "corpus": "examples/kb (7 files) + 40 runbooks + a 100-section handbook"}
    summary = {"kill_to_resumed_median_s": round(statistics.median(resumed), 1), "kill_to_resumed_max_s": max(resumed),
               "kill_to_run_ended_median_s": round(statistics.median(ended), 1), "kill_to_run_ended_max_s": max(ended)}
    lines = ["# Recovery after a worker SIGKILL, default settings", "",
             f"`python -m bench.recovery --trials {args.trials}` on {meta['cores']} cores: `freshindex beat` and two "
             f"`freshindex worker -c 1` on Redis, PostgreSQL registry, {meta['embedding_provider']} embeddings, every "
             f"setting at its default: lease {meta['run_lease_s']:g} s, heartbeat {meta['heartbeat_interval_s']:g} s, "
             f"reaper on beat every {meta['reap_interval_s']:g} s, no CLI following the run. The worker embedding "
             "the handbook is SIGKILLed and restarted at once; times are from the kill.", ""]
    lines += table(["trial", "done at kill", "kill -> handbook begun again s", "kill -> run ended s", "run", "build",
                    "reaps"], list("rrrrlll"),
                   [[n + 1, f"{t['done_at_kill']}/{t['planned']}", t["kill_to_resumed_s"], t["kill_to_run_ended_s"],
                     t["status"], t["build"], ", ".join(t["reaps"])] for n, t in enumerate(trials)])
    lines += ["", f"Resumed: median {summary['kill_to_resumed_median_s']} s, max {summary['kill_to_resumed_max_s']} s. "
              f"Run ended: median {summary['kill_to_run_ended_median_s']} s, max {summary['kill_to_run_ended_max_s']} s "
              "(includes re-embedding the handbook and the build)."]
    write("recovery", {"meta": meta, "summary": summary, "trials": trials}, lines)


if __name__ == "__main__":
    main()
