"""Transfer benchmark: retrieval and refusal on whole corpora, the refusal fitted leave-one-corpus-out.

Corpora (each indexed WHOLE, no page limit), with their golden sets under ``bench/goldens/<name>/``:

``django``
    Debian ``python-django-doc`` 3:3.2.25-0+deb12u7 (``bench.corpora.django``).  Its ``update_only``
    questions need the u3 -> u7 update and are left out here (``bench.evidence`` asks them).
``python311``
    Debian ``python3.11-doc`` 3.11.2-6+deb12u9 (``bench.corpora.python311``).
``rmanuals``
    Debian ``r-doc-pdf`` 4.2.2.20221110-2, seven manuals, 25 pages turned into scans that need OCR
    (``bench.corpora.rmanuals``); a page id is ``<file>.pdf#page=N`` and an evidence item is on it when
    its file matches and its cited page range contains N.
``structlog_repo``, ``markdown_repo`` (update corpora, golden sets written blind)
    A release history committed into a local git repository (``bench.corpora.release_repo``), indexed as a
    ``--kind git`` source (ref ``main``) at its OLD release, then the remaining releases committed and the
    source synced again: the questions are asked after that update (``freshness`` questions are answerable
    only then).  A page id is a path in the repository.
``cmake_docs`` (an update corpus, golden set written blind)
    The CMake HTML reference, Debian ``cmake-doc`` 3.18.4 indexed as a folder, then 3.25.1 written over it
    and synced again.

Who wrote each golden set is reported (``questions_by``: ``bench/goldens/<name>/WRITERS.md``'s first paragraph).
After an update, ``stale_served`` counts the top-5 items whose document the update deleted or moved, or whose
text holds a run of words the update removed from that document (``StaleCheck``).

Each corpus is materialised into ``$CACHE/transfer/corpus-<name>`` and its golden set verified against
it there (a question that no longer verifies is dropped from scoring, with the reason printed).  It is
indexed through the real pipeline with the DEFAULT settings (``Services`` + ``sync_inline``: ONNX
MiniLM, SQLite + Qdrant Edge) into ``$CACHE/transfer/<name>-<key>``, where ``key`` hashes the parser set,
chunker and lexical versions, the embedder id and the indexing settings: a re-run after a ranking or
refusal change re-queries the kept index, a chunker change re-indexes.  ``$CACHE`` is
``$FRESHINDEX_BENCH_CACHE`` or ``~/.cache/freshindex-bench``.

Every question is asked through ``InjectionClient.retrieve`` twice over: with the default settings
(refusal on) and with ``context.refusal = false`` (the retrieval alone), each at limit 5 (hit@5,
passage@5) and limit 10 (MRR@10; whether the 5 are the 10's prefix is recorded).  The refusal signals
are the ones the client computes, heard by a query observer beside the service's.  A question the client refuses
has no evidence: with refusal on it counts as a miss.

* hit@5: an item of the top 5 is on the question's page;
* passage@5: the golden passage is inside the text of a top-5 item ON the question's page, compared
  with whitespace and ``|`` removed (``bench.evidence.norm``: the chunker lays tables out as Markdown
  and the code highlighter splits tokens, so whitespace cannot be relied on); on an item read by OCR,
  90 % of the passage's characters aligned in order (``holds``: OCR misreads glyphs the passage, copied
  from the text layer, has), the exact figure beside it;
* MRR@10: 1 / the rank of the first item on the page in the limit-10 packet (0 if none);
* distractor above canonical: in the limit-10 ranking an item of a distractor page comes before the
  first item of the canonical page (or the canonical page is absent and a distractor page is there).

Leave-one-corpus-out (``bench.heldout``): the refusal's fitted defaults, its weights and the calibration's
target false-refusal rate, are fitted on the other corpora from their recorded signals; the held-out
corpus's own bias is calibrated from the pseudo-questions its build's calibration asks (recorded by
``pseudo_questions``: the same sample and questions), under those weights and that target; its questions
are decided with them and its figures (the retrieval of refusal off, a refused question a miss) are the
report's headline: "held-out".  The client as shipped is reported beside them (``shipped_defaults_client``):
its defaults are the same fit over every corpus, so those figures are not held-out.

The corpora a run does not ask are kept in the report as an earlier run reported them (``merge_earlier``,
marked ``earlier_run``), never recomputed; the leave-one-corpus-out fit is among the corpora whose answers the
run holds (``meta.fit_pool``).  It does not tune anything: the settings are the defaults.

    python -m bench.transfer [--corpora django,python311,rmanuals,structlog_repo,markdown_repo,cmake_docs]
                             [--from-rows] [--reindex] [--index-only]

Writes bench/results/transfer.json and .md; the raw answers (evidence texts included) are kept in
each index's directory as ``rows.json`` (``--from-rows`` rebuilds the report from them, from the newest
kept answers when a setting changed the index key since).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from bench.heldout import FALSE_GOAL
from bench.report import table, write
from freshindex.evaluation import OCR_PASSAGE_MATCH, on_expected, rank_of, score_items
from freshindex.registry.records import SourceSetup

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("FRESHINDEX_BENCH_CACHE", Path.home() / ".cache" / "freshindex-bench")) / "transfer"
NAMES = ("django", "python311", "rmanuals", "structlog_repo", "markdown_repo", "cmake_docs")
LIMITS = (5, 10)
#: (comparison, goal) of the figures with refusal on; the retrieval figures are held to the same goals with it off.
GOALS: dict[str, tuple[str, float]] = {
    "hit_at_5": (">=", 0.90), "passage_at_5": (">=", 0.80), "mrr_at_10": (">=", 0.80),
    "code_hit_at_5": (">=", 0.85), "unanswerable_refused": (">=", 0.80), "false_refusals": ("<=", 0.03),
    "stale_served": ("<=", 0), "distractor_above_canonical": ("<=", 0),
}
RETRIEVAL = ("hit_at_5", "passage_at_5", "mrr_at_10", "code_hit_at_5", "stale_served", "distractor_above_canonical")
REFUSAL_PARAMS = ("bias", "coverage_weight", "lexical_weight", "dense_weight")


# -- corpora ------------------------------------------------------------------

@dataclass(frozen=True)
class Corpus:
    name: str
    module: ModuleType  # materialise(cache, dest, ...), verify(dest, questions), load_questions(), DEFAULT_CACHE
    release: str
    skip_kinds: tuple[str, ...] = ()
    pdf: bool = False  # page ids are "<file>.pdf#page=N"
    #: An update corpus (``Update``): indexed at its old release, updated to the new one, synced again, then asked.
    update: Update | None = None

    @property
    def folder(self) -> Path:
        return CACHE / f"corpus-{self.name}"

    def count_pages(self) -> int:
        if self.pdf:
            import pymupdf

            return sum(len(pymupdf.open(p)) for p in sorted(self.folder.glob("*.pdf")))
        if hasattr(self.module, "count_pages"):
            return int(self.module.count_pages(self.folder))
        return sum(1 for _ in self.folder.rglob("*.html"))


@dataclass(frozen=True)
class Update:
    """How an update corpus moves from its old release to its new one, and where each release's files are read.

    ``old(folder)`` writes the old release into the source's folder (a git repository at the old commit, or the
    manual's old pages), ``new(folder)`` moves it to the new release (commits the rest, or writes the new pages over
    the old); ``roots(folder)`` gives the two releases as plain folders (what ``StaleCheck`` reads).
    """

    kind: str  # the source kind: "git" or "folder"
    options: dict[str, Any]
    old: Callable[[Path], Any]
    new: Callable[[Path], Any]
    roots: Callable[[Path], tuple[Path, Path]]
    old_release: str
    new_release: str


def _repo_update(module: ModuleType) -> Update:
    """A release history committed into git (``bench.corpora.release_repo``), indexed as a ``git`` source."""
    from bench.corpora import release_repo

    def old(folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        module.materialise(module.DEFAULT_CACHE, folder, upto=module.OLD_VERSION)

    def roots(folder: Path) -> tuple[Path, Path]:
        out = CACHE / f"{module.NAME}-releases"
        return (release_repo.export(folder, module.OLD_VERSION, out / "old"),
                release_repo.export(folder, module.NEW_VERSION, out / "new"))

    return Update(module.SOURCE_KIND, dict(module.SOURCE_OPTIONS), old,
                  lambda folder: module.materialise(module.DEFAULT_CACHE, folder), roots,
                  f"{module.PACKAGE} {module.OLD_VERSION} ({module.OLD_COMMIT[:10]})",
                  f"{module.PACKAGE} {module.NEW_VERSION} ({module.NEW_COMMIT[:10]})")


def _manual_update(module: ModuleType) -> Update:
    """A manual whose new release's pages are written over the old one's (``bench.corpora.cmake_docs``)."""
    def old(folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        module.materialise(module.DEFAULT_CACHE, folder, module.OLD_VERSION)

    return Update("folder", {}, old, lambda folder: module.materialise(module.DEFAULT_CACHE, folder, module.VERSION),
                  lambda folder: (module.old_folder(module.DEFAULT_CACHE), folder),
                  f"{module.PACKAGE} {module.OLD_VERSION}", f"{module.PACKAGE} {module.VERSION}")


def corpora() -> dict[str, Corpus]:
    from bench.corpora import cmake_docs, django, markdown_repo, python311, rmanuals, structlog_repo

    return {
        "django": Corpus("django", django, f"{django.PACKAGE} {django.VERSION}", skip_kinds=("update_only",)),
        "python311": Corpus("python311", python311, f"{python311.PACKAGE} {python311.VERSION}"),
        "rmanuals": Corpus("rmanuals", rmanuals, f"{rmanuals.PACKAGE} {rmanuals.VERSION}", pdf=True),
        "structlog_repo": Corpus("structlog_repo", structlog_repo, structlog_repo.VERSION,
                                 update=_repo_update(structlog_repo)),
        "markdown_repo": Corpus("markdown_repo", markdown_repo, markdown_repo.VERSION,
                                update=_repo_update(markdown_repo)),
        "cmake_docs": Corpus("cmake_docs", cmake_docs,
                             f"{cmake_docs.PACKAGE} {cmake_docs.OLD_VERSION} -> {cmake_docs.VERSION}",
                             update=_manual_update(cmake_docs)),
    }


def materialise(corpus: Corpus) -> float:
    """The corpus folder, made once (a marker beside it says it is complete); seconds spent.

    An update corpus is materialised by :func:`open_index` instead (its old release, indexed, then the update)."""
    marker = corpus.folder.with_name(corpus.folder.name + ".done")
    if corpus.update is not None or (marker.is_file() and marker.read_text() == corpus.release):
        return 0.0
    t0 = time.perf_counter()
    print(f"[{corpus.name}] materialising {corpus.release} into {corpus.folder}", flush=True)
    corpus.module.materialise(corpus.module.DEFAULT_CACHE, corpus.folder)
    marker.write_text(corpus.release)  # beside the folder, not in it: the folder source would index it
    return time.perf_counter() - t0


def load_questions(corpus: Corpus) -> list[dict[str, Any]]:
    """The corpus's golden set: ``bench/goldens/<name>/questions.jsonl`` (nothing outside the project is read)."""
    return list(corpus.module.load_questions())


