"""What task fencing costs: one sync of a generated corpus with and without the checks.

Every staging write checks, inside its transaction, that its run is still
running and its changeset still open (and takes the row lock that makes the
check hold).  This benchmark syncs the same corpus into fresh data dirs with
the checks as shipped and with them switched off (a patched registry), in
alternating order, and reports the median wall time of each and their ratio.

The embedder is the deterministic ``hashing`` stand-in, so the registry's
share of the time, and with it the fencing's, is as large as it can be; with
the real model the ratio is closer still to 1.

    python -m bench.fencing [--docs 2000] [--repeat 3] [--registry URL]

Writes bench/results/fencing.json and bench/results/fencing.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.corpus import write_corpus
from bench.report import table, write
from freshindex.registry.store import Registry
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline


@contextmanager
def fencing_disabled():
    """Skip the run/changeset checks (the write lock on SQLite stays: it is not fencing's)."""
    fence, refusal = Registry._fence, Registry.run_refusal

    def no_fence(self: Registry, s: Any, run_id: int, changeset_id: int | None = None) -> Any:
        from freshindex.registry.schema import SyncRun

        self._write_lock(s)
        return s.get(SyncRun, run_id)

    Registry._fence = no_fence  # type: ignore[method-assign]
    Registry.run_refusal = lambda self, run_id, changeset_id=None: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Registry._fence, Registry.run_refusal = fence, refusal  # type: ignore[method-assign]


def one_sync(corpus: Path, registry_url: str | None) -> tuple[float, int]:
    work = Path(tempfile.mkdtemp(prefix="fi-bench-fence-"))
    try:
        overrides: dict[str, Any] = {"data_dir": work / "data", "embedding": {"provider": "hashing"}}
        if registry_url:
            overrides["registry"] = {"url": registry_url}
        svc = Services(load_settings(**overrides))
        source = f"bench-{os.getpid()}-{time.monotonic_ns()}"
        svc.registry.add_source(source, kind="folder", location=str(corpus), owner="bench", kb=f"kb{time.monotonic_ns() % 10**9}")
        t0 = time.perf_counter()
        report = sync_inline(svc, source)
        seconds = time.perf_counter() - t0
        assert report.run.status == "succeeded", report.as_dict()
        chunks = report.run.summary["chunks_embedded"]
        svc.close()
        return seconds, chunks
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--registry", default=None, help="SQLAlchemy URL (default: SQLite in each data dir)")
    args = ap.parse_args()
    corpus = Path(tempfile.mkdtemp(prefix="fi-bench-corpus-"))
    try:
        write_corpus(corpus, args.docs)
        with_fence: list[float] = []
        without: list[float] = []
        chunks = 0
        for i in range(args.repeat):
            # Alternate the order so drift in the machine's load hits both alike.
            for fenced in ((True, False) if i % 2 == 0 else (False, True)):
                if fenced:
                    s, chunks = one_sync(corpus, args.registry)
                    with_fence.append(s)
                else:
                    with fencing_disabled():
                        s, chunks = one_sync(corpus, args.registry)
                    without.append(s)
                print(f"run {i + 1} fencing={'on' if fenced else 'off'}: {s:.2f} s", flush=True)
    finally:
        shutil.rmtree(corpus, ignore_errors=True)
    on, off = statistics.median(with_fence), statistics.median(without)
    data = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "documents": args.docs,
        "chunks": chunks,
        "registry": "postgresql" if args.registry else "sqlite",
        "repeat": args.repeat,
        "fenced_s": with_fence,
        "unfenced_s": without,
        "fenced_median_s": round(on, 3),
        "unfenced_median_s": round(off, 3),
        "ratio": round(on / off, 3),
    }
    md = [
        "# Fencing cost",
        "",
        f"`python -m bench.fencing --docs {args.docs} --repeat {args.repeat}`"
        f"{' --registry ...' if args.registry else ''}: one inline sync of a generated corpus "
        f"({args.docs} documents, {chunks} chunks, hashing embedder, {data['registry']} registry), "
        "with the staging checks as shipped and switched off, medians.",
        "",
        *table(["fencing", "median s", "runs"], ["l", "r", "l"],
               [["on", f"{on:.2f}", ", ".join(f"{x:.2f}" for x in with_fence)],
                ["off", f"{off:.2f}", ", ".join(f"{x:.2f}" for x in without)]]),
        "",
        f"Ratio on/off: **{on / off:.3f}**. Machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at the end.",
    ]
    write("fencing", data, md)


if __name__ == "__main__":
    main()
