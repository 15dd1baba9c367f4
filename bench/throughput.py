"""Throughput on a whole public manual: freshindex beside CocoIndex and a LangChain pipeline, one window.

The corpus (``--corpus``) is Debian's ``postgresql-doc-15`` ``15.18-0+deb12u1``
(full build, 1,167 pages) then ``15.20-0+deb12u1`` (the release update, 1,169),
every HTML page of both (``bench.realcorpus.postgres_trees``, fetched once by
``apt-get download`` into ``~/.cache/freshindex-bench``), or
``python-django-doc`` (689 pages, ``--corpus django``); ``--pages N`` keeps N
pages present in both releases, for a quick run.  Every run is a child process
of its own, one after the other, so each has its own peak RSS (``os.wait4``);
all in one invocation, so the machine's load is alike for all (the load
averages at the start and end and before each run are recorded: the machine is
shared, and wall times move with its load).

Systems (``--systems``, comma-separated; default ``freshindex,cocoindex,langchain``),
each a full build of the old release then the update to the new one:

* ``freshindex``: ``Services`` + ``sync_inline`` (the embedded default: SQLite
  registry, Qdrant Edge) with the bundled ONNX MiniLM int8 (``model``) and
  with ``embedding.provider=hashing`` (``hashing``); after the update, untimed,
  the model embeds the chunks whose text really changed (the model floor of the
  update).  ``bench.throughput --child fresh``.
* ``cocoindex``: CocoIndex 1.0 (``bench.peers.cocoindex_side``): BeautifulSoup
  text, CocoIndex's recursive splitter, memoised per file and per chunk, a
  batching custom function calling the same two freshindex embedders, rows in
  the local PostgreSQL.
* ``langchain``: LangChain's own ``index()`` (``bench.peers.langchain_side``):
  BeautifulSoup text, ``RecursiveCharacterTextSplitter``, an in-memory record
  manager and vector store, ``cleanup="full"``, an ``Embeddings`` over the same
  two freshindex embedders.
* ``naive`` (not by default): ``bench.realcorpus``'s naive side, the earlier
  LangChain stand-in (one text per model run through a plain onnxruntime
  session, a dict doing what ``index(cleanup="incremental")`` does), model only.
* ``parse`` (not by default): the naive parse and split alone, no model.

Figures (:data:`GOALS`, each with its direction): freshindex wall over
CocoIndex wall (full and update, with the model and with the hashing
embedder), cores used by freshindex's hashing full build (CPU seconds over
wall), the update's wall over the model floor, the peak RSS of freshindex's
model and hashing runs, freshindex wall over the LangChain pipeline's.

    python -m bench.throughput [--pages N] [--systems freshindex,cocoindex,langchain] [--name throughput]

Writes bench/results/<name>.json and .md.  It does not install the peers: CocoIndex and asyncpg come with the
``bench`` extra (``pip install -e .[server,bench]``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.realcorpus import CACHE, ROOT, django_trees, materialise, naive_text, postgres_trees, split_recursive
from bench.report import table, write

#: figure -> (direction, goal): "<=" a ceiling, ">=" a floor.
GOALS: dict[str, tuple[str, float]] = {
    "cocoindex_full_ratio": ("<=", 0.9),
    "cocoindex_update_ratio": ("<=", 0.8),
    "cocoindex_hashing_full_ratio": ("<=", 1.0),
    "cocoindex_hashing_update_ratio": ("<=", 0.8),
    "cores_used_hashing_full": (">=", 1.7),
    "update_over_model_floor": ("<=", 1.5),
    "peak_rss_mb": ("<=", 450.0),
    "peak_rss_mb_hashing": ("<=", 250.0),
    "langchain_full_ratio": ("<=", 1.0),
    "langchain_update_ratio": ("<=", 0.4),
}
#: The manuals: (old, new) page maps of two releases.
CORPORA: dict[str, Callable[[int], tuple[dict[str, Path], dict[str, Path]]]] = {
    "postgres": postgres_trees, "django": django_trees}
SYSTEMS = ("freshindex", "cocoindex", "langchain", "naive", "parse")
DEFAULT_SYSTEMS = "freshindex,cocoindex,langchain"
#: Runs in this order: each hashing pair, then each model pair side by side, so each pair meets a like load.
RUNS = (("parse", "none"), ("freshindex", "hashing"), ("cocoindex", "hashing"), ("langchain", "hashing"),
        ("freshindex", "model"), ("cocoindex", "model"), ("langchain", "model"), ("naive", "model"))
#: CocoIndex's own state (LMDB) lives in the bench cache.
COCOINDEX_STATE = CACHE / "cocoindex"


# -- the naive parse (no model) ----------------------------------------------------------

def naive_chunks(root: Path) -> list[str]:
    """The naive pipeline's chunks of every file under ``root``, in path order."""
    out: list[str] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        out.extend(split_recursive(naive_text(path.relative_to(root).as_posix(), path.read_bytes())))
    return out