def verified_questions(corpus: Corpus) -> tuple[list[dict[str, Any]], dict[str, str], list[str]]:
    """(questions scored, {dropped id: reason}, problems naming no question), the skipped kinds left out."""
    questions = load_questions(corpus)
    problems = corpus.module.verify(corpus.folder, questions)
    ids = {q["id"] for q in questions}
    dropped: dict[str, str] = {}
    general: list[str] = []
    for p in problems:
        qid, sep, why = p.partition(": ")
        if sep and qid in ids:
            dropped[qid] = "; ".join(filter(None, [dropped.get(qid), why]))
        else:
            general.append(p)
    for qid, why in dropped.items():
        print(f"[{corpus.name}] {qid} dropped from scoring: {why}", flush=True)
    for p in general:
        print(f"[{corpus.name}] golden set problem (no question dropped): {p}", flush=True)
    kept = [q for q in questions if q["id"] not in dropped and q["kind"] not in corpus.skip_kinds]
    return kept, dropped, general


# -- the index ----------------------------------------------------------------

def index_parts(settings: Any, model_id: str, corpus: Corpus) -> dict[str, Any]:
    """What a kept index depends on: a change in any of these re-indexes."""
    from freshindex.vectorstore.lexical import LEXICAL_VERSION
    from freshindex.workers.chunking import CHUNKER_VERSION
    from freshindex.workers.parsing.registry import specs

    return {"parsers": {s.name: s.version for s in specs()}, "chunker": CHUNKER_VERSION, "lexical": LEXICAL_VERSION,
            "embedder": model_id, "corpus": corpus.release,
            "sources_settings": settings.sources.model_dump(mode="json", exclude={"s3"}),
            "embedding_settings": settings.embedding.model_dump(mode="json", exclude={"batch_size", "threads"})}


def index_key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def _progress(name: str) -> Callable[[int, int, str], None]:
    t0, last = time.perf_counter(), [0.0]

    def show(done: int, total: int, key: str) -> None:
        now = time.perf_counter() - t0
        if done == total or now - last[0] >= 20:
            last[0] = now
            rate = done / now if now else 0.0
            left = (total - done) / rate if rate else float("nan")
            print(f"[{name}] indexed {done}/{total} documents, {now:.0f} s, ~{left:.0f} s left ({key})", flush=True)

    return show


def open_index(corpus: Corpus, embedder: Any, settings_for: Callable[[Path], Any], reindex: bool) -> tuple[Any, dict]:
    """Services over the corpus's kept index, built (a full sync) when absent or stale; and its record."""
    from freshindex.services import Services
    from freshindex.workers.runner import sync_inline

    parts = index_parts(settings_for(CACHE), embedder.model_id, corpus)
    work = CACHE / f"{corpus.name}-{index_key(parts)}"
    record_file = work / "index.json"
    stale_update = corpus.update is not None and record_file.is_file() and \
        json.loads(record_file.read_text()).get("updated_to") != corpus.update.new_release
    if reindex or not record_file.is_file() or stale_update:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        svc = Services(settings_for(work / "data"), embedder=embedder)
        record = {"parts": parts, **_build(corpus, svc, work), "load_avg_after": _load(), "date": _now()}
        record_file.write_text(json.dumps(record, indent=1, default=str))
        record["reused"] = False
    else:
        svc = Services(settings_for(work / "data"), embedder=embedder)
        record = {**json.loads(record_file.read_text()), "reused": True}
        print(f"[{corpus.name}] reusing the index in {work} (built in {record['index_seconds']} s)", flush=True)
        if corpus.update is not None:
            corpus.update.new(corpus.folder)  # already there: the same commits, the same pages
        # An incremental sync first: a no-op when nothing changed, and it retries the documents an older
        # pipeline failed on (a parser fix reaches the kept index without re-embedding the rest).
        t0 = time.perf_counter()
        rep = sync_inline(svc, corpus.name, progress=_progress(corpus.name))
        record["resync_seconds"] = round(time.perf_counter() - t0, 1)
        record["resync_summary"] = rep.run.summary
        # The documents in error NOW (document_errors lists every failed result of every run).
        from freshindex.registry.reports import documents

        record["document_errors"] = [{"key": d["key"], "reason": d.get("error_reason"),
                                      "detail": str(d.get("error_detail") or "")[:300]}
                                     for d in documents(svc.registry, source=corpus.name, state="error",
                                                        limit=100_000)]
        recalibrated = recalibrate_if_stale(svc, corpus.name)
        if recalibrated is not None:
            print(f"[{corpus.name}] calibration fitted for other refusal weights: recalibrated, bias "
                  f"{recalibrated.get('bias')}", flush=True)
        record_file.write_text(json.dumps({k: v for k, v in record.items() if k not in ("reused", "dir")},
                                          indent=1, default=str))
        print(f"[{corpus.name}] re-synced in {record['resync_seconds']} s: {rep.run.summary}", flush=True)
    record["dir"] = str(work)
    return svc, record


def _sync(svc: Any, corpus: Corpus, step: str) -> tuple[Any, float]:
    """One sync of the corpus's source; a sync the deletion guard holds is reported, confirmed and synced again."""
    from freshindex.workers.runner import sync_inline

    t0 = time.perf_counter()
    rep = sync_inline(svc, corpus.name, progress=_progress(f"{corpus.name} {step}"))
    if str(rep.run.status).endswith("held"):
        held = rep.run.summary.get("held") or {}
        print(f"[{corpus.name}] {step}: the deletion guard held the sync ({rep.run.held_reason}); confirming "
              f"{held.get('deletions')} deletions as an operator would", flush=True)
        svc.registry.confirm_deletions(corpus.name, int(held.get("deletions") or 1), actor="bench")
        rep = sync_inline(svc, corpus.name, progress=_progress(f"{corpus.name} {step}"))
    if rep.snapshot is None or str(rep.build_status) != "built":
        raise SystemExit(f"[{corpus.name}] {step} sync ended {rep.run.status}, build {rep.build_status}: "
                         f"{rep.build_reason}")
    return rep, time.perf_counter() - t0


