"""Cores one inline sync uses: CPU seconds over wall, parsing in threads (``pipeline.processes=1``) and in a pool.

A full build of ``--pages`` pages of PostgreSQL 15's manual (``bench.realcorpus.postgres_trees``, the
throughput benchmark's corpus) through ``Services`` + ``sync_inline`` with ``embedding.provider=hashing``,
once per setting of ``pipeline.processes`` (``--processes``, default ``1,0``: threads, then the usable
cores), one after the other in this process, each into a fresh data directory.  CPU seconds are this
process's (every thread), its waited-for children's, and the multiprocessing forkserver's with its own
children (the pool's workers are the forkserver's children, so ``RUSAGE_CHILDREN`` alone misses them).

    python -m bench.inline_cores [--pages 200] [--processes 1,0] [--name inline_cores]

Writes bench/results/<name>.json and .md.  It does not compare with the model (the hashing embedder
leaves parsing and the registry as the work), nor measure the update sync.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.realcorpus import materialise, postgres_trees
from bench.report import table, write


def _forkserver_cpu_s() -> float:
    """CPU seconds of the forkserver and its reaped children (its pool workers), 0 when none runs."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def _cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + _forkserver_cpu_s()


def run(pages: dict[str, Path], processes: int, work: Path) -> dict[str, Any]:
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    source = work / "source"
    materialise(pages, source)
    svc = Services(load_settings(data_dir=work / "data", embedding={"provider": "hashing"},
                                 pipeline={"processes": processes}))
    svc.registry.add_source("bench", kind="folder", location=str(source), owner="bench", kb="bench")
    cpu0, started = _cpu_s(), time.perf_counter()
    report = sync_inline(svc, "bench")
    wall = time.perf_counter() - started
    cpu = _cpu_s() - cpu0
    s = report.run.summary
    svc.close()
    return {"processes": processes, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "cores_used": round(cpu / wall, 3), "documents": s.get("documents", {}),
            "chunks": s.get("chunks_embedded", 0), "points": report.snapshot.point_count if report.snapshot else None}


def pool_start() -> dict[str, float]:
    """Seconds until a new pool of the usable cores answers (:meth:`LinePool.works`): the first one also
    starts the forkserver and imports the line's modules in it; the next ones fork from it."""
    from freshindex.workers.steps.pool import LinePool, usable_cores

    out = {}
    for name in ("first", "next"):
        started = time.perf_counter()
        pool = LinePool(usable_cores())
        assert pool.works()
        out[name] = round(time.perf_counter() - started, 3)
        pool.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=200, help="pages of the manual (0: all 1,167)")
    parser.add_argument("--processes", default="1,0", help="pipeline.processes settings to run, in order")
    parser.add_argument("--name", default="inline_cores", help="results file name")
    args = parser.parse_args()
    old, _ = postgres_trees(args.pages)
    start = pool_start()
    print("pool start", start, flush=True)
    rows = []
    for value in (int(v) for v in args.processes.split(",")):
        with tempfile.TemporaryDirectory(prefix="fi-cores-") as tmp:
            rows.append(run(old, value, Path(tmp)))
        print(rows[-1], flush=True)
    load = os.getloadavg()
    data = {"pages": len(old), "cores": len(os.sched_getaffinity(0)), "load_avg_end": load, "pool_start_s": start,
            "runs": rows}
    md = [f"# Cores used by one inline sync ({len(old)} PostgreSQL manual pages, hashing embedder)", "",
          f"{data['cores']} usable cores; load average at the end {load[0]:.2f}. `pipeline.processes` 0 = the "
          "usable cores, 1 = threads only. A pool answers in "
          f"{start['first']} s when it starts the forkserver, {start['next']} s after.", "",
          *table(["pipeline.processes", "wall s", "CPU s", "cores used", "points"], ["r", "r", "r", "r", "r"],
                 [[r["processes"], r["wall_s"], r["cpu_s"], r["cores_used"], r["points"]] for r in rows])]
    write(args.name, data, md)


if __name__ == "__main__":
    main()