def run_naive_parse(pages: Path) -> dict[str, Any]:
    started = time.perf_counter()
    chunks = naive_chunks(pages)
    return {"wall_s": round(time.perf_counter() - started, 3), "chunks": len(chunks)}


# -- freshindex: full build then the update ------------------------------------------------

def _cpu_s() -> float:
    """CPU seconds of this process (every thread), of its waited-for children and of the multiprocessing
    forkserver with the pool workers it reaped (``pipeline.processes``: they are the forkserver's children, so
    ``RUSAGE_CHILDREN`` alone misses them)."""
    from bench.inline_cores import _forkserver_cpu_s

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + _forkserver_cpu_s()


def _live_chunks(svc: Any, kb: str, batch: int = 500) -> Iterator[tuple[str, bytes]]:
    """(embedded text, digest of the chunk text) of every live chunk of ``kb``, a batch of rows at a time:
    what the bench keeps of a release is digests, so that it adds little to the run's peak memory."""
    from freshindex.core.types import embed_text

    ids = svc.registry.live_chunk_ids_for_kb(kb)
    for i in range(0, len(ids), batch):
        for r in svc.registry.chunk_rows(ids[i : i + batch]):
            digest = hashlib.blake2b(r.text.encode(), digest_size=16).digest()
            yield embed_text(r.heading_path, r.text, title=r.title), digest


def run_fresh(old: Path, new: Path, work: Path, provider: str) -> dict[str, Any]:
    """Full build of ``old`` through Services + sync_inline, then the update to ``new``; for the model,
    the floor of the update: the model's time for the chunks whose text really changed (untimed)."""
    from bench.realcorpus import _tree
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    source = work / "source"
    materialise(_tree(old), source)
    svc = Services(load_settings(data_dir=work / "data", sync={"max_deletion_share": 1.0},
                                 embedding={"provider": provider}))
    svc.registry.add_source("bench", kind="folder", location=str(source), owner="bench", kb="bench")
    svc.embedder.embed(["warm up the model"])  # load time is not build time, on either side
    model = svc.embedder.model_id

    def sync() -> dict[str, Any]:
        embed0, cpu0 = svc.metrics.value("freshindex_embed_seconds_total", model=model), _cpu_s()
        started = time.perf_counter()
        report = sync_inline(svc, "bench")
        wall = time.perf_counter() - started
        cpu = _cpu_s() - cpu0
        s = report.run.summary
        out = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 2), "cores_used": round(cpu / wall, 3),
               "embed_s": round(svc.metrics.value("freshindex_embed_seconds_total", model=model) - embed0, 3),
               "embedded": s.get("chunks_embedded", 0), "reused": s.get("chunks_reused", 0),
               "build": str(report.build_status), "errors": len(report.errors),
               "points": report.snapshot.point_count if report.snapshot else None}
        print(f"freshindex[{provider}]: {json.dumps(out)}", file=sys.stderr, flush=True)
        return out

    full = sync()
    before = {digest for _, digest in _live_chunks(svc, "bench")}
    materialise(_tree(new), source)
    update = sync()
    peak_sync = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # before the analysis
    changed = sorted({emb for emb, digest in _live_chunks(svc, "bench") if digest not in before})
    started = time.perf_counter()
    svc.embedder.embed(changed)
    floor = {"chunks": len(changed), "model_s": round(time.perf_counter() - started, 3)}
    svc.close()
    return {"full": full, "update": update, "floor": floor, "provider": provider, "peak_rss_mb_sync": peak_sync}