def _build(corpus: Corpus, svc: Any, work: Path) -> dict[str, Any]:
    """A full sync into a new index; an update corpus at its old release first, then updated and synced again."""
    up = corpus.update
    if up is not None:
        print(f"[{corpus.name}] writing the old release {up.old_release} into {corpus.folder}", flush=True)
        up.old(corpus.folder)
    svc.registry.add_source(corpus.name, kind=up.kind if up else "folder", location=str(corpus.folder),
                            owner="bench", kb=corpus.name, setup=SourceSetup(options=dict(up.options) if up else None))
    print(f"[{corpus.name}] indexing {corpus.folder} into {work}", flush=True)
    rep, seconds = _sync(svc, corpus, "first sync")
    print(f"[{corpus.name}] indexed in {seconds:.0f} s: {rep.run.summary}", flush=True)
    record: dict[str, Any] = {"index_seconds": round(seconds, 1), "summary": rep.run.summary}
    errors = list(rep.errors)
    if up is not None:
        print(f"[{corpus.name}] the update: {up.old_release} -> {up.new_release}", flush=True)
        up.new(corpus.folder)
        urep, useconds = _sync(svc, corpus, "update sync")
        print(f"[{corpus.name}] update synced in {useconds:.0f} s: {urep.run.summary}", flush=True)
        errors = list(urep.errors)  # what the update's run failed on (the first run's failures retried there)
        record.update(indexed_at=up.old_release, updated_to=up.new_release, update_seconds=round(useconds, 1),
                      update_summary=urep.run.summary)
    record["document_errors"] = [{"key": e.key, "reason": e.reason, "detail": str(e.detail)[:300]} for e in errors]
    return record


# -- asking -------------------------------------------------------------------

class Asker:
    """One client as an application gets it from ``Services``; the decision sink heard for its signals."""

    def __init__(self, client: Any, kb: str) -> None:
        self.client, self.kb = client, kb
        self.heard: list[tuple[Any, Any]] = []
        from freshindex.injection.observer import Observers, QueryObserver

        heard = self.heard

        class Capture(QueryObserver):
            def decided(self, kb: str, reason: Any, signals: Any) -> None:
                heard.append((reason, signals))

        client.observer = Observers(client.observer, Capture())  # the service's metrics still hear it

    def ask(self, question: str, limit: int) -> dict[str, Any]:
        self.heard.clear()
        t0 = time.perf_counter()
        packet = self.client.retrieve(question, kb=self.kb, limit=limit)
        ms = (time.perf_counter() - t0) * 1000
        reason, sig = self.heard[-1] if self.heard else (None, None)
        return {"ms": round(ms, 1), "insufficient": bool(packet.insufficient),
                "reason": str(reason) if reason is not None else None,
                "why": packet.reason if packet.insufficient else None,
                "signals": sig.as_dict() if sig is not None else None,
                "evidence": [{"key": e.key, "chunk_id": e.chunk_id, "score": round(float(e.score), 4),
                              "page": e.page, "page_end": e.page_end, "ocr": e.ocr, "text": e.text,
                              "also_in": [m.key for m in e.also_in]}
                             for e in packet.evidence]}


def _expected(corpus: Corpus, page: str) -> tuple[str, int | None]:
    """A golden ``page`` as (document key, page number): "<file>.pdf#page=N" on a PDF corpus, else (page, None)."""
    if not corpus.pdf:
        return page, None
    name, _, n = page.partition("#page=")
    return name, int(n) if n else None


def on_page(corpus: Corpus, ev: dict[str, Any], page: str) -> bool:
    """Whether evidence item ``ev`` is on the golden ``page`` (a document path, or "<file>.pdf#page=N")."""
    return on_expected(ev, *_expected(corpus, page))


def _rank(corpus: Corpus, evidence: list[dict[str, Any]], pages: list[str]) -> int | None:
    ranks = [r for p in pages if (r := rank_of(evidence, [_expected(corpus, p)[0]], _expected(corpus, p)[1]))]
    return min(ranks) if ranks else None


def judge(corpus: Corpus, q: dict[str, Any], at5: dict[str, Any], at10: dict[str, Any]) -> dict[str, Any]:
    """hit@5, passage@5, reciprocal rank@10 and distractor order of one run (limit 5 and limit 10 packets),
    scored by ``freshindex eval``'s own scorer (:func:`freshindex.evaluation.score_items`)."""
    ev5, ev10 = at5["evidence"], at10["evidence"]
    out: dict[str, Any] = {
        "insufficient": at5["insufficient"], "reason": at5["reason"], "why": at5["why"],
        "ms5": at5["ms"], "ms10": at10["ms"],
        "prefix": [e["chunk_id"] for e in ev5] == [e["chunk_id"] for e in ev10[:len(ev5)]],
        "n10": len(ev10),
        "ranked": [{k: e[k] for k in ("key", "chunk_id", "score", "page", "page_end")} for e in ev10],
    }
    if q["kind"] == "unanswerable":
        return out
    key, page = _expected(corpus, q["page"])
    s5, s10 = score_items(ev5, key, q["passage"], page=page), score_items(ev10, key, page=page)
    on = [e for e in ev5 if on_expected(e, key, page)]
    out.update(hit5=s5.hit, passage5=s5.passage, passage5_exact=s5.passage_exact,
               passage5_strict=any(" ".join(q["passage"].split()) in " ".join(e["text"].split()) for e in on),
               passage5_any_page=s5.passage_any, rr10=s10.rr, rank10=s10.rank)
    if q["kind"] == "distractor":
        d = _rank(corpus, ev10, list(q.get("distractor_pages") or []))
        out["distractor_rank10"] = d
        out["distractor_above"] = d is not None and (s10.rank is None or d < s10.rank)
    return out


def refusal_off(svc: Any) -> Any:
    """``svc``'s parts wired as a second ``Services`` with ``context.refusal`` off (not closed: it owns nothing)."""
    from freshindex.services import Services

    off_settings = svc.settings.model_copy(update={"context": svc.settings.context.model_copy(update={"refusal": False})})
    return Services(off_settings, registry=svc.registry, store=svc.store, embedder=svc.embedder,
                    naming=svc.naming, metrics=svc.metrics)


def ask_all(corpus: Corpus, svc: Any, questions: list[dict[str, Any]],
            stale: StaleCheck | None = None) -> list[dict[str, Any]]:
    """Every question with refusal on (the default client) and off (``context.refusal = false``); after an update,
    each top-5 item that ``stale`` calls stale is listed in the run's ``stale5``."""
    off_svc = refusal_off(svc)
    on, off = Asker(svc.client, corpus.name), Asker(off_svc.client, corpus.name)
    on.ask("warm up", 5)
    rows = []
    for i, q in enumerate(questions, 1):
        row = {k: q.get(k) for k in ("id", "kind", "split", "question", "page", "passage", "distractor_pages")}
        raw = {}
        for label, asker in (("on", on), ("off", off)):
            at5, at10 = asker.ask(q["question"], 5), asker.ask(q["question"], 10)
            row[label] = judge(corpus, q, at5, at10)
            row[label]["signals"] = at5["signals"]
            if stale is not None:
                row[label]["stale5"] = [{"rank": i, "key": e["key"], "chunk_id": e["chunk_id"], "why": why}
                                        for i, e in enumerate(at5["evidence"], 1) if (why := stale(e))]
            raw[label] = {"top5_text": [e["text"] for e in at5["evidence"]], "top10_text": [e["text"] for e in at10["evidence"]]}
        row["texts"] = raw
        if corpus.pdf:
            from bench.corpora.rmanuals import scanned_pages

            row["scanned"] = q.get("page") in set(scanned_pages)
        rows.append(row)
        if i % 10 == 0 or i == len(questions):
            print(f"[{corpus.name}] asked {i}/{len(questions)}", flush=True)
    return rows


def lost_where(corpus: Corpus, svc: Any, questions: list[dict[str, Any]]) -> dict[str, Any]:
    """Where each answerable question's passage was lost, refusal off: ``freshindex eval``'s own diagnosis
    (:mod:`freshindex.evaluation.diagnose`: the first stage of the line that broke, its verdicts in the line's
    order), counted by verdict, with the question ids under each; ``ok`` is the passage in the top 5, so its
    count is passage@5's numerator with refusal off."""
    from freshindex.evaluation.golden import Expected, GoldenQuestion, GoldenSet
    from freshindex.evaluation.run import evaluate

    off_svc = refusal_off(svc)
    asked = []
    for q in questions:
        if q["kind"] == "unanswerable":
            continue
        key, page = _expected(corpus, q["page"])
        asked.append(GoldenQuestion(id=q["id"], question=q["question"], expected=Expected(key=key, page=page),
                                    required_passage=q.get("passage")))
    found = evaluate(off_svc, GoldenSet(tuple(asked), name=corpus.name), corpus.name, limit=LIMITS[0])
    ids: dict[str, list[str]] = {}
    for r in found.results:
        ids.setdefault(r.verdict, []).append(r.id)
    order = in_line_order(ids)
    return {"counts": {v: len(ids[v]) for v in order}, "ids": {v: ids[v] for v in order}}


