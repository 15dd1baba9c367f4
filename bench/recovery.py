"""Recovery time after a worker is killed: SIGKILL to run completed.

Each round: a fresh PostgreSQL database, two Celery workers over the local
Redis, the sample knowledge base plus one large Markdown handbook (real
ONNX model, so the handbook takes seconds to embed).  The worker processing
the handbook is killed with SIGKILL; the time from the kill to the run
having ended (built, the CLI follower returned) is measured.  Median of
``--rounds``.  Recovery here comes from the lease (``--lease``) and the
follower's own reaping; the broker's visibility timeout (``--visibility``)
is the slower backstop.

    python -m bench.recovery --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.report import table, write
from tests.conftest import EXAMPLES, REDIS_URL, _create_pg_database, _drop_pg_database
from tests.e2e.test_faults import BIG_KEY, Follower, Workers, active_tasks, fault_env, write_big_document


def one_round(lease: float, visibility: int, sections: int) -> dict:
    from freshindex.settings import load_settings
    from freshindex.workers.app import create_app

    from freshindex.services import Services

    work = Path(tempfile.mkdtemp(prefix="fi-recovery-"))
    name, pg_url = _create_pg_database()
    saved = dict(os.environ)
    workers = svc = app = None
    try:
        kb = work / "kb"
        shutil.copytree(EXAMPLES / "kb", kb)
        write_big_document(kb, sections=sections)
        env = fault_env(work, pg_url, REDIS_URL + "/0", embedding="onnx")
        env.update({"FRESHINDEX_SYNC__RUN_LEASE_S": str(lease), "FRESHINDEX_BROKER__VISIBILITY_TIMEOUT": str(visibility)})
        os.environ.update(env)
        settings = load_settings()
        svc, app = Services(settings), create_app(settings)
        workers = Workers(env, work)
        hosts = [workers.start("wa"), workers.start("wb")]
        workers.wait_ready(app, hosts)
        svc.registry.add_source("docs", kind="folder", location=str(kb), owner="bench", kb="default")
        follower = Follower(svc, app, "docs")
        follower.start()
        victim = None
        while victim is None and follower.is_alive():
            for host, tasks in active_tasks(app, "freshindex.process_document").items():
                if any(BIG_KEY in (t.get("args") or []) for t in tasks):
                    victim = host
            time.sleep(0.2)
        if victim is None:
            raise RuntimeError("never saw the large document being processed")
        time.sleep(1.0)
        workers.kill(victim)
        killed = time.monotonic()
        report = follower.result(timeout=300)
        return {"kill_to_run_ended_s": round(follower.ended_at - killed, 2), "status": report.run.status,
                "build": report.build_status,
                "reaped_resumed": svc.metrics.value("freshindex_reaped_runs_total", action="resumed")}
    finally:
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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease", type=float, default=5.0, help="sync.run_lease_s, seconds")
    parser.add_argument("--visibility", type=int, default=10, help="broker.visibility_timeout, seconds")
    parser.add_argument("--sections", type=int, default=100, help="sections in the large handbook")
    args = parser.parse_args()
    rounds = [one_round(args.lease, args.visibility, args.sections) for _ in range(args.rounds)]
    times = [r["kill_to_run_ended_s"] for r in rounds]
    meta = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "python": platform.python_version(),
            "cores": os.cpu_count(), "broker": "redis (local)", "registry": "postgresql (local)",
            "embedding_model": "all-MiniLM-L6-v2-onnx-int8", "lease_s": args.lease,
            "visibility_timeout_s": args.visibility, "heartbeat_interval_s": 1.0, "sections": args.sections}
    summary = {"median_s": round(statistics.median(times), 2), "min_s": min(times), "max_s": max(times)}
    lines = ["# Recovery after a worker SIGKILL", "",
             f"`python -m bench.recovery --rounds {args.rounds} --lease {args.lease:g} --visibility {args.visibility}` "
             f"on {meta['cores']} cores: two workers (prefork, -c 1) on Redis, PostgreSQL registry, "
             f"{meta['embedding_model']}. The worker embedding a {args.sections}-section handbook is killed; "
             "the time is from the kill to the run having ended (documents, finish, build).", ""]
    lines += table(["round", "kill -> run ended s", "run", "build", "resumed by reaper"], list("lrllr"),
                   [[n + 1, r["kill_to_run_ended_s"], r["status"], r["build"], int(r["reaped_resumed"])]
                    for n, r in enumerate(rounds)])
    lines += ["", f"Median {summary['median_s']} s (min {summary['min_s']}, max {summary['max_s']}). "
              "It includes re-embedding the killed worker's document on the survivor."]
    write("recovery", {"meta": meta, "summary": summary, "rounds": rounds}, lines)


if __name__ == "__main__":
    main()