# -- the driver -------------------------------------------------------------------------

def _run_child(cmd: list[str], out: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``python -m <cmd>`` as a child; its JSON result plus peak RSS and CPU time (``os.wait4``)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", *cmd], cwd=ROOT, env={**os.environ, **(env or {})})
    tree = _TreeSampler(proc.pid)
    tree.start()
    _, status, usage = os.wait4(proc.pid, 0)
    tree.stop()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}: exit code {code}")
    data: dict[str, Any] = json.loads(out.read_text())
    # The peak of the whole process tree (the run, a pool's forkserver and workers): PSS summed, so pages the
    # processes share are counted once; the largest single process's peak RSS beside it.
    data["peak_rss_mb"] = max(round(usage.ru_maxrss / 1024, 1), tree.peak_pss_mb)
    data["peak_rss_mb_one_process"] = round(usage.ru_maxrss / 1024, 1)  # Linux: KiB
    data["peak_tree_processes"] = tree.most_processes
    data["process_s"] = round(time.perf_counter() - started, 1)
    data["process_cpu_s"] = round(max(usage.ru_utime + usage.ru_stime, tree.cpu_s), 1)
    return data


class _TreeSampler(threading.Thread):
    """Samples a process and its descendants every ``interval`` s: the peak of their summed PSS, and the CPU
    seconds of every process seen (its last reading), so workers orphaned to init are still counted."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_pss_mb, self.most_processes = 0.0, 0
        self._cpu: dict[int, float] = {}
        self._stopped = threading.Event()

    @property
    def cpu_s(self) -> float:
        return sum(self._cpu.values())

    def run(self) -> None:
        import psutil

        while not self._stopped.wait(self.interval):
            try:
                root = psutil.Process(self.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            pss = 0
            for p in procs:
                try:
                    pss += p.memory_full_info().pss
                    t = p.cpu_times()
                    self._cpu[p.pid] = t.user + t.system
                except psutil.Error:
                    continue
            self.peak_pss_mb = max(self.peak_pss_mb, round(pss / 2**20, 1))
            self.most_processes = max(self.most_processes, len(procs))

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=5)


def child_command(system: str, embedder: str, old: Path, new: Path, work: Path,
                  ) -> tuple[list[str], Path, dict[str, str]]:
    """The child process of one run: module and arguments, where it writes its JSON, extra environment."""
    out = work / f"{system}-{embedder}.json"
    if system == "cocoindex":
        return (["bench.peers.cocoindex_side", "--old", str(old), "--new", str(new), "--work",
                 str(COCOINDEX_STATE / embedder), "--embedder", embedder, "--out", str(out)], out,
                {"COCOINDEX_DISABLE_USAGE_TRACKING": "1"})
    if system == "langchain":
        return (["bench.peers.langchain_side", "--old", str(old), "--new", str(new), "--embedder", embedder,
                 "--out", str(out)], out, {})
    if system == "naive":
        return (["bench.realcorpus", "--child", "naive", "--old", str(old), "--new", str(new), "--work",
                 str(work / "naive"), "--out", str(out), "--noop-repeat", "1"], out, {})
    kind = "parse" if system == "parse" else "fresh"
    return (["bench.throughput", "--child", kind, "--embedder", embedder, "--old", str(old), "--new", str(new),
             "--work", str(work / f"{system}-{embedder}"), "--out", str(out)], out, {})


def measure(old: Path, new: Path, work: Path, systems: set[str],
            done: Callable[[dict[str, Any], list[str]], None] | None = None,
            embedders: set[str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Every run of ``systems`` (with ``embedders``: only those embedders') in :data:`RUNS` order; a run that
    fails is reported and the others still run.  ``done`` is called after each, so a window cut short leaves its
    figures."""
    runs: dict[str, Any] = {}
    failed: list[str] = []
    for system, embedder in RUNS:
        if system not in systems or (embedders is not None and embedder not in embedders | {"none"}):
            continue
        name = f"{system}-{embedder}"
        load = os.getloadavg()
        try:
            runs[name] = _run_child(*child_command(system, embedder, old, new, work))
        except (RuntimeError, OSError, ValueError) as exc:
            failed.append(f"{name}: {exc}")
            print(f"{name} failed: {exc}", file=sys.stderr)
            continue
        runs[name]["load_before"] = [round(x, 2) for x in load]
        print(f"{name}: {json.dumps(runs[name], default=str)[:400]}", file=sys.stderr, flush=True)
        if done is not None:
            done(runs, failed)
    return runs, failed


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def figures(runs: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """The goal figures from the runs that ran (None where a run is missing)."""
    def wall(run: str, phase: str) -> float | None:
        d = runs.get(run)
        return d[phase]["wall_s"] if d is not None else None

    fm, fh = runs.get("freshindex-model"), runs.get("freshindex-hashing")
    floor = fm["floor"]["model_s"] if fm else None
    return {
        "cocoindex_full_ratio": _ratio(wall("freshindex-model", "full"), wall("cocoindex-model", "full")),
        "cocoindex_update_ratio": _ratio(wall("freshindex-model", "update"), wall("cocoindex-model", "update")),
        "cocoindex_hashing_full_ratio": _ratio(wall("freshindex-hashing", "full"), wall("cocoindex-hashing", "full")),
        "cocoindex_hashing_update_ratio": _ratio(wall("freshindex-hashing", "update"),
                                                 wall("cocoindex-hashing", "update")),
        "cores_used_hashing_full": fh["full"]["cores_used"] if fh else None,
        "update_over_model_floor": _ratio(wall("freshindex-model", "update"), floor),
        "peak_rss_mb": fm["peak_rss_mb"] if fm else None,
        "peak_rss_mb_hashing": fh["peak_rss_mb"] if fh else None,
        "langchain_full_ratio": _ratio(wall("freshindex-model", "full"), wall("langchain-model", "full")),
        "langchain_update_ratio": _ratio(wall("freshindex-model", "update"), wall("langchain-model", "update")),
    }


def verdicts(values: dict[str, float | None]) -> dict[str, dict[str, Any]]:
    """Each figure with its goal and whether this run met it ("not measured" where its runs did not run)."""
    out = {}
    for name, (direction, goal) in GOALS.items():
        value = values.get(name)
        ok = None if value is None else (value <= goal if direction == "<=" else value >= goal)
        out[name] = {"value": value, "goal": f"{direction} {goal:g}",
                     "result": "not measured" if ok is None else ("pass" if ok else "FAIL")}
    return out


def goal_rows(values: dict[str, float | None]) -> list[list[Any]]:
    return [[name, "-" if v["value"] is None else v["value"], v["goal"], v["result"]]
            for name, v in verdicts(values).items()]


def _child_main(args: argparse.Namespace) -> None:
    args.work.mkdir(parents=True, exist_ok=True)
    if args.child == "parse":
        data = run_naive_parse(args.old)
    else:
        data = run_fresh(args.old, args.new, args.work, "onnx" if args.embedder == "model" else "hashing")
    args.out.write_text(json.dumps(data, default=str))


def _run_rows(runs: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for name, d in runs.items():
        if "full" not in d:  # the parse alone
            rows.append([name, d["wall_s"], d["chunks"], "-", "-", "-", d["peak_rss_mb"], d["process_cpu_s"],
                         " ".join(map(str, d["load_before"]))])
            continue
        full, update = d["full"], d["update"]
        rows.append([name, full["wall_s"], full["embedded"], full.get("cpu_s", "-"), update["wall_s"],
                     update["embedded"], d["peak_rss_mb"], d["process_cpu_s"], " ".join(map(str, d["load_before"]))])
    return rows


def _at(meta: dict[str, Any]) -> str:
    """The commit measured, as the report's header names it ("?" for a window recorded before commits were)."""
    c = meta.get("commit") or {}
    head = str(c.get("head") or "?")[:10]
    changed = [*(c.get("uncommitted_product_files") or ()), *(c.get("uncommitted_bench_files") or ())]
    return f"{head} (uncommitted: {', '.join(changed)})" if changed else head


def report(meta: dict[str, Any], runs: dict[str, Any], failed: list[str]) -> tuple[dict[str, Any], list[str]]:
    values = figures(runs)
    lines = ["# Throughput on a whole manual: freshindex beside CocoIndex and a LangChain pipeline", "",
             f"`{meta['command']}` at {_at(meta)} on {meta['cores']} cores ({meta.get('cpu') or meta['machine']}), "
             f"Python {meta['python']}, "
             f"CocoIndex {meta.get('cocoindex') or '-'}; {meta['corpus']} manual, {meta['pages']} pages (old "
             f"release), {meta['pages_new']} (new).",
             f"The machine is shared with other engineers' tests: load average at the start "
             f"{meta['load_avg_start']}, at the end {meta['load_avg_end']} (1/5/15 min; before each run in the last "
             "column). Wall times move with the load; each pair compared (freshindex beside CocoIndex, with the same "
             "embedder) ran back to back.", ""]
    lines += table(["run", "full build s", "full embedded / chunks", "full CPU s", "update s", "update embedded",
                    "peak RSS MB", "process CPU s", "load before"], list("lrrrrrrrl"), _run_rows(runs))
    fm = runs.get("freshindex-model")
    if fm:
        lines += ["", f"Model floor of the update: {fm['floor']['chunks']} chunks with really changed text "
                  f"(freshindex's chunking), {fm['floor']['model_s']} s in the model."]
    peaks = [f"{name} {d['peak_rss_mb_sync']} MB" for name, d in runs.items() if "peak_rss_mb_sync" in d]
    if peaks:
        lines += ["", "freshindex's peak RSS up to the end of its update, before the bench's own analysis (read "
                  "inside the run): " + ", ".join(peaks) + "."]
    lines += ["", "Goals (this run):", ""]
    lines += table(["figure", "value", "goal", "result"], list("lrll"), goal_rows(values))
    if failed:
        lines += ["", "Runs that failed: " + "; ".join(failed)]
    lines += ["", "freshindex: Services + sync_inline (SQLite registry, Qdrant Edge); model = the bundled ONNX MiniLM "
              "int8, hashing = embedding.provider=hashing. cocoindex: bench.peers.cocoindex_side (BeautifulSoup "
              "text, CocoIndex's RecursiveSplitter at 1,000 bytes, memoised files and chunks, a batching custom "
              "function calling the same freshindex embedder, rows in PostgreSQL 15 with bytea vectors: no "
              "pgvector there). langchain: bench.peers.langchain_side, LangChain's own index() "
              "(BeautifulSoup text, RecursiveCharacterTextSplitter at 1,000 characters, InMemoryRecordManager and "
              "InMemoryVectorStore, cleanup='full', 100 documents a batch) with an Embeddings over the same "
              "freshindex embedder. naive: bench.realcorpus's LangChain stand-in, one text per model run. Peak memory of each run's process tree (PSS summed over the run, a pool's forkserver and workers, sampled every 0.25 s; at least the largest process's peak RSS from os.wait4); 'full CPU s' and the cores used "
              "are measured inside the run around the full build."]
    data = {"meta": meta, "load_avg_start": meta["load_avg_start"], "load_avg_end": meta["load_avg_end"],
            "runs": runs, "failed": failed, "figures": values, "goals": verdicts(values),
            "chunks_embedded": {name: {"full": d["full"]["embedded"], "update": d["update"]["embedded"]}
                                for name, d in runs.items() if "full" in d}}
    return data, lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=tuple(CORPORA), default="postgres",
                        help="postgres: PostgreSQL 15's manual, 1,167 pages (the default); django: Django 3.2's, 689")
    parser.add_argument("--pages", "--limit-pages", dest="pages", type=int, default=0,
                        help="pages of the manual present in both releases (0: every page of each)")
    parser.add_argument("--systems", default=DEFAULT_SYSTEMS,
                        help=f"comma-separated, of {', '.join(SYSTEMS)} (default: {DEFAULT_SYSTEMS})")
    parser.add_argument("--name", default="", help="results file name (default throughput, or throughput_hashing "
                        "without the model)")
    parser.add_argument("--embedders", default="model,hashing",
                        help="comma-separated, of model and hashing (default both): `--embedders hashing` is a "
                        "window of a few minutes, without the model's runs")
    parser.add_argument("--child", choices=("parse", "fresh"), help=argparse.SUPPRESS)
    parser.add_argument("--embedder", choices=("model", "hashing", "none"), help=argparse.SUPPRESS)
    for hidden in ("--old", "--new", "--work", "--out"):
        parser.add_argument(hidden, type=Path, help=argparse.SUPPRESS)
    return parser


def _cpu_model() -> str | None:
    """The CPU's model name (Linux), so windows on different machines are not compared as one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def main() -> None:
    from bench.transfer import _commit as transfer_commit  # the same record of the commit measured

    args = _parser().parse_args()
    if args.child:
        _child_main(args)
        return
    systems = {s.strip() for s in args.systems.split(",") if s.strip()}
    if unknown := systems - set(SYSTEMS):
        raise SystemExit(f"unknown systems: {', '.join(sorted(unknown))} (known: {', '.join(SYSTEMS)})")
    embedders = {e.strip() for e in args.embedders.split(",") if e.strip()}
    if not embedders or embedders - {"model", "hashing"}:
        raise SystemExit(f"--embedders: one or both of model, hashing (got {args.embedders!r})")
    # Without the model's runs, not over the committed full window unless asked
    name = args.name or ("throughput" if "model" in embedders else "throughput_hashing")
    old_tree, new_tree = CORPORA[args.corpus](args.pages)
    work = Path(tempfile.mkdtemp(prefix="fi-throughput-"))
    try:
        old, new = work / "old", work / "new"
        materialise(old_tree, old)
        materialise(new_tree, new)
        meta = {"command": ("python -m bench.throughput " + " ".join(sys.argv[1:])).strip(),
                "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "cores": os.cpu_count(),
                "python": platform.python_version(), "cocoindex": _version("cocoindex"), "corpus": args.corpus,
                "pages": len(old_tree), "pages_new": len(new_tree), "systems": sorted(systems),
                "load_avg_start": _load(), "uptime_start": _uptime(), "load_avg_end": None, "uptime_end": None,
                "cpu": _cpu_model(), "commit": transfer_commit()}

        def done(runs: dict[str, Any], failed: list[str]) -> None:
            meta["load_avg_end"], meta["uptime_end"] = _load(), _uptime()
            write(name, *report(meta, runs, failed))

        meta["embedders"] = sorted(embedders)
        measure(old, new, work, systems, done, embedders)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