def in_line_order(verdicts: Any) -> list[str]:
    """``verdicts`` in the order of the query line's stages (:data:`freshindex.evaluation.diagnose.VERDICTS`),
    an unknown one last: the first stage that loses answers is the one to work on."""
    from freshindex.evaluation.diagnose import VERDICTS

    return sorted(verdicts, key=lambda v: (VERDICTS.index(v) if v in VERDICTS else len(VERDICTS), v))


class StaleCheck:
    """Whether a served item is stale after an update: the old release's text the update removed, or a gone document.

    An item is stale when its document is not in the new release (deleted, or moved to another path) or its text
    holds a run of :attr:`RUN` consecutive words (``bench.corpora.blind``'s reading: quotes and dashes folded,
    lower case, punctuation dropped) that the document's OLD text has and its NEW text does not.  The texts are
    read as the golden sets' checker reads them (an HTML page's main block, a text file as it is), so words the
    chunker adds (a heading path) only ever make a run fail to match: this undercounts, it does not invent.
    """

    RUN = 12

    def __init__(self, old_root: Path, new_root: Path) -> None:
        from bench.corpora import blind

        self.blind = blind
        self.old, self.new = blind.Release(old_root), blind.Release(new_root)
        self.old_files, self.new_files = set(self.old.files()), set(self.new.files())
        self._removed: dict[str, set[tuple[str, ...]]] = {}

    def _grams(self, text: str | None) -> set[tuple[str, ...]]:
        w = self.blind.words(self.blind.fold(text or ""))
        return {tuple(w[i:i + self.RUN]) for i in range(len(w) - self.RUN + 1)}

    def relative(self, key: str) -> str:
        """The item's document as a path in the releases (a key may carry the source's folder in front)."""
        if key in self.new_files or key in self.old_files:
            return key
        found = [f for f in (self.new_files | self.old_files) if key.endswith("/" + f)]
        return max(found, key=len) if found else key

    def __call__(self, ev: dict[str, Any]) -> str | None:
        rel = self.relative(ev["key"])
        if rel not in self.new_files:
            return "document deleted or moved by the update" if rel in self.old_files else "not in the new release"
        if rel not in self._removed:
            self._removed[rel] = self._grams(self.old.text(rel)) - self._grams(self.new.text(rel))
        removed = self._removed[rel]
        if removed and any(self._grams(part) & removed for part in self.parts(ev["text"])):
            return "holds old-release text the update removed"
        return None

    @staticmethod
    def parts(text: str) -> list[str]:
        """A served text cut where the packet joined two chunks: at a line it repeats (a continuation's context
        line, its heading again). A run across that seam is the packet's, not the document's: the old release
        may have had those words side by side (a term's heading right after the paragraph before it) where the
        new one put a note between them (seen on CMake's cpack_gen/deb.html)."""
        parts: list[list[str]] = [[]]
        seen: set[str] = set()
        for line in text.splitlines():
            key = line.strip()
            if key and key in seen:
                parts.append([])
                continue
            seen.add(key)
            parts[-1].append(line)
        return ["\n".join(p) for p in parts if p]


# -- figures ------------------------------------------------------------------

def _rate(k: float, n: int) -> float | None:
    return round(k / n, 4) if n else None


def _pct(values: list[float], p: float) -> float | None:
    return round(float(np.percentile(values, p)), 1) if values else None


def figures(rows: list[dict[str, Any]], label: str) -> dict[str, Any]:
    ans = [r for r in rows if r["kind"] != "unanswerable"]
    un = [r for r in rows if r["kind"] == "unanswerable"]
    dis = [r for r in rows if r["kind"] == "distractor"]
    runs = [r[label] for r in ans]
    out = {
        "answerable": len(ans), "unanswerable": len(un),
        "hit_at_5": _rate(sum(x["hit5"] for x in runs), len(runs)),
        "passage_at_5": _rate(sum(x["passage5"] for x in runs), len(runs)),
        "mrr_at_10": _rate(sum(x["rr10"] for x in runs), len(runs)),
        "unanswerable_refused": _rate(sum(r[label]["insufficient"] for r in un), len(un)),
        "false_refusals": _rate(sum(x["insufficient"] for x in runs), len(runs)),
        "distractor_above_canonical": sum(bool(r[label].get("distractor_above")) for r in dis),
        # top-5 items served stale after an update (StaleCheck), over every question; None: no update was measured
        "stale_served": sum(len(r[label]["stale5"]) for r in rows) if any("stale5" in r[label] for r in rows) else None,
        "query_ms_p50": _pct([r[label]["ms5"] for r in rows], 50),
        "query_ms_p95": _pct([r[label]["ms5"] for r in rows], 95),
        "passage_at_5_strict_whitespace": _rate(sum(x["passage5_strict"] for x in runs), len(runs)),
        "passage_at_5_exact_on_ocr": _rate(sum(x.get("passage5_exact", x["passage5"]) for x in runs), len(runs)),
        "top5_is_prefix_of_top10": _rate(sum(r[label]["prefix"] for r in rows), len(rows)),
        # the context budget, not the limit, often caps the limit-10 packet: MRR@10 is over what it holds
        "limit10_items": dict(sorted(Counter(r[label]["n10"] for r in rows if not r[label]["insufficient"]).items())),
        "by_kind": {},
    }
    for kind in sorted({r["kind"] for r in ans}):
        sel = [r[label] for r in ans if r["kind"] == kind]
        out["by_kind"][kind] = {"n": len(sel), "hit_at_5": _rate(sum(x["hit5"] for x in sel), len(sel)),
                                "passage_at_5": _rate(sum(x["passage5"] for x in sel), len(sel)),
                                "mrr_at_10": _rate(sum(x["rr10"] for x in sel), len(sel))}
    out["code_hit_at_5"] = out["by_kind"].get("code", {}).get("hit_at_5")
    return out


def goals(fig: dict[str, Any], names: tuple[str, ...] = tuple(GOALS)) -> dict[str, str]:
    out = {}
    for name in names:
        op, goal = GOALS[name]
        v = fig.get(name)
        if v is None and name in ("code_hit_at_5", "stale_served"):
            out[name] = "n/a"  # no code questions; no update measured
            continue
        ok = v is not None and (v >= goal if op == ">=" else v <= goal)
        out[name] = "met" if ok else "missed"
    return out


def _client_bias(raw: dict[str, Any], shipped: dict[str, float]) -> float:
    """The bias the client decided with: the snapshot's calibrated one when fitted for the shipped weights."""
    from freshindex.injection.refusal import RefusalPolicy

    policy = RefusalPolicy(**{k: v for k, v in shipped.items() if k != "bias"}, bias=shipped["bias"])
    return policy.calibrated((raw.get("pseudo") or {}).get("calibration")).bias


# -- the run ------------------------------------------------------------------

