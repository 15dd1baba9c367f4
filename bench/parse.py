"""Parse benchmark: parse-and-chunk throughput per document type, OCR cost,
and the re-embed counts of the manual's edit scenarios.

* throughput: each corpus is parsed and chunked in this process (no
  registry, no model), median of ``--repeat`` runs; a "page" is a PDF page,
  an HTML or Markdown file, a source file, or 1,000 CSV rows;
* OCR: generated scanned pages through tesseract at the configured DPI,
  seconds per page and the page confidence;
* edit scenarios: the generated 200-page manual (HTML site and PDF) synced
  through the real pipeline, then one changed paragraph, then a new
  version banner and dates on every page, then a section inserted at the
  top; the chunks each sync embedded.  These syncs use the hashing
  embedder: which chunks are embedded depends on chunk hashes, not on the
  model.

Writes bench/results/parse.json and bench/results/parse.md.

    python -m bench.parse [--repeat 3] [--chapters 200]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.corpus import write_corpus
from bench.report import table, write
from examples.fixtures import manual as m
from examples.fixtures.scans import RECEIPT, scanned_pdf
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.chunking import Chunker
from freshindex.workers.parsing import Parsers
from freshindex.workers.runner import sync_inline

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("freshindex", "workers", "snapshots", "acl", "schedules")  # every part is under one of these


def _throughput(name: str, files: list[tuple[str, bytes]], pages: float, unit: str, repeat: int) -> dict:
    parsers, chunker = Parsers(), Chunker()
    runs, chunks = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        chunks = 0
        for key, data in files:
            chunks += len(chunker.chunk(key, parsers.parse(data, key)))
        runs.append(time.perf_counter() - t0)
    seconds = statistics.median(runs)
    return {
        "corpus": name, "documents": len(files), "pages": round(pages, 1), "page_unit": unit,
        "mb": round(sum(len(d) for _, d in files) / 1e6, 2), "chunks": chunks, "seconds": round(seconds, 3),
        "pages_per_s": round(pages / seconds, 1), "chunks_per_s": round(chunks / seconds, 1),
    }


def _read(folder: Path, pattern: str) -> list[tuple[str, bytes]]:
    return [(p.relative_to(folder).as_posix(), p.read_bytes()) for p in sorted(folder.rglob(pattern)) if p.is_file()]


def throughput(work: Path, chapters: int, repeat: int) -> list[dict]:
    book = m.manual(chapters)
    m.write_html_site(work / "html", book)
    pdf_pages = m.write_pdf(work / "manual.pdf", book)
    write_corpus(work / "md", 200)
    rows = ["region,city,storage price (USD per GB-month),egress price (USD per GB),p99 read latency (ms)"]
    rows += [f"r-{i},city {i % 97},0.0{i % 9 + 1},0.{i % 13 + 1},{20 + i % 50}" for i in range(20_000)]
    (work / "regions.csv").write_text("\n".join(rows) + "\n")
    code = [(f"{part}/{p.relative_to(ROOT / part).as_posix()}", p.read_bytes())
            for part in PARTS for p in sorted((ROOT / part).rglob("*.py")) if "migrations" not in p.parts]
    code += _read(ROOT / "examples", "*.[jt]s") + _read(ROOT / "examples", "*.go")
    html = _read(work / "html", "*.html")
    md = _read(work / "md", "*.md")
    return [
        _throughput(f"HTML site ({len(html)} pages, generated manual)", html, len(html), "file", repeat),
        _throughput(f"text PDF ({pdf_pages} pages, same manual)", [("manual.pdf", (work / "manual.pdf").read_bytes())],
                    pdf_pages, "page", repeat),
        _throughput(f"Markdown ({len(md)} runbooks)", md, len(md), "file", repeat),
        _throughput("CSV (20,000 rows)", [("regions.csv", (work / "regions.csv").read_bytes())], 20, "1,000 rows",
                    repeat),
        _throughput(f"code ({len(code)} Python, JS, TS, Go files)", code, len(code), "file", repeat),
    ]


def ocr(pages: int = 3) -> dict:
    parsers, chunker = Parsers(), Chunker()
    seconds, confidences = [], []
    for n in range(pages):
        data = scanned_pdf(RECEIPT, degrade="1,250" if n == 0 else None, block=3, noise=40, seed=n)
        t0 = time.perf_counter()
        doc = parsers.parse(data, f"scan-{n}.pdf")
        chunker.chunk(f"scan-{n}", doc)
        seconds.append(time.perf_counter() - t0)
        confidences.append(doc.meta["ocr_confidence"][1])
    return {"pages": pages, "dpi": parsers.pdf.ocr_dpi, "seconds_per_page": round(statistics.median(seconds), 3),
            "confidence_median": round(statistics.median(confidences), 3)}


def scenarios(work: Path, chapters: int) -> list[dict]:
    out = []
    def html(root: Path, book: list, version: str, date: str) -> None:
        m.write_html_site(root / "manual", book, version=version, date=date)

    def pdf(root: Path, book: list, version: str, date: str) -> None:
        m.write_pdf(root / "manual.pdf", book, version=version, date=date)

    writers: dict[str, Callable[[Path, list, str, str], None]] = {"HTML site": html, "PDF": pdf}
    for name, write_fixture in writers.items():
        src = work / f"scenario-{name.split()[0].lower()}"
        src.mkdir()
        svc = Services(load_settings(data_dir=src / ".data", embedding={"provider": "hashing"}))
        try:
            book = m.manual(chapters)
            edited = m.edit_one_paragraph(book)
            steps = [
                ("full build", book, m.VERSION, m.DATE),
                ("one paragraph changed", edited, m.VERSION, m.DATE),
                ("version banner and dates on every page", edited, m.NEXT_VERSION, m.NEXT_DATE),
                ("section inserted at the top", m.insert_section_at_top(edited), m.NEXT_VERSION, m.NEXT_DATE),
            ]
            data = src / "docs"
            data.mkdir()
            svc.registry.add_source("manual", kind="folder", location=str(data), owner="bench", kb="bench")
            for step, chapters_now, version, date in steps:
                write_fixture(data, chapters_now, version, date)
                t0 = time.perf_counter()
                report = sync_inline(svc, "manual")
                s = report.run.summary
                out.append({"format": name, "step": step, "documents_changed": s.get("documents_changed", 0),
                            "chunks_embedded": s.get("chunks_embedded", 0), "chunks_kept": s.get("chunks_kept", 0),
                            "tombstones": s.get("tombstones", 0), "sync_s": round(time.perf_counter() - t0, 2)})
        finally:
            svc.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per corpus (median reported)")
    parser.add_argument("--chapters", type=int, default=200, help="chapters (HTML pages) of the generated manual")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fi-parse-bench-"))
    try:
        rows = throughput(work / "corpus", args.chapters, args.repeat)
        ocr_row = ocr()
        edits = scenarios(work, args.chapters)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "python": platform.python_version(),
            "cores": os.cpu_count(), "chunk_tokens": Chunker().max_tokens, "repeat": args.repeat,
            "chapters": args.chapters}
    lines = ["# Parse benchmark", "",
             f"`python -m bench.parse --chapters {args.chapters} --repeat {args.repeat}` on {meta['cores']} cores, "
             f"one process, chunk budget {meta['chunk_tokens']} tokens. Parse and chunk only (no registry, no model); "
             "median of the runs.", ""]
    lines += table(
        ["corpus", "documents", "pages", "page =", "MB", "chunks", "seconds", "pages/s", "chunks/s"],
        list("lrrlrrrrr"),
        [[r["corpus"], r["documents"], r["pages"], r["page_unit"], r["mb"], r["chunks"], r["seconds"],
          r["pages_per_s"], r["chunks_per_s"]] for r in rows],
    )
    lines += ["", f"OCR (tesseract, {ocr_row['dpi']} DPI, one thread): **{ocr_row['seconds_per_page']} s per page** "
              f"(median of {ocr_row['pages']} generated scans of five lines each, median page confidence "
              f"{ocr_row['confidence_median']}; a dense page of text takes 3-4 s).",
              "", "## Edit scenarios (generated manual, real pipeline, hashing embedder)", ""]
    lines += table(
        ["format", "step", "documents changed", "chunks embedded", "chunks kept", "tombstones", "sync s"],
        list("llrrrrr"),
        [[e["format"], e["step"], e["documents_changed"], e["chunks_embedded"], e["chunks_kept"], e["tombstones"],
          e["sync_s"]] for e in edits],
    )
    write("parse", {"meta": meta, "throughput": rows, "ocr": ocr_row, "edit_scenarios": edits}, lines)

if __name__ == "__main__":
    main()
