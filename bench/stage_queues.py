"""One distributed sync with stage queues off, then on: wall time of each.

Both configurations run three ``freshindex worker`` pool processes on a
private database (the local PostgreSQL) and the local Redis, queues of their
own: *off* is one worker consuming every queue with three processes, *on*
is a sync+parse+build worker, an ocr worker and an embed worker, one process
each (``broker.stage_queues=true``).  The corpus is the bundled sample
(``examples/kb``: eight documents, one scanned PDF) plus ``--docs``
generated Markdown documents (:mod:`bench.corpus`) and ``--scans`` scanned
one-page PDFs; embedded by the bundled ONNX MiniLM (``--hashing``: the
hashing stand-in).  Measured: seconds from enqueueing the sync to the run
built (``sync_distributed``), one run each; workers are started and warmed
(a sync of one document) first, so start-up is not counted.

    python -m bench.stage_queues [--docs 40] [--scans 4] [--hashing]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench.corpus import write_corpus
from examples.fixtures.scans import scanned_pdf
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.app import create_app
from freshindex.workers.runner import sync_distributed
from tests.conftest import EXAMPLES, REDIS_URL, _create_pg_database, _drop_pg_database, distributed_env, worker_process

POOLS = {
    "off": {"all": ("sync,parse,ocr,embed,build", "3")},
    "on": {"parse": ("sync,parse,build", "1"), "ocr": ("ocr", "1"), "embed": ("embed", "1")},
}


def _corpus(root: Path, docs: int, scans: int) -> Path:
    shutil.copytree(EXAMPLES / "kb", root)
    if docs:
        write_corpus(root / "generated", docs)
    for i in range(scans):
        lines = [(f"Scanned record {i}", 18)] + [(f"Line {j} of record {i}: the approved amount is {100 * i + j} USD.",
                                                  12) for j in range(8)]
        (root / "scans").mkdir(exist_ok=True)
        (root / "scans" / f"record-{i}.pdf").write_bytes(scanned_pdf(lines))
    return root


def measure(mode: str, work: Path, corpus: Path, hashing: bool) -> dict[str, object]:
    name, url = _create_pg_database()
    extra = {"FRESHINDEX_BROKER__STAGE_QUEUES": "true" if mode == "on" else "false"}
    if hashing:
        extra["FRESHINDEX_EMBEDDING__PROVIDER"] = "hashing"
    env = distributed_env(work, url, REDIS_URL + "/0", f"bench-{mode}", **extra)
    warm = work / "warm"
    warm.mkdir()
    (warm / "a.md").write_text("# Warm\n\nOne document to start every worker's services.\n")
    (warm / "b.pdf").write_bytes(scanned_pdf())
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        settings = load_settings()
        svc, app = Services(settings), create_app(settings)
        with ExitStack() as stack:
            for pool, (queues, procs) in POOLS[mode].items():
                stack.enter_context(worker_process(env, work / f"{pool}.log", pool, "--queues", queues, "-c", procs))
            svc.registry.add_source("warm", kind="folder", location=str(warm), owner="b", kb="warm")
            sync_distributed(svc, app, "warm", timeout=600)
            svc.registry.add_source("docs", kind="folder", location=str(corpus), owner="b", kb="default")
            start = time.perf_counter()
            report = sync_distributed(svc, app, "docs", timeout=1800)
            seconds = time.perf_counter() - start
        svc.close()
        app.close()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        _drop_pg_database(name)
    summary = report.run.summary
    return {"mode": mode, "seconds": round(seconds, 2), "status": report.run.status, "build": report.build_status,
            "documents": summary.get("documents"), "chunks_embedded": summary.get("chunks_embedded")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=40)
    parser.add_argument("--scans", type=int, default=4)
    parser.add_argument("--hashing", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = _corpus(Path(tmp) / "corpus", args.docs, args.scans)
        results = []
        for mode in ("off", "on"):
            (Path(tmp) / mode).mkdir()
            results.append(measure(mode, Path(tmp) / mode, corpus, args.hashing))
            print(results[-1], flush=True)
    off, on = results
    print(f"on/off wall time: {on['seconds'] / off['seconds']:.2f}")  # type: ignore[operator]


if __name__ == "__main__":
    main()