def run_corpus(corpus: Corpus, embedder: Any, settings_for: Callable[[Path], Any], reindex: bool) -> dict[str, Any]:
    steps: dict[str, float] = {}
    steps["materialise_s"] = round(materialise(corpus), 1)
    if corpus.update is not None:  # the golden set is verified against the new release: after the update
        svc, record = open_index(corpus, embedder, settings_for, reindex)
    t0 = time.perf_counter()
    questions, dropped, general = verified_questions(corpus)
    steps["verify_s"] = round(time.perf_counter() - t0, 1)
    if corpus.update is None:
        svc, record = open_index(corpus, embedder, settings_for, reindex)
    steps["index_s"] = record["index_seconds"]  # the build's time, also when this run re-queried the kept index
    stale = StaleCheck(*corpus.update.roots(corpus.folder)) if corpus.update is not None else None
    try:
        t0 = time.perf_counter()
        rows = ask_all(corpus, svc, questions, stale)
        steps["query_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        try:
            lost = lost_where(corpus, svc, questions)
        except Exception as exc:  # a diagnostic: its failure must not throw away the answers asked above
            print(f"[{corpus.name}] the diagnosis of the misses failed: {exc!r}", flush=True)
            lost = {"error": repr(exc)[:500]}
        steps["diagnose_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        pseudo = pseudo_questions(svc, corpus.name)
        steps["pseudo_s"] = round(time.perf_counter() - t0, 1)
    finally:
        svc.close()
    raw = {"corpus": corpus.name, "release": corpus.release, "pages": corpus.count_pages(), "index": record,
           "dropped": dropped, "golden_problems": general, "steps": steps, "rows": rows, "pseudo": pseudo, "lost": lost,
           "commit": _commit(), "questions_by": questions_by(corpus.name)}
    Path(record["dir"], "rows.json").write_text(json.dumps(raw, default=str))
    return raw


def questions_by(name: str) -> str:
    """Who wrote the corpus's golden set: the first paragraph of ``bench/goldens/<name>/WRITERS.md``."""
    path = ROOT / "bench" / "goldens" / name / "WRITERS.md"
    if not path.is_file():
        return "not stated (no WRITERS.md; a set from before the blind-writing rule)"
    para: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("#") and not para:
            continue
        if not line.strip():
            if para:
                break
            continue
        para.append(line.strip())
    return " ".join(para).replace("**", "")[:400]


def pseudo_questions(svc: Any, kb: str) -> dict[str, Any]:
    """The signals of the pseudo-questions the active snapshot's calibration asks (the same sample and questions)."""
    from bench.heldout import signal_list
    from freshindex.injection.calibration import Calibration, pseudo_signals

    ctx = svc.settings.context.model_dump()
    active = svc.registry.active_snapshot(kb)
    asked = pseudo_signals(svc.store, svc.embedder, collection=active.collection, snapshot_id=active.id,
                           policy=svc.refusal_policy, settings=Calibration.from_mapping(ctx), naming=svc.naming)
    return {"snapshot_id": active.id, "sampled": asked.sampled,
            "calibration": (active.verification or {}).get("calibration"),
            "answerable": [signal_list(x) for x in asked.answerable],
            "perturbed": [signal_list(x) for x in asked.perturbed],
            "answerable_kinds": asked.answerable_kinds, "perturbed_kinds": asked.perturbed_kinds,
            "surveyed": asked.surveyed}


def recalibrate_if_stale(svc: Any, kb: str) -> dict[str, Any] | None:
    """Calibrate a kept index's active snapshot again when its record was fitted for other refusal weights."""

    active = svc.registry.active_snapshot(kb)
    record = (active.verification or {}).get("calibration") if active is not None else None
    if active is None or (isinstance(record, dict) and svc.refusal_policy.fits(record.get("policy"))):
        return None
    data = svc.calibrate_refusal(active.collection, active.id)
    svc.registry.record_calibration(active.id, data)
    return data


def report(raws: dict[str, dict[str, Any]], shipped: dict[str, float], argv: list[str]) -> dict[str, Any]:
    from bench import heldout

    missing = [n for n, raw in raws.items() if not raw.get("pseudo")]
    if missing:
        raise SystemExit(f"no pseudo-question signals kept for {', '.join(missing)} (answers of an older bench): "
                         "run without --from-rows")
    rows_by = {n: raw["rows"] for n, raw in raws.items()}
    pseudo_by = {n: raw["pseudo"] for n, raw in raws.items()}
    loo = heldout.leave_one_out(rows_by, pseudo_by)
    per: dict[str, Any] = {}
    for name, raw in raws.items():
        rows = raw["rows"]
        heldout.held_label(rows, set(loo[name]["held_out"]["refused_ids"]) if name in loo else set())
        held, on, off = figures(rows, "held"), figures(rows, "on"), figures(rows, "off")
        shipped_recomputed = heldout.refused(rows, shipped, _client_bias(raw, shipped))
        per[name] = {
            "release": raw["release"], "pages": raw["pages"],
            "answerable": held["answerable"], "unanswerable": held["unanswerable"],
            # the figures that count: the refusal's defaults fitted on the other corpora (bench.heldout)
            **{k: held[k] for k in GOALS},
            "goals": goals(held), "held_out_by_kind": held["by_kind"],
            "index_seconds": raw["index"]["index_seconds"], "index_reused": raw["index"]["reused"],
            "query_ms_p50": on["query_ms_p50"], "query_ms_p95": on["query_ms_p95"],
            "shipped_defaults_client": {**{k: on[k] for k in GOALS}, "goals": goals(on),
                                        "note": "the client as shipped; its defaults were fitted on every corpus, "
                                                "this one included: not held-out"},
            "refusal_off": {**{k: off[k] for k in (*RETRIEVAL, "unanswerable_refused", "false_refusals",
                                                   "query_ms_p50", "query_ms_p95")},
                            "goals": goals(off, RETRIEVAL)},
            "by_kind": on["by_kind"], "by_kind_refusal_off": off["by_kind"],
            "passage_at_5_strict_whitespace": on["passage_at_5_strict_whitespace"],
            "passage_at_5_exact_on_ocr": on["passage_at_5_exact_on_ocr"],
            "passage_at_5_any_page_refusal_off": _rate(sum(r["off"]["passage5_any_page"] for r in rows
                                                           if r["kind"] != "unanswerable"), on["answerable"]),
            "top5_is_prefix_of_top10": on["top5_is_prefix_of_top10"],
            # where the passage was lost, refusal off (freshindex eval's diagnosis; null in answers kept before it,
            # {"error": ...} when the diagnosis failed)
            "passage_lost_at_refusal_off": raw.get("lost"),
            # the diagnosis asks each question again: its "ok" must be the passage@5 count of the answers above
            "passage_lost_ok_matches_answers": _lost_ok_matches(raw),
            "limit10_items_refusal_off": off["limit10_items"],
            # the shipped weights and this snapshot's bias, recomputed from the recorded signals, give the client's
            # own decisions: what bench.heldout computes is what the client does
            "shipped_recomputed_matches_client": sorted(shipped_recomputed)
            == sorted(r["id"] for r in rows if r["on"]["insufficient"]),
            "questions_by": raw.get("questions_by") or questions_by(name),
            "update": _update_record(raw["index"]), "stale_items_refusal_off": _stale_items(rows, "off"),
            "held_out_fitted_on": loo[name]["fitted_on"] if name in loo else [],
            "dropped_questions": raw["dropped"], "golden_problems": raw["golden_problems"],
            "skipped_kinds": list(corpora()[name].skip_kinds), "steps": raw["steps"],
            "chunks": _chunks(raw["index"]),
            "documents": (raw["index"].get("summary") or {}).get("documents"),
            "document_errors": raw["index"].get("document_errors"),
            "questions_on_failed_documents": _on_failed(raw),
            "index_dir": raw["index"]["dir"],
            "index_parts": raw["index"]["parts"], "commit_at_query": raw["commit"],
        }
        failed = set(_on_failed(raw))
        if failed:  # what the ranking does where the pipeline did its part: a diagnostic, not the figure
            ok = [r for r in rows if r["id"] not in failed]
            sub_on, sub_off = figures(ok, "on"), figures(ok, "off")
            keys = ("answerable", "hit_at_5", "passage_at_5", "mrr_at_10", "false_refusals", "distractor_above_canonical")
            per[name]["excluding_questions_on_failed_documents"] = {
                "refusal_on": {k: sub_on[k] for k in keys}, "refusal_off": {k: sub_off[k] for k in keys}}
        if name == "rmanuals":
            sc = [r for r in rows if r["kind"] != "unanswerable" and r.get("scanned")]
            per[name]["scanned_page_questions"] = {
                "n": len(sc), "hit_at_5": _rate(sum(r["on"]["hit5"] for r in sc), len(sc)),
                "passage_at_5": _rate(sum(r["on"]["passage5"] for r in sc), len(sc))}
    questions = {name: [_slim(r) for r in raw["rows"]] for name, raw in raws.items()}
    defaults = heldout.fit(rows_by, pseudo_by, list(rows_by))
    meta = {**_meta(argv, shipped), "fit_pool": list(rows_by),
            "fit_note": "weights and calibration target fitted leave-one-corpus-out among the corpora whose answers "
                        f"this report holds ({', '.join(rows_by)}): each held out against the others"}
    return {"meta": meta, "corpora": per, "leave_one_corpus_out": loo,
            "defaults_fitted_on_every_corpus": defaults,
            "misses": {name: misses(raw["rows"]) for name, raw in raws.items()}, "questions": questions}


def _or_dash(value: Any) -> Any:
    return "-" if value is None else value


def _lost_ok_matches(raw: dict[str, Any]) -> bool | None:
    """Whether the diagnosis's ``ok`` count is the refusal-off passage@5 count of the kept answers (None: no
    diagnosis)."""
    counts = (raw.get("lost") or {}).get("counts")
    if counts is None:
        return None
    return counts.get("ok", 0) == sum(bool(r["off"].get("passage5")) for r in raw["rows"] if r["kind"] != "unanswerable")


def _chunks(index: dict[str, Any]) -> int | None:
    """The chunks the asked index holds: the first sync's embedded ones; after an update, the first sync's added
    chunks less the update's tombstones plus its added chunks (from the two runs' summaries, not a store count)."""
    first = index.get("summary") or {}
    if index.get("updated_to"):
        u = index.get("update_summary") or {}
        return int(first.get("chunks_added", 0)) - int(u.get("tombstones", 0)) + int(u.get("chunks_added", 0))
    return first.get("chunks_embedded")


def _update_record(index: dict[str, Any]) -> dict[str, Any] | None:
    """The update an update corpus went through before it was asked (None for a corpus indexed once)."""
    if not index.get("updated_to"):
        return None
    first, upd = index.get("summary") or {}, index.get("update_summary") or {}
    keys = ("documents", "documents_changed", "documents_deleted", "chunks_embedded", "chunks_reused")
    return {"indexed_at": index["indexed_at"], "updated_to": index["updated_to"],
            "first_sync_seconds": index["index_seconds"], "update_seconds": index.get("update_seconds"),
            "first_sync": {k: first.get(k) for k in keys if k in first},
            "update_sync": {k: upd.get(k) for k in keys if k in upd}, "moves": len(upd.get("moves") or [])}


def _stale_items(rows: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    return [{"id": r["id"], **x} for r in rows for x in r[label].get("stale5") or []]


def merge_earlier(res: dict[str, Any], path: Path = ROOT / "bench" / "results" / "transfer.json") -> dict[str, Any]:
    """``res`` with the corpora of the results file that this run did not answer kept as they were reported.

    Their figures are those of the run that asked them (its date, commit and fit pool kept in ``earlier_run``);
    nothing of them is recomputed here, and the fields they predate are filled only where derivable
    (``code_hit_at_5`` from their held-out figures by kind; ``stale_served`` None: no update was measured).
    """
    if not path.is_file():
        return res
    before = json.loads(path.read_text())
    for name, entry in (before.get("corpora") or {}).items():
        if name in res["corpora"]:
            continue
        meta = before.get("meta") or {}
        entry = dict(entry)
        entry.setdefault("earlier_run", {"date": meta.get("date"), "command": meta.get("command"),
                                         "commit": (meta.get("commit") or {}).get("head"),
                                         "fit_pool": meta.get("fit_pool") or list(before.get("corpora") or {})})
        entry.setdefault("questions_by", questions_by(name))
        entry.setdefault("code_hit_at_5", (entry.get("held_out_by_kind") or {}).get("code", {}).get("hit_at_5"))
        entry.setdefault("stale_served", None)
        entry.setdefault("held_out_fitted_on",
                         ((before.get("leave_one_corpus_out") or {}).get(name) or {}).get("fitted_on", []))
        res["corpora"][name] = entry
        if before.get("defaults_fitted_on_every_corpus") and "defaults_fitted_earlier" not in res:
            res["defaults_fitted_earlier"] = before.get("defaults_fitted_earlier") or before["defaults_fitted_on_every_corpus"]
        for part in ("leave_one_corpus_out", "misses", "questions"):
            if name in (before.get(part) or {}):
                res[part][name] = before[part][name]
    return res


def _on_failed(raw: dict[str, Any]) -> list[str]:
    """Questions whose page (or a distractor page) is in a document the sync failed: they measure that failure."""
    failed = {e.get("key") for e in raw["index"].get("document_errors") or []}
    return [r["id"] for r in raw["rows"]
            if any((p or "").partition("#page=")[0] in failed for p in [r.get("page"), *(r.get("distractor_pages") or [])])]


def _slim(r: dict[str, Any]) -> dict[str, Any]:
    keep = {k: r[k] for k in ("id", "kind", "split", "page") if k in r}
    for label in ("on", "off"):
        x = dict(r[label])
        if x.get("signals"):
            x["signals"] = {k: v for k, v in x["signals"].items() if k != "terms"}  # the question's tokens
        if label == "on" and x["ranked"] == r["off"]["ranked"]:
            x["ranked"] = "same as off"  # the refusal passed: the retrieval's own ranking, not repeated
        keep[label] = x
    if "scanned" in r:
        keep["scanned"] = r["scanned"]
    return keep


def misses(rows: list[dict[str, Any]], n: int = 6) -> dict[str, list[dict[str, Any]]]:
    """Examples for the engineers: false refusals, passage misses (with what ranked instead), distractor wins.

    Refusals are the held-out ones (``held``, :func:`bench.heldout.held_label`); the reason and signals the client's."""
    def ranked(r: dict[str, Any], k: int = 3) -> list[str]:
        out = []
        for e, text in zip(r["off"]["ranked"][:k], r["texts"]["off"]["top10_text"][:k], strict=False):
            where = e["key"] + (f"#p{e['page']}" + (f"-{e['page_end']}" if e.get("page_end") not in (None, e["page"]) else "")
                                if e.get("page") else "")
            out.append(f"{where} ({e['score']}): {' '.join(text.split())[:140]}")
        return out

    ans = [r for r in rows if r["kind"] != "unanswerable"]
    fr = [{"id": r["id"], "question": r["question"], "reason": r["on"]["reason"], "why": r["on"]["why"],
           "signals": {k: v for k, v in (r["on"]["signals"] or {}).items() if k != "terms"},
           "hit5_refusal_off": r["off"]["hit5"], "passage5_refusal_off": r["off"]["passage5"]}
          for r in ans if r["held"]["insufficient"]]
    pm = [{"id": r["id"], "kind": r["kind"], "question": r["question"], "page": r["page"],
           "passage": r["passage"], "hit5": r["off"]["hit5"], "rank10": r["off"]["rank10"],
           "passage_on_another_page": r["off"]["passage5_any_page"], "ranked_instead": ranked(r)}
          for r in ans if not r["off"]["passage5"]]
    ua = [{"id": r["id"], "question": r["question"], "signals": {k: v for k, v in (r["on"]["signals"] or {}).items()
                                                                 if k != "terms"}, "top": ranked(r, 2)}
          for r in rows if r["kind"] == "unanswerable" and not r["held"]["insufficient"]]
    da = [{"id": r["id"], "question": r["question"], "page": r["page"], "rank10": r["off"]["rank10"],
           "distractor_rank10": r["off"].get("distractor_rank10"), "ranked": ranked(r)}
          for r in rows if r["kind"] == "distractor" and r["off"].get("distractor_above")]
    return {"false_refusals": fr, "passage_misses_refusal_off": pm, "unanswerable_answered": ua,
            "distractor_above_canonical_refusal_off": da, "counts": {"false_refusals": len(fr),
                                                                      "passage_misses": len(pm),
                                                                      "unanswerable_answered": len(ua),
                                                                      "distractor_above": len(da)},
            "shown": n}


def _commit() -> dict[str, Any]:
    def git(*a: str) -> str:  # not stripped: a porcelain line starts with a space
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.rstrip("\n")

    changed = [line[3:] for line in git("status", "--porcelain").splitlines() if line[3:]]
    return {"head": git("rev-parse", "HEAD"), "subject": git("log", "-1", "--format=%s"),
            "uncommitted_product_files": [f for f in changed if not f.startswith("bench/")],
            "uncommitted_bench_files": [f for f in changed if f.startswith("bench/") and not f.startswith("bench/results/")]}


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def _meta(argv: list[str], shipped: dict[str, float]) -> dict[str, Any]:
    return {"command": "python -m bench.transfer" + (" " + " ".join(argv) if argv else ""),
            "commit": _commit(), "date": _now(), "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "cores": os.cpu_count(), "load_avg_1_5_15": _load(), "python": platform.python_version(),
            "settings": "defaults (ONNX all-MiniLM-L6-v2 int8, SQLite registry + Qdrant Edge embedded store)",
            "freshindex_env": sorted(k for k in os.environ if k.startswith("FRESHINDEX_")),
            "shipped_refusal_defaults": shipped, "shipped_target": _shipped_target(), "goals": {k: f"{op} {g}" for k, (op, g) in GOALS.items()},
            "limits": list(LIMITS), "passage_match": "whitespace and '|' removed (bench.evidence.norm), on an item of "
            f"the question's page; on an item read by OCR, {OCR_PASSAGE_MATCH:.0%} of the passage's characters aligned "
            "in order (passage_at_5_exact_on_ocr: exact there too)", "refused_answerable_counts_as_miss": True}


def markdown(res: dict[str, Any], shown: int = 4) -> list[str]:
    m, per = res["meta"], res["corpora"]
    c = m["commit"]
    lines = ["# Transfer benchmark: whole corpora, the refusal fitted leave-one-corpus-out", "",
             f"`{m['command']}`, report at {c['head'][:10]} ({c['subject']}), {m['date']}, {m['cores']} cores shared "
             f"(load {m['load_avg_1_5_15']}); {m['settings']}. Questions asked at "
             + "; ".join(f"{n} {per[n]['commit_at_query']['head'][:10]}" for n in per) + ". "
             + (f"Uncommitted product files in the tree when asked: "
                f"{', '.join(sorted({f for n in per for f in per[n]['commit_at_query']['uncommitted_product_files']}))}. "
                if any(per[n]["commit_at_query"]["uncommitted_product_files"] for n in per) else "")
             + (f"Uncommitted bench files when reported: {', '.join(c['uncommitted_bench_files'])}. "
                if c.get("uncommitted_bench_files") else "")
             + "Questions asked through `InjectionClient.retrieve` at limit 5 and 10; a refused answerable question "
             "counts as a miss; passages compared with whitespace and `|` removed, on an item of the question's page "
             f"(on an item read by OCR, {OCR_PASSAGE_MATCH:.0%} of the passage's characters aligned in order: OCR "
             "misreads glyphs the golden passage copied from the text layer).",
             "", "## Held-out figures: the default settings, every fitted default fitted without that corpus", "",
             "The refusal's weights and calibration target are fitted on the other corpora of the corpus's fit pool "
             "(`bench.heldout`; row \"held out against\"); the corpus's own bias is calibrated from its own "
             "pseudo-questions, as its build does. The retrieval is the client's; a question refused counts as a miss. "
             f"This run's fit pool: {', '.join(m.get('fit_pool') or [])} ({m.get('fit_note', '')}). "
             "An update corpus (row \"update\") was indexed at its old release, updated, synced again and then "
             "asked; `stale_served` counts top-5 items whose document the update deleted or moved, or whose text holds "
             f"a run of {StaleCheck.RUN} words the update removed from that document.", ""]
    names = list(per)
    earlier = [n for n in names if per[n].get("earlier_run")]
    if earlier:
        e = per[earlier[0]]["earlier_run"]
        lines += [f"Kept from the earlier report (not run now, figures as reported then, {e.get('date')} at "
                  f"{(e.get('commit') or '')[:10]}, fit pool {', '.join(e.get('fit_pool') or [])}): "
                  f"{', '.join(earlier)}.", ""]

    def val(name: str, key: str, src: dict[str, Any] | None = None) -> str:
        f = src if src is not None else per[name]
        v = f.get(key)
        g = f.get("goals", {}).get(key)
        return ("-" if v is None else f"{v}") + (" ✓" if g == "met" else " ✗" if g == "missed" else "")

    def update(n: str) -> str:
        u = per[n].get("update")
        return f"{u['indexed_at']} -> {u['updated_to']}" if u else "none (indexed once)"

    rows = [["pages", *[per[n]["pages"] for n in names], ""],
            ["answerable / unanswerable", *[f"{per[n]['answerable']} / {per[n]['unanswerable']}" for n in names], ""],
            ["update", *[update(n) for n in names], ""],
            ["held out against", *[", ".join(per[n].get("held_out_fitted_on") or []) or "-" for n in names], ""]]
    for key, (op, g) in GOALS.items():
        rows.append([key, *[val(n, key) for n in names], f"{op} {g}"])
    rows.append(["shipped client (not held-out): refused / false refusals",
                 *[f"{per[n]['shipped_defaults_client']['unanswerable_refused']} / "
                   f"{per[n]['shipped_defaults_client']['false_refusals']}" for n in names], ""])
    rows += [["index_seconds", *[per[n]["index_seconds"] for n in names], ""],
             ["query_ms_p50 / p95", *[f"{per[n]['query_ms_p50']} / {per[n]['query_ms_p95']}" for n in names], ""],
             ["passage@5, exact on OCR-read items too",
              *[per[n].get("passage_at_5_exact_on_ocr", "-") for n in names], ""],
             ["chunks", *[per[n]["chunks"] for n in names], ""]]
    lines += table(["figure", *names, "goal"], ["l", *"r" * len(names), "l"], rows)
    lines += ["", "## The client as shipped (refusal defaults fitted on every corpus of their day: not held-out)", ""]
    rows = [[key, *[val(n, key, per[n]["shipped_defaults_client"]) for n in names], f"{GOALS[key][0]} {GOALS[key][1]}"]
            for key in GOALS]
    lines += table(["figure", *names, "goal"], ["l", *"r" * len(names), "l"], rows)
    lines += ["", "Who wrote the questions (`bench/goldens/<name>/WRITERS.md`):", ""]
    lines += [f"- {n}: {per[n].get('questions_by')}" for n in names]
    for n in names:
        u = per[n].get("update")
        if u:
            stale = per[n].get("stale_items_refusal_off") or []
            lines.append(f"- {n} update: first sync {u['first_sync_seconds']} s {u['first_sync']}; update sync "
                         f"{u['update_seconds']} s {u['update_sync']}, {u['moves']} moves; stale top-5 items with "
                         f"refusal off: {len(stale)}" + (" (" + "; ".join(f"{x['id']} #{x['rank']} {x['key']}: {x['why']}"
                                                                           for x in stale[:6]) + ")" if stale else ""))
    lines += ["", "## Retrieval alone (`FRESHINDEX_CONTEXT__REFUSAL=false`)", ""]
    rows = [[key, *[val(n, key, per[n]["refusal_off"]) for n in names], f"{GOALS[key][0]} {GOALS[key][1]}"]
            for key in RETRIEVAL]  # a corpus of an earlier report predates code_hit_at_5 and stale_served: "-"
    rows.append(["query_ms_p50 / p95", *[f"{per[n]['refusal_off']['query_ms_p50']} / "
                                          f"{per[n]['refusal_off']['query_ms_p95']}" for n in names], ""])
    rows.append(["passage@5, passage on any page", *[per[n]["passage_at_5_any_page_refusal_off"] for n in names], ""])
    rows.append(["items in the limit-10 packet (count of questions)",
                 *[", ".join(f"{k}: {v}" for k, v in per[n]["limit10_items_refusal_off"].items()) for n in names], ""])
    rows.append(["top 5 = prefix of the limit-10 packet", *[per[n]["top5_is_prefix_of_top10"] for n in names], ""])
    lines += table(["figure", *names, "goal"], ["l", *"r" * len(names), "l"], rows)
    for n in names:
        ex = per[n].get("excluding_questions_on_failed_documents")
        if ex:
            a, b = ex["refusal_on"], ex["refusal_off"]
            lines += ["", f"{n}: {len(per[n]['document_errors'])} documents failed to index and "
                      f"{len(per[n]['questions_on_failed_documents'])} questions are on them; without those questions "
                      f"({a['answerable']} answerable left), refusal on: hit@5 {a['hit_at_5']}, passage@5 "
                      f"{a['passage_at_5']}, MRR@10 {a['mrr_at_10']}, false refusals {a['false_refusals']}, distractor "
                      f"above canonical {a['distractor_above_canonical']}; refusal off: hit@5 {b['hit_at_5']}, passage@5 "
                      f"{b['passage_at_5']}, MRR@10 {b['mrr_at_10']} (a diagnostic: the figures above are the ones "
                      f"that count)."]
    lines += ["", "By kind, refusal off (n, hit@5 / passage@5 / MRR@10):", ""]
    kinds = sorted({k for n in names for k in per[n]["by_kind_refusal_off"]})
    rows = [[k, *[(lambda b: f"{b['n']}: {b['hit_at_5']} / {b['passage_at_5']} / {b['mrr_at_10']}" if b else "-")(
        per[n]["by_kind_refusal_off"].get(k)) for n in names]] for k in kinds]
    lines += table(["kind", *names], ["l", *"r" * len(names)], rows)
    lost = {n: (per[n].get("passage_lost_at_refusal_off") or {}).get("counts") for n in names}
    failed_diagnosis = {n: (per[n].get("passage_lost_at_refusal_off") or {}).get("error") for n in names}
    if any(lost.values()) or any(failed_diagnosis.values()):
        lines += ["", "Where each answerable question's passage was lost, refusal off (`freshindex eval`'s diagnosis: "
                  "the first stage of the line that broke, in the line's order; `ok` = in the top 5; `-`: no "
                  "diagnosis for that corpus: answers kept from before it, or it failed):", ""]
        verdicts = in_line_order({v for c in lost.values() if c for v in c})
        rows = [[v, *[str(lost[n].get(v, 0)) if lost[n] else "-" for n in names]] for v in verdicts]
        lines += table(["verdict", *names], ["l", *"r" * len(names)], rows) if rows else []
        lines += [f"- {n}: the diagnosis failed: {err}" for n, err in failed_diagnosis.items() if err]
        lines += [f"- {n}: the diagnosis's `ok` count differs from passage@5 of the answers above (asked twice, "
                  "answered differently)" for n in names if per[n].get("passage_lost_ok_matches_answers") is False]
    if "rmanuals" in per and per["rmanuals"].get("scanned_page_questions"):
        s = per["rmanuals"]["scanned_page_questions"]
        lines += ["", f"rmanuals, answerable questions on scanned (OCR) pages: {s['n']}, hit@5 {s['hit_at_5']}, "
                  f"passage@5 {s['passage_at_5']} (refusal on)."]
    lines += _loo_lines(res)
    lines += ["", "## Misses (examples)", ""]
    for name in names:
        ms = res["misses"][name]
        lines += [f"### {name}: {ms['counts']}", ""]
        for x in ms["false_refusals"][:shown]:
            sig = x["signals"]
            lines.append(f"- false refusal {x['id']} ({x['reason']}): {x['question']!r}; coverage {sig.get('coverage')}, "
                         f"lexical {sig.get('lexical')}, dense {sig.get('dense')}, missing {sig.get('missing')}; "
                         f"with refusal off hit@5 {x['hit5_refusal_off']}, passage@5 {x['passage5_refusal_off']}")
        for x in ms["passage_misses_refusal_off"][:shown]:
            lines.append(f"- passage miss {x['id']} ({x['kind']}): {x['question']!r} wants {x['page']} "
                         f"(hit@5 {x['hit5']}, rank {x['rank10']}); ranked instead: " + " | ".join(x["ranked_instead"]))
        for x in ms["unanswerable_answered"][:shown]:
            sig = x["signals"]
            lines.append(f"- unanswerable answered {x['id']}: {x['question']!r}; coverage {sig.get('coverage')}, "
                         f"lexical {sig.get('lexical')}, missing {sig.get('missing')}; top: " + " | ".join(x["top"]))
        for x in ms["distractor_above_canonical_refusal_off"][:shown]:
            lines.append(f"- distractor above canonical {x['id']}: wants {x['page']} (rank {x['rank10']}), a distractor "
                         f"page at rank {x['distractor_rank10']}: " + " | ".join(x["ranked"]))
        lines.append("")
    lines += ["## Steps (wall seconds; materialise 0 = the folder was already there; index: the build's time, "
              "\"index reused\" when this run re-queried it)", ""]
    rows = [[n, *[per[n]["steps"].get(k) for k in ("materialise_s", "verify_s")], per[n]["index_seconds"],
             per[n]["steps"].get("query_s"), _or_dash(per[n]["steps"].get("diagnose_s")),
             per[n]["index_reused"], len(per[n]["dropped_questions"])] for n in names]
    lines += table(["corpus", "materialise", "verify golden", "index", "query (4 calls per question)",
                    "diagnose (1 call per answerable, a deep search per miss)", "index reused", "questions dropped"],
                   list("lrrrrrlr"), rows)
    for n in names:
        for qid, why in per[n]["dropped_questions"].items():
            lines.append(f"- {n} {qid} dropped: {why}")
        errors = per[n]["document_errors"] or []
        if errors:
            reasons = sorted({f"{e['reason']}: {e['detail']}" if "reason" in e else str(e.get("message")) for e in errors})
            lines.append(f"- {n}: {len(errors)} documents failed to index ({'; '.join(reasons)[:300]}): "
                         f"{', '.join(e.get('key') or '?' for e in errors)}; questions on them (page or distractor "
                         f"page): {', '.join(per[n]['questions_on_failed_documents']) or 'none'}")
    return lines


def _loo_lines(res: dict[str, Any]) -> list[str]:
    loo, every = res["leave_one_corpus_out"], res["defaults_fitted_on_every_corpus"]
    lines = ["", "## Refusal, leave one corpus out", "",
             "Per held-out corpus: the weights (logistic regression on the other corpora's questions) and the "
             "calibration target (the share of answerable pseudo-questions a knowledge base's bias may refuse, chosen "
             f"so that no fit corpus refuses more than {FALSE_GOAL} of its answerable questions) fitted on the "
             "others; the held-out corpus's bias calibrated from its own pseudo-questions (`bench.heldout`).", ""]
    rows = []
    for held, e in loo.items():
        h = e["held_out"]
        rows.append([held, " + ".join(e["fitted_on"]), _w(e["weights"]), e["target"], h["bias"],
                     f"**{h['unanswerable_refused']}**", f"**{h['false_refusals']}**",
                     ", ".join(h["falsely_refused"]) or "-"])
    lines += table(["held-out corpus", "fitted on", "bias / coverage / lexical / dense (LR)", "target",
                    "calibrated bias", "unanswerable refused", "false refusals", "falsely refused"],
                   list("lllrrrrl"), rows)
    lines += ["", f"Fitted on the whole fit pool ({', '.join(every.get('fitted_on') or [])}; what the shipped defaults "
              f"would be if these were the only corpora): weights {_w(every['weights'])}, target "
              f"{every['target']}; on those corpora: " + "; ".join(
                  f"{n} bias {p['bias']}, refused {p['unanswerable_refused']}, false refusals {p['false_refusals']}"
                  for n, p in every["on_fit_set"].items()) + f". Shipped now: {_w(res['meta']['shipped_refusal_defaults'])}"
              f", target {res['meta'].get('shipped_target')}."]
    earlier = res.get("defaults_fitted_earlier")
    if earlier:
        lines += ["", f"The earlier report's fit over {', '.join(earlier.get('fitted_on') or [])}: weights "
                  f"{_w(earlier['weights'])}, target {earlier['target']}."]
    return lines


def _w(p: dict[str, float]) -> str:
    return " / ".join(str(p.get(k)) for k in REFUSAL_PARAMS)


def _shipped_target() -> float:
    from freshindex.settings.model import ContextSettings

    return ContextSettings().refusal_target_false_rate


def shipped_defaults() -> dict[str, float]:
    from freshindex.settings.model import ContextSettings

    c = ContextSettings()
    return {"bias": c.refusal_bias, "coverage_weight": c.refusal_coverage_weight,
            "lexical_weight": c.refusal_lexical_weight, "dense_weight": c.refusal_dense_weight}


def latest_rows(name: str, parts: dict[str, Any]) -> Path:
    """The newest kept answers of ``name`` when no index matches ``parts`` (a setting or version changed since they
    were asked); what differs is printed, and the report's ``index_parts`` say what they were asked at."""
    found = sorted(CACHE.glob(f"{name}-*/rows.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        return CACHE / f"{name}-none" / "rows.json"
    was = json.loads(found[-1].read_text())["index"].get("parts") or {}
    differ = sorted(k for k in parts if parts[k] != was.get(k))
    print(f"[{name}] no index matches the current parts; the newest answers ({found[-1].parent.name}) differ in "
          f"{', '.join(differ) or 'nothing'}", flush=True)
    return found[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", default=",".join(NAMES),
                        help="comma-separated corpora to run now; the others' last answers are read from their kept "
                             "index (rows.json) when present")
    parser.add_argument("--from-rows", action="store_true", help="rebuild the report from the kept answers only")
    parser.add_argument("--reindex", action="store_true", help="index again even when a kept index matches")
    parser.add_argument("--index-only", action="store_true",
                        help="build (or bring up to date) the corpora's indexes and stop: no question asked, no report")
    args = parser.parse_args()
    wanted = [n.strip() for n in args.corpora.split(",") if n.strip()]
    unknown = set(wanted) - set(NAMES)
    if unknown:
        raise SystemExit(f"unknown corpora {sorted(unknown)}; known: {', '.join(NAMES)}")
    from freshindex.models import build_embedder
    from freshindex.settings import load_settings

    def settings_for(data_dir: Path) -> Any:
        return load_settings(data_dir=data_dir)

    base = settings_for(CACHE)
    e = base.embedding
    embedder = build_embedder(e.provider, model=e.model, batch_size=e.batch_size, threads=e.threads)
    all_corpora = corpora()
    if args.index_only:
        for name in wanted:
            materialise(all_corpora[name])
            svc, _ = open_index(all_corpora[name], embedder, settings_for, args.reindex)
            svc.close()
        return
    raws: dict[str, dict[str, Any]] = {}
    for name in NAMES:
        corpus = all_corpora[name]
        if name in wanted and not args.from_rows:
            t0 = time.perf_counter()
            raws[name] = run_corpus(corpus, embedder, settings_for, args.reindex)
            print(f"[{name}] done in {time.perf_counter() - t0:.0f} s", flush=True)
            continue
        work = CACHE / f"{name}-{index_key(index_parts(base, embedder.model_id, corpus))}"
        kept = work / "rows.json"
        if not kept.is_file() and (args.from_rows or name not in wanted):
            kept = latest_rows(name, index_parts(base, embedder.model_id, corpus))
        if kept.is_file():
            raws[name] = json.loads(kept.read_text())
            print(f"[{name}] answers read from {kept} (asked at {raws[name]['commit']['head'][:10]})", flush=True)
        elif name in wanted:
            raise SystemExit(f"no kept answers for {name} in {work}: run without --from-rows")
    res = merge_earlier(report(raws, shipped_defaults(), sys.argv[1:]))
    for name, f in res["corpora"].items():
        print(f"[{name}] goals (held-out defaults): " + ", ".join(f"{k} {f[k]} {v}" for k, v in f["goals"].items()))
        print(f"[{name}] goals (refusal off): "
              + ", ".join(f"{k} {f['refusal_off'][k]} {v}" for k, v in f["refusal_off"]["goals"].items()))
    write("transfer", res, markdown(res))


if __name__ == "__main__":
    main()
