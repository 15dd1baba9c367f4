"""Throughput on a whole public manual: what freshindex costs beyond reading the pages, and with a model.

The corpus (``--corpus``) is Debian's ``postgresql-doc-15`` ``15.18-0+deb12u1``
(full build, 1,167 pages) then ``15.20-0+deb12u1`` (the release update, 1,169),
every HTML page of both (``bench.realcorpus.postgres_trees``), or
``python-django-doc`` ``3:3.2.25-0+deb12u3`` then ``deb12u7`` (689 pages,
``--corpus django``); ``--limit-pages`` keeps fewer, for a try.  Every side runs in its own child process, one after the other, so
each has a peak RSS of its own (``os.wait4``); all in one invocation, so the
machine's load is the same for all of them (the load averages are recorded).

* ``naive-parse``: the naive pipeline's parse and split alone
  (``bench.realcorpus.naive_text`` + ``split_recursive``: BeautifulSoup's
  ``get_text``, LangChain's recursive splitter), no model, no store: the
  least any pipeline that reads these pages pays.
* ``hashing``: freshindex's full build with ``embedding.provider=hashing``
  (no model): everything else it does (parse into blocks, chunk by type,
  registry, vector cache, store, lexical vectors, build, verify, the
  refusal calibration, swap), through ``bench.remote_embed.build``.
* ``naive`` and ``fresh``: ``bench.realcorpus``'s two sides with the bundled
  ONNX MiniLM (``--child naive`` / ``--child fresh``): full build, one no-op
  re-sync, then the update to the new release.
* ``remote-fresh`` and ``remote-naive``: both against one local
  OpenAI-compatible server (``bench.embed_server``, started by
  ``bench.remote_embed.start_server``) serving the same model.  freshindex
  uses ``embedding.provider=openai``; the naive side sends its chunks in
  requests of :data:`NAIVE_REMOTE_BATCH` texts to the same server, one
  request at a time, through its ``/embed`` route with ``truncate`` on (the
  OpenAI route refuses a text over the model's limit; the naive in-process
  side cuts those silently too).

Figures (goals in :data:`GOALS`):

* ``overhead_ratio``: hashing full build wall / naive parse+split wall;
* ``full_build_ratio``: fresh full build wall / naive full build wall;
* ``update_ratio``: fresh update wall / naive update wall;
* ``peak_rss_mb``: the ``fresh`` child's peak RSS (model, full build, update);
* ``remote_full_build_ratio``: remote-fresh wall / remote-naive wall.

    python -m bench.throughput [--corpus postgres|django] [--limit-pages 0] [--skip remote] [--name throughput]

Writes bench/results/<name>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.realcorpus import ROOT, django_trees, materialise, naive_text, postgres_trees, split_recursive
from bench.report import table, write

GOALS = {"overhead_ratio": 2.0, "full_build_ratio": 1.0, "update_ratio": 0.4, "peak_rss_mb": 600.0,
         "remote_full_build_ratio": 1.0}
#: The manuals: (old, new) page maps of two releases.
CORPORA: dict[str, Callable[[int], tuple[dict[str, Path], dict[str, Path]]]] = {
    "postgres": postgres_trees, "django": django_trees}
#: Texts per request of the naive side against the embedding server.
NAIVE_REMOTE_BATCH = 32
SIDES = ("naive-parse", "hashing", "naive", "fresh", "remote-fresh", "remote-naive")


# -- the sides (each runs in a child process) ------------------------------------------

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


def run_naive_remote(pages: Path, port: int, batch: int = NAIVE_REMOTE_BATCH) -> dict[str, Any]:
    """Parse, split and embed every chunk through the server, ``batch`` texts a request, one at a time."""
    import httpx

    started = time.perf_counter()
    chunks = naive_chunks(pages)
    vectors = 0
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
        for i in range(0, len(chunks), batch):
            resp = client.post("/embed", json={"inputs": chunks[i : i + batch], "truncate": True})
            resp.raise_for_status()
            vectors += len(resp.json())
    if vectors != len(chunks):
        raise RuntimeError(f"{vectors} vectors for {len(chunks)} chunks")
    return {"wall_s": round(time.perf_counter() - started, 3), "chunks": len(chunks), "requests":
            -(-len(chunks) // batch)}


def run_freshindex(pages: Path, work: Path, embedding: dict[str, Any]) -> dict[str, Any]:
    """One full sync and build from an empty data dir (``bench.remote_embed.build``)."""
    from bench.remote_embed import build

    out = build(str(embedding["provider"]), pages, work, embedding)
    out["wall_s"] = out.pop("seconds")
    return out


# -- the driver -------------------------------------------------------------------------

def _run_child(args: list[str], out: Path) -> dict[str, Any]:
    """Run ``python -m <args>`` as a child; its JSON result plus peak RSS and CPU time (``os.wait4``)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{' '.join(args[:3])}: exit code {code}")
    data = json.loads(out.read_text())
    data["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)  # Linux: KiB
    data["process_s"] = round(time.perf_counter() - started, 1)
    data["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 1)
    return data


def _own_child(kind: str, pages: Path, work: Path, port: int) -> Callable[[], dict[str, Any]]:
    out = work / f"{kind}.json"
    return lambda: _run_child(["bench.throughput", "--child", kind, "--pages", str(pages), "--work", str(work),
                               "--port", str(port), "--out", str(out)], out)


def _realcorpus_child(side: str, old: Path, new: Path, work: Path) -> Callable[[], dict[str, Any]]:
    out = work / f"{side}.json"
    return lambda: _run_child(["bench.realcorpus", "--child", side, "--variant", "fresh", "--old", str(old),
                               "--new", str(new), "--work", str(work / side), "--out", str(out),
                               "--noop-repeat", "1"], out)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def figures(sides: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """The goal figures from the sides that ran (None where a side is missing)."""
    def wall(side: str, phase: str | None = None) -> float | None:
        d = sides.get(side)
        if d is None:
            return None
        return d[phase]["wall_s"] if phase else d["wall_s"]

    fresh = sides.get("fresh")
    return {
        "overhead_ratio": _ratio(wall("hashing"), wall("naive-parse")),
        "full_build_ratio": _ratio(wall("fresh", "full"), wall("naive", "full")),
        "update_ratio": _ratio(wall("fresh", "update"), wall("naive", "update")),
        "peak_rss_mb": fresh["peak_rss_mb"] if fresh else None,
        "remote_full_build_ratio": _ratio(wall("remote-fresh"), wall("remote-naive")),
    }


def goal_rows(values: dict[str, float | None]) -> list[list[Any]]:
    return [[name, "-" if values.get(name) is None else values[name], f"<= {goal}",
             "not measured" if values.get(name) is None else ("met" if values[name] <= goal else "MISSED")]  # type: ignore[operator]
            for name, goal in GOALS.items()]


def measure(old: Path, new: Path, work: Path, skip: set[str], port: int,
            done: Callable[[dict[str, Any], list[str]], None] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Run every side not in ``skip``; a side that fails is reported and the others still run.

    ``done`` is called with the sides so far after each one, so a run cut short leaves its figures."""
    from bench.remote_embed import start_server

    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "naive-parse": _own_child("naive-parse", old, work, port),
        "hashing": _own_child("hashing", old, work, port),
        "naive": _realcorpus_child("naive", old, new, work),
        "fresh": _realcorpus_child("fresh", old, new, work),
        "remote-fresh": _own_child("remote-fresh", old, work, port),
        "remote-naive": _own_child("remote-naive", old, work, port),
    }
    sides: dict[str, Any] = {}
    failed: list[str] = []
    server = None
    try:
        for side in SIDES:
            if side in skip or (side.startswith("remote") and "remote" in skip):
                continue
            if side.startswith("remote") and server is None:
                server = start_server(port)
            load = os.getloadavg()
            try:
                sides[side] = runs[side]()
            except RuntimeError as exc:
                failed.append(f"{side}: {exc}")
                print(f"{side} failed: {exc}", file=sys.stderr)
                continue
            sides[side]["load_before"] = [round(x, 2) for x in load]
            print(f"{side}: {json.dumps(sides[side], default=str)[:300]}", file=sys.stderr, flush=True)
            if done is not None:
                done(sides, failed)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    return sides, failed


def _child_main(args: argparse.Namespace) -> None:
    from bench.remote_embed import remote_settings

    args.work.mkdir(parents=True, exist_ok=True)
    if args.child == "naive-parse":
        data = run_naive_parse(args.pages)
    elif args.child == "remote-naive":
        data = run_naive_remote(args.pages, args.port)
    elif args.child == "hashing":
        data = run_freshindex(args.pages, args.work, {"provider": "hashing"})
    else:
        data = run_freshindex(args.pages, args.work, remote_settings(args.port))
    args.out.write_text(json.dumps(data, default=str))


def _side_rows(sides: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for side, d in sides.items():
        if "full" in d:  # a bench.realcorpus side
            rows.append([side, d["full"]["wall_s"], d["full"].get("embedded", "-"), d["noop"]["wall_s"],
                         d["update"]["wall_s"], d["update"]["embedded"], d["peak_rss_mb"], d["cpu_s"],
                         " ".join(map(str, d["load_before"]))])
        else:
            rows.append([side, d["wall_s"], d.get("embedded") or d.get("chunks", "-"), "-", "-", "-",
                         d["peak_rss_mb"], d["cpu_s"], " ".join(map(str, d["load_before"]))])
    return rows


def report(meta: dict[str, Any], sides: dict[str, Any], failed: list[str]) -> tuple[dict[str, Any], list[str]]:
    values = figures(sides)
    lines = ["# Throughput on a whole manual: freshindex against a naive pipeline", "",
             f"`{meta['command']}` on {meta['cores']} cores ({meta['machine']}), Python {meta['python']}; "
             f"{meta.get('corpus', 'django')} manual, {meta['pages']} pages (old release), {meta['pages_new']} (new). Load before: {meta['load_before']}; "
             f"after: {meta['load_after']}.",
             "Each side in its own child process, one after the other. The machine is shared: wall times move with "
             "the load (the 1/5/15-minute load averages before each side are in the last column), CPU seconds "
             "less so.", ""]
    lines += table(["side", "full build s", "embedded / chunks", "no-op s", "update s", "update embedded",
                    "peak RSS MB", "CPU s", "load before"], list("lrrrrrrrl"), _side_rows(sides))
    lines += ["", "Goals (this run):", ""]
    lines += table(["figure", "value", "goal", ""], list("lrll"), goal_rows(values))
    if failed:
        lines += ["", "Sides that failed: " + "; ".join(failed)]
    lines += ["", "naive-parse: BeautifulSoup get_text + the recursive splitter, no model. hashing: freshindex's full "
              "build with embedding.provider=hashing (no model). naive / fresh: the bundled ONNX MiniLM in process "
              "(bench.realcorpus's sides; full, one no-op, the u3 -> u7 update). remote-*: one local "
              f"OpenAI-compatible server (bench.embed_server) for both; the naive side sends {NAIVE_REMOTE_BATCH} "
              "texts a request to its /embed route with truncate on."]
    return {"meta": meta, "sides": sides, "failed": failed, "figures": values, "goals": GOALS}, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=tuple(CORPORA), default="postgres",
                        help="postgres: PostgreSQL 15's manual, 1,167 pages (the default); django: Django 3.2's, 689")
    parser.add_argument("--limit-pages", type=int, default=0, help="pages of the manual (0: all of them)")
    parser.add_argument("--skip", action="append", default=[], choices=(*SIDES, "remote"),
                        help="leave a side out (repeatable; remote: both remote sides)")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--name", default="throughput", help="results file name")
    parser.add_argument("--child", choices=("naive-parse", "hashing", "remote-fresh", "remote-naive"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--pages", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child_main(args)
        return
    old_tree, new_tree = CORPORA[args.corpus](args.limit_pages)
    work = Path(tempfile.mkdtemp(prefix="fi-throughput-"))
    try:
        old, new = work / "old", work / "new"
        materialise(old_tree, old)
        materialise(new_tree, new)
        meta = {"command": ("python -m bench.throughput " + " ".join(sys.argv[1:])).strip(),
                "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "cores": os.cpu_count(),
                "python": platform.python_version(), "corpus": args.corpus, "pages": len(old_tree),
                "pages_new": len(new_tree),
                "load_before": _load(), "load_after": None}

        def done(sides: dict[str, Any], failed: list[str]) -> None:
            meta["load_after"] = _load()
            write(args.name, *report(meta, sides, failed))

        measure(old, new, work, set(args.skip), args.port, done)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
