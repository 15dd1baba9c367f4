"""Evidence benchmark on a real corpus: the Django 3.2.25 documentation and its golden set.

The corpus is Debian's ``python-django-doc`` in two releases of the same
upstream version, ``3:3.2.25-0+deb12u3`` and ``3:3.2.25-0+deb12u7``
(``apt-get download``, ``dpkg-deb -x``, cached under
``~/.cache/freshindex-bench/django/``).  The HTML pages (``*.html`` under
``html/`` minus the generated ``genindex``, ``py-modindex`` and ``search``
pages) are copied to a folder source and indexed through the real pipeline
(``Services`` + ``sync_inline``, the ONNX MiniLM embedder, the embedded
default) in a temporary data directory.

The golden set (``bench/goldens/django/questions.jsonl``) is checked first
against the pages it cites: every passage is in its page's visible text
(update_only passages: in u7 and not in u3; distractor passages: not on
the near-duplicate pages named), every unanswerable question's key terms
are nowhere in the corpus.  Text is compared *normalised*: whitespace and
``|`` removed (the chunker renders table rows as Markdown, the page text
separates cells by spaces).

Then every question is asked through ``InjectionClient.retrieve`` (limit 5
for page hit@5 and passage@5, limit 10 for MRR@10), the u7 update is
applied (the changed pages copied over, a second sync) and the update_only
questions are asked again (they count after the update; before, their
passage must not be found).  The baselines run over the SAME chunks, read
back from the active collection (texts, payloads, dense vectors): dense
only (exact cosine top-k) and BM25 only (Okapi, k1=1.2, b=0.75, over the
chunks' lexical text tokenised by ``vectorstore.lexical.tokenize``).

Refusal: the client refuses when its packet is ``insufficient``.  For each
method the top score's AUROC between answerable and unanswerable questions
is reported, and a threshold fitted on the dev split (the most refusals of
unanswerable questions with at most 5 % false refusals on dev) is applied
to the test split.  The same is done for the candidate signals of a
calibrated refusal: top dense score, BM25 top score, lexical coverage of
the question's key terms in the top hybrid chunk (IDF-weighted), rank
agreement of the dense and BM25 top 5, the dense top-1/top-2 margin, and a
logistic combination of them fitted on dev.

    python -m bench.evidence [--limit-pages N] [--skip-update] [--verify-only]

Writes bench/results/evidence.json and .md.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from bench.report import table, write

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "bench" / "goldens" / "django" / "questions.jsonl"
CACHE = Path(os.environ.get("FRESHINDEX_BENCH_CACHE", Path.home() / ".cache" / "freshindex-bench")) / "django"
PACKAGE = "python-django-doc"
OLD, NEW = "3:3.2.25-0+deb12u3", "3:3.2.25-0+deb12u7"
SKIP_PAGES = {"genindex.html", "py-modindex.html", "search.html"}
KB = "django"
KINDS = ("prose", "table", "code", "config", "update_only", "distractor", "unanswerable")
MAX_FALSE_REFUSALS = 0.05


# -- corpus -------------------------------------------------------------------

def fetch(version: str) -> Path:
    """The ``html/`` folder of one release, downloaded and unpacked once."""
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / version.split("+")[-1]
    html = target / "usr" / "share" / "doc" / PACKAGE / "html"
    if not html.is_dir():
        deb = CACHE / f"{PACKAGE}_{version.replace(':', '%3a')}_all.deb"
        if not deb.exists():
            subprocess.run(["apt-get", "download", f"{PACKAGE}={version}"], cwd=CACHE, check=True,
                           capture_output=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
    return html


def pages(html: Path) -> dict[str, Path]:
    return {p.relative_to(html).as_posix(): p for p in sorted(html.rglob("*.html"))
            if p.relative_to(html).as_posix() not in SKIP_PAGES}


@functools.lru_cache(maxsize=4096)
def visible_text(path: Path) -> str:
    """A page's visible text (scripts, styles and head removed), whitespace collapsed."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(path.read_bytes(), "html.parser")
    for t in soup(["script", "style", "head"]):
        t.decompose()
    return re.sub(r"\s+", " ", soup.get_text(" ")).strip()


#: Sphinx's sidebar "Last update: <date>": it is the build date, on every page of a release.
_BUILD_DATE = re.compile(r"Last update: \w+ \d{1,2}, \d{4}")


def content_changed(old: Path, new: Path) -> bool:
    """Whether a page's visible text differs between releases, the build date left out."""
    return _BUILD_DATE.sub("", visible_text(old)) != _BUILD_DATE.sub("", visible_text(new))


def norm(text: str) -> str:
    """Whitespace and table pipes removed: a passage matches however the chunker laid the text out."""
    return re.sub(r"[\s|]+", "", text)


# -- golden set ---------------------------------------------------------------

def load_golden(path: Path = GOLDEN) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def verify_golden(items: list[dict[str, Any]], old: dict[str, Path], new: dict[str, Path]) -> list[str]:
    """Every problem with the golden set against the real pages (empty: all good)."""
    problems: list[str] = []
    cache: dict[tuple[str, str], str] = {}

    def text(which: str, key: str) -> str | None:
        tree = old if which == "old" else new
        if key not in tree:
            return None
        if (which, key) not in cache:
            cache[(which, key)] = norm(visible_text(tree[key]))
        return cache[(which, key)]

    corpus: str | None = None
    for it in items:
        if it["kind"] == "unanswerable":
            if corpus is None:
                corpus = "\n".join(visible_text(p) for p in new.values())
            for term in it["key_terms"]:
                flags = 0 if term.lower() != term else re.IGNORECASE
                if re.search(r"(?<![\w.])" + re.escape(term) + r"(?!\w)", corpus, flags):
                    problems.append(f"{it['id']}: key term {term!r} occurs in the corpus")
            continue
        passage = norm(it["passage"])
        in_old, in_new = text("old", it["page"]), text("new", it["page"])
        if it["kind"] == "update_only":
            if in_new is None or passage not in in_new:
                problems.append(f"{it['id']}: passage not in {it['page']} of {NEW}")
            if in_old is not None and passage in in_old:
                problems.append(f"{it['id']}: passage already in {it['page']} of {OLD}")
        elif in_old is None or passage not in in_old:
            problems.append(f"{it['id']}: passage not in {it['page']}")
        for other in it.get("distractor_pages", ()):
            t = text("old", other)
            if t is None:
                problems.append(f"{it['id']}: distractor page {other} does not exist")
            elif passage in t:
                problems.append(f"{it['id']}: passage also on distractor page {other}")
    return problems


# -- metrics ------------------------------------------------------------------

def auroc(pos: list[float], neg: list[float]) -> float | None:
    """P(score of an answerable question > score of an unanswerable one), ties half."""
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return round(wins / (len(pos) * len(neg)), 4)


def fit_threshold(answerable: list[float], unanswerable: list[float]) -> float:
    """The highest threshold (refuse below it) with at most 5 % false refusals of ``answerable``."""
    if not answerable:
        return -math.inf
    ordered = sorted(answerable)
    allowed = math.floor(MAX_FALSE_REFUSALS * len(ordered))
    return ordered[allowed]  # refuse when score < threshold: at most `allowed` answerable below it


def refusal_rates(threshold: float, answerable: list[float], unanswerable: list[float]) -> dict[str, Any]:
    return {
        "threshold": round(threshold, 4) if math.isfinite(threshold) else None,
        "unanswerable_refused": _rate(sum(s < threshold for s in unanswerable), len(unanswerable)),
        "false_refusals": _rate(sum(s < threshold for s in answerable), len(answerable)),
    }


def _rate(k: int, n: int) -> float | None:
    return round(k / n, 4) if n else None


def first_rank(keys: list[str], page: str) -> int | None:
    for i, k in enumerate(keys, 1):
        if k == page or k.endswith("/" + page):
            return i
    return None


# -- BM25 ---------------------------------------------------------------------

class BM25:
    """Okapi BM25 over token lists (k1=1.2, b=0.75, the Lucene-style IDF that stays positive)."""

    def __init__(self, docs: list[list[str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tf = [Counter(d) for d in docs]
        self.len = np.asarray([len(d) for d in docs], dtype=np.float64)
        self.avg = float(self.len.mean()) if len(docs) else 1.0
        df = Counter(t for d in self.tf for t in d)
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for i, d in enumerate(self.tf):
            for t, c in d.items():
                self.postings.setdefault(t, []).append((i, c))

    def scores(self, query: list[str]) -> np.ndarray:
        out = np.zeros(len(self.tf))
        for t in set(query):
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i, c in self.postings[t]:
                norm_len = 1 - self.b + self.b * self.len[i] / self.avg
                out[i] += idf * c * (self.k1 + 1) / (c + self.k1 * norm_len)
        return out


# -- the run ------------------------------------------------------------------

def _copy_pages(tree: dict[str, Path], keys: list[str], dest: Path) -> None:
    for key in keys:
        target = dest / key
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree[key], target)


def _read_chunks(svc: Any) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Every point of the active collection: payloads and unit dense vectors."""
    collection = svc.store.get_alias(svc.naming.alias(KB))
    ids = list(svc.store.iter_ids(collection))
    payloads, vectors = [], []
    for i in range(0, len(ids), 500):
        for rec in svc.store.retrieve(collection, ids[i:i + 500], with_vectors=True):
            payloads.append(rec.payload)
            vectors.append(np.asarray(rec.vector, dtype=np.float32))
    mat = np.vstack(vectors)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True) + 1e-12
    return payloads, mat


def _chunk_tokens(payload: dict[str, Any]) -> list[str]:
    from freshindex.vectorstore import lexical

    try:
        text = lexical.lexical_text(text=payload.get("text") or "", title=payload.get("title"),
                                    heading_path=payload.get("heading_path") or (), key=payload.get("key") or "",
                                    meta=payload.get("meta"))
    except TypeError:  # the signature moved under us: the chunk's own text is enough for a baseline
        text = payload.get("text") or ""
    return lexical.tokenize(text)


def _judge(keys: list[str], texts: list[str], item: dict[str, Any]) -> dict[str, Any]:
    """hit@5, passage@5 and reciprocal rank@10 of one ranked list (keys/texts of up to 10 results)."""
    if item["kind"] == "unanswerable":
        return {}
    page, passage = item["page"], norm(item["passage"])
    rank = first_rank(keys[:10], page)
    return {
        "hit5": rank is not None and rank <= 5,
        "passage5": any(passage in norm(t) for t in texts[:5]),
        "rr10": 1.0 / rank if rank else 0.0,
    }


class Bench:
    def __init__(self, svc: Any) -> None:
        self.svc = svc
        self.payloads, self.vectors = _read_chunks(svc)
        self.keys = [p.get("key", "") for p in self.payloads]
        self.texts = [p.get("text", "") for p in self.payloads]
        self.bm25 = BM25([_chunk_tokens(p) for p in self.payloads])
        self.decisions: list[tuple[Any, Any]] = []
        client = svc.client
        from freshindex.injection.observer import Observers, QueryObserver

        heard = self.decisions

        class Capture(QueryObserver):
            def decided(self, kb: str, reason: Any, signals: Any) -> None:
                heard.append((reason, signals))

        client.observer = Observers(client.observer, Capture())  # the service's metrics still hear it

    def ask(self, item: dict[str, Any]) -> dict[str, dict[str, Any]]:
        from freshindex.vectorstore import lexical

        q = item["question"]
        out: dict[str, dict[str, Any]] = {}
        # hybrid: the client as an application calls it
        self.decisions.clear()
        p5 = self.svc.client.retrieve(q, kb=KB, limit=5)
        reason, sig = self.decisions[-1] if self.decisions else (None, None)
        p10 = self.svc.client.retrieve(q, kb=KB, limit=10)
        ev5, ev10 = list(p5.evidence), list(p10.evidence)
        judged = _judge([e.key for e in ev10], [e.text for e in ev5], item)
        if judged:  # hit@5 from the limit-5 packet itself (the limit-10 one only gives the rank for MRR@10)
            judged["hit5"] = first_rank([e.key for e in ev5], item["page"]) is not None
        top = ev5[0].score if ev5 else None
        out["client"] = {"reason": str(reason) if reason is not None else None, "why": p5.reason,
                         **(sig.as_dict() if sig is not None else {"coverage": 0.0, "lexical": 0.0, "dense": 0.0})}
        out["hybrid"] = {**judged, "refused": p5.insufficient, "top": top,
                         "keys": [e.key for e in ev5], "top_text": ev5[0].text if ev5 else ""}
        # the baselines over the same chunks
        qv = np.asarray(self.svc.embedder.embed([q])[0], dtype=np.float32)
        qv /= np.linalg.norm(qv) + 1e-12
        dense = self.vectors @ qv
        d_order = np.argsort(-dense)[:10]
        out["dense"] = {**_judge([self.keys[i] for i in d_order], [self.texts[i] for i in d_order], item),
                        "top": float(dense[d_order[0]]), "second": float(dense[d_order[1]]),
                        "keys": [self.keys[i] for i in d_order[:5]]}
        qt = lexical.tokenize(q)
        bm = self.bm25.scores(qt)
        b_order = np.argsort(-bm)[:10]
        out["bm25"] = {**_judge([self.keys[i] for i in b_order], [self.texts[i] for i in b_order], item),
                       "top": float(bm[b_order[0]]), "keys": [self.keys[i] for i in b_order[:5]]}
        # candidate refusal signals
        terms = set(qt)
        top_text = out["hybrid"]["top_text"] or self.texts[d_order[0]]
        have = set(lexical.tokenize(top_text))
        weight = {t: self.bm25.idf.get(t, max(self.bm25.idf.values(), default=1.0)) for t in terms}
        total = sum(weight.values())
        out["signals"] = {
            "dense_top": out["dense"]["top"],
            "bm25_top": out["bm25"]["top"],
            "coverage_top_chunk": round(sum(w for t, w in weight.items() if t in have) / total, 4) if total else 0.0,
            "rank_agreement_top5": len(set(d_order[:5].tolist()) & set(b_order[:5].tolist())) / 5,
            "dense_margin": out["dense"]["top"] - out["dense"]["second"],
        }
        out["hybrid"].pop("top_text")
        return out


def summarise(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    """Per kind and overall: hit@5, passage@5, MRR@10 (answerable only)."""
    def agg(sel: list[dict[str, Any]]) -> dict[str, Any]:
        sel = [r for r in sel if r["kind"] != "unanswerable"]
        if not sel:
            return {}
        return {"n": len(sel),
                "hit5": round(float(np.mean([r[method]["hit5"] for r in sel])), 4),
                "passage5": round(float(np.mean([r[method]["passage5"] for r in sel])), 4),
                "mrr10": round(float(np.mean([r[method]["rr10"] for r in sel])), 4)}
    out = {"all": agg(rows)}
    for kind in KINDS:
        if kind != "unanswerable":
            out[kind] = agg([r for r in rows if r["kind"] == kind])
    return out


def refusal(rows: list[dict[str, Any]], score) -> dict[str, Any]:
    """AUROC over all questions; a threshold fitted on dev, rates on test."""
    def split(which: str | None) -> tuple[list[float], list[float]]:
        sel = [r for r in rows if which is None or r["split"] == which]
        pos = [score(r) for r in sel if r["kind"] != "unanswerable"]
        neg = [score(r) for r in sel if r["kind"] == "unanswerable"]
        return pos, neg
    pos, neg = split(None)
    dev_pos, dev_neg = split("dev")
    test_pos, test_neg = split("test")
    threshold = fit_threshold(dev_pos, dev_neg)
    return {"auroc": auroc(pos, neg), "test": refusal_rates(threshold, test_pos, test_neg),
            "dev": refusal_rates(threshold, dev_pos, dev_neg)}


def _logistic(rows: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """Logistic regression on the standardised signals, fitted on dev, scored on every row."""
    dev = [r for r in rows if r["split"] == "dev"]
    x = np.asarray([[r["signals"][n] for n in names] for r in dev], dtype=np.float64)
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-9
    y = np.asarray([r["kind"] != "unanswerable" for r in dev], dtype=np.float64)
    w, b = np.zeros(len(names)), 0.0
    z = (x - mu) / sd
    for _ in range(3000):  # plain gradient descent with a little L2: a handful of features, ~30 rows
        p = 1 / (1 + np.exp(-(z @ w + b)))
        w -= 0.1 * (z.T @ (p - y) / len(y) + 0.01 * w)
        b -= 0.1 * float(np.mean(p - y))
    for r in rows:
        v = (np.asarray([r["signals"][n] for n in names]) - mu) / sd
        r["signals"]["logistic"] = float(1 / (1 + np.exp(-(v @ w + b))))
    return {"features": names, "weights": [round(float(v), 4) for v in w], "bias": round(b, 4)}


#: The client's refusal signals (injection.refusal.Signals) the fitted decision combines; dense is left out
#: (its scale belongs to the embedding model, so a fit on MiniLM would not carry over to another one).
CLIENT_SIGNALS = ("coverage", "lexical")


def fit_client_refusal(rows: list[dict[str, Any]], names: tuple[str, ...] = CLIENT_SIGNALS) -> dict[str, Any]:
    """The client's refusal parameters (``settings.context.refusal_*``), fitted on the dev split.

    Logistic regression (L2, standardised signals) on dev; then its decision
    value is shifted so that at most 5 % of dev's answerable questions fall
    below zero (the refusal side), halfway to the next answerable one so the
    margin is not zero; the result is written back as ``bias + weights .
    signals`` over the raw signals, which is what the client evaluates.
    """
    dev = [r for r in rows if r["split"] == "dev" and "client" in r]
    x = np.asarray([[r["client"][n] for n in names] for r in dev], dtype=np.float64)
    y = np.asarray([r["kind"] != "unanswerable" for r in dev], dtype=np.float64)
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = (x - mu) / sd
    w, b = np.zeros(len(names)), 0.0
    for _ in range(5000):
        p = 1 / (1 + np.exp(-(z @ w + b)))
        w -= 0.1 * (z.T @ (p - y) / len(y) + 0.02 * w)
        b -= 0.1 * float(np.mean(p - y))
    raw_w = w / sd
    raw_b = b - float(np.sum(w * mu / sd))
    value = x @ raw_w + raw_b
    pos = np.sort(value[y == 1])
    allowed = math.floor(MAX_FALSE_REFUSALS * len(pos))
    neg = value[y == 0]
    below = neg[neg < pos[allowed]]  # the unanswerable ones a cut under pos[allowed] can refuse
    if len(below):  # halfway between the strongest of them and the next answerable above it: a margin both ways
        top = float(below.max())
        cut = (top + float(pos[pos > top].min())) / 2
    else:
        cut = float(pos[0]) - 1e-3
    params = {"bias": round(raw_b - cut, 4), **{f"{n}_weight": round(float(v), 4) for n, v in zip(names, raw_w, strict=True)}}
    return {"params": params, "features": list(names)}


def client_decisions(rows: list[dict[str, Any]], params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Refusal rates per split: the client's own decisions, or those ``params`` would take on its signals."""
    def refused(r: dict[str, Any]) -> bool:
        if params is None:
            return bool(r["hybrid"]["refused"])
        c = r["client"]
        if c.get("reason") in ("no_evidence", "no_snapshot"):
            return True
        return params["bias"] + sum(params.get(f"{n}_weight", 0.0) * c[n] for n in ("coverage", "lexical", "dense")) < 0

    out = {}
    for split in ("dev", "test", None):
        sel = [r for r in rows if split is None or r["split"] == split]
        un = [r for r in sel if r["kind"] == "unanswerable"]
        an = [r for r in sel if r["kind"] != "unanswerable"]
        out[split or "all"] = {"unanswerable_refused": _rate(sum(map(refused, un)), len(un)),
                               "false_refusals": _rate(sum(map(refused, an)), len(an)), "n": len(sel),
                               "false_refused_ids": [r["id"] for r in an if refused(r)]}
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    items = load_golden()
    old_html, new_html = fetch(OLD), fetch(NEW)
    old, new = pages(old_html), pages(new_html)
    problems = verify_golden(items, old, new)
    if problems:
        raise SystemExit("golden set does not match the corpus:\n  " + "\n  ".join(problems))
    print(f"golden set verified: {len(items)} questions against {len(old)} pages")
    if args.verify_only:
        return {}
    cited = {it["page"] for it in items if it.get("page")} | {p for it in items for p in it.get("distractor_pages", ())}
    keys = sorted(old)
    if args.limit_pages:
        rest = [k for k in keys if k not in cited]
        keys = sorted(cited & set(old) | set(rest[:max(0, args.limit_pages - len(cited))]))
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="fi-evidence-"))
    state_file = work / "state.json"
    state = {"pages": keys, "lexical": _lexical_version(), "pipeline": _pipeline_version()}
    kept = json.loads(state_file.read_text()) if args.work and state_file.exists() else {}
    reused = kept.get("state") == state
    try:
        src = work / "docs"
        if not reused:
            shutil.rmtree(work, ignore_errors=True)
            _copy_pages(old, keys, src)
        svc = Services(load_settings(data_dir=work / "data"))
        if not reused:
            svc.registry.add_source(KB, kind="folder", location=str(src), owner="bench", kb=KB)
        svc.embedder.embed(["warm up"])
        t0 = time.perf_counter()
        first = sync_inline(svc, KB) if not reused else None
        sync_s = time.perf_counter() - t0 if not reused else kept["sync_s"]
        embedded = first.run.summary.get("chunks_embedded") if first is not None else kept["embedded"]
        if args.work and not reused:  # kept before the update: a later run applies it if this one does not
            kept = {"state": state, "sync_s": sync_s, "embedded": embedded, "update": None}
            state_file.write_text(json.dumps(kept))
        bench = Bench(svc)
        print(f"indexed {len(keys)} pages, {len(bench.payloads)} chunks in {sync_s:.0f} s")
        rows: list[dict[str, Any]] = []
        before_update: dict[str, dict[str, Any]] = {}
        for it in items:
            res = bench.ask(it)
            if it["kind"] == "update_only":
                before_update[it["id"]] = res
            rows.append({"id": it["id"], "kind": it["kind"], "split": it["split"], **res})
        update: dict[str, Any] = {"skipped": True}
        if kept.get("update"):  # the kept index is already at u7: update_only questions were asked after it
            update = kept["update"]
            before_update = {}
        elif not args.skip_update:
            changed = [k for k in keys if k in new and content_changed(old[k], new[k])]
            _copy_pages(new, keys, src)  # every page of the release (the bytes of all of them changed)
            t1 = time.perf_counter()
            second = sync_inline(svc, KB)
            update = {"skipped": False, "pages_with_changed_text": changed, "sync_s": round(time.perf_counter() - t1, 1),
                      "chunks_embedded": second.run.summary.get("chunks_embedded"),
                      "documents": second.run.summary.get("documents")}
            bench = Bench(svc)
            for r in rows:
                if r["kind"] == "update_only":
                    it = next(i for i in items if i["id"] == r["id"])
                    r.update(bench.ask(it))
            if args.work:
                state_file.write_text(json.dumps({**kept, "update": update}))
        svc.close()
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    raw = {"rows": rows, "update": update, "before_update": before_update, "pages": len(keys),
           "chunks": len(bench.payloads), "sync_s": sync_s, "reused_index": reused,
           "first_chunks_embedded": embedded, "load": _load()}
    (CACHE / "evidence-rows.json").write_text(json.dumps(raw, default=str))  # --from-rows rebuilds the report
    return report(args, raw)


def report(args: argparse.Namespace, raw: dict[str, Any]) -> dict[str, Any]:
    rows, update, before_update = raw["rows"], raw["update"], raw["before_update"]
    if args.skip_update:
        rows = [r for r in rows if r["kind"] != "update_only"]
    signals = ["dense_top", "bm25_top", "coverage_top_chunk", "rank_agreement_top5", "dense_margin"]
    logistic = _logistic(rows, signals)
    methods = {m: summarise(rows, m) for m in ("hybrid", "dense", "bm25")}
    unans = [r for r in rows if r["kind"] == "unanswerable"]
    answ = [r for r in rows if r["kind"] != "unanswerable"]
    client_refusal = {
        "unanswerable_refused": _rate(sum(r["hybrid"]["refused"] for r in unans), len(unans)),
        "false_refusals": _rate(sum(r["hybrid"]["refused"] for r in answ), len(answ)),
        "by_split": client_decisions(rows),
    }
    with_client = [r for r in rows if "client" in r]
    client_fit = fit_client_refusal(with_client) if with_client else None
    if client_fit:
        client_fit["rates"] = client_decisions(with_client, client_fit["params"])
        for name in CLIENT_SIGNALS:
            client_fit.setdefault("auroc", {})[name] = auroc(
                [r["client"][name] for r in with_client if r["kind"] != "unanswerable"],
                [r["client"][name] for r in with_client if r["kind"] == "unanswerable"])
    refusals = {
        "hybrid": refusal(rows, lambda r: r["hybrid"]["top"] if r["hybrid"]["top"] is not None else -1.0),
        "dense": refusal(rows, lambda r: r["dense"]["top"]),
        "bm25": refusal(rows, lambda r: r["bm25"]["top"]),
    }
    by_signal = {s: refusal(rows, lambda r, s=s: r["signals"][s]) for s in [*signals, "logistic"]}
    before = {k: {"hit5": v["hybrid"].get("hit5"), "passage5": v["hybrid"].get("passage5")}
              for k, v in before_update.items()}
    return {"meta": _meta(args, raw["pages"], raw["chunks"], raw["sync_s"], raw["first_chunks_embedded"],
                          raw.get("load")),
            "methods": methods, "client_refusal": client_refusal, "client_fit": client_fit, "refusal": refusals, "signals": by_signal,
            "logistic": logistic, "update": update, "update_only_before_update": before, "rows": rows}


def _lexical_version() -> str:
    from freshindex.vectorstore.lexical import LEXICAL_VERSION

    return LEXICAL_VERSION


def _pipeline_version() -> str:
    """Parser set and chunker versions: a kept index chunked by another version is rebuilt."""
    from freshindex.workers.pipeline import PIPELINE_VERSION

    return PIPELINE_VERSION


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _meta(args: argparse.Namespace, n_pages: int, n_chunks: int, sync_s: float, embedded: Any,
          load: list[float] | None) -> dict[str, Any]:
    return {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "cores": os.cpu_count(),
            "load_avg_1_5_15": load, "python": platform.python_version(),
            "corpus": f"{PACKAGE} {OLD} -> {NEW}", "pages": n_pages, "chunks": n_chunks,
            "first_sync_s": round(sync_s, 1), "first_sync_chunks_embedded": embedded,
            "limit_pages": args.limit_pages, "skip_update": args.skip_update,
            "embedding_model": "all-MiniLM-L6-v2-onnx-int8", "store": "qdrant-edge (embedded)",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def markdown(res: dict[str, Any], command: str) -> list[str]:
    m = res["meta"]
    lines = ["# Evidence benchmark (Django 3.2.25 docs, golden set)", "",
             f"`{command}` on {m['cores']} cores (load {m['load_avg_1_5_15']}), {m['embedding_model']}, {m['store']}; "
             f"{m['pages']} pages, {m['chunks']} chunks, first sync {m['first_sync_s']} s. Corpus: {m['corpus']}.", "",
             "The machine was shared with other sessions' tests and benchmarks (the load above): the sync times "
             "are not comparable across runs; the quality figures do not depend on load.", "",
             "## Retrieval (answerable questions; update_only asked after the update)", ""]
    rows = []
    for kind in ("all", *(k for k in KINDS if k != "unanswerable")):
        for method in ("hybrid", "dense", "bm25"):
            s = res["methods"][method].get(kind) or {}
            if s:
                rows.append([kind, method, s["n"], s["hit5"], s["passage5"], s["mrr10"]])
    lines += table(["kind", "method", "n", "page hit@5", "passage@5", "MRR@10"], list("llrrrr"), rows)
    cr = res["client_refusal"]
    lines += ["", "## Refusal", "",
              f"The client (`InjectionClient.retrieve`, `insufficient`): unanswerable refused "
              f"{cr['unanswerable_refused']}, false refusals {cr['false_refusals']} (all questions).", "",
              *_client_refusal_lines(res), "",
              "Top score per method and candidate signals: AUROC (answerable vs unanswerable, all questions); "
              "threshold fitted on dev (<= 5 % false refusals), rates on test.", ""]
    rows = []
    for name, r in list(res["refusal"].items()) + list(res["signals"].items()):
        rows.append([name, r["auroc"], r["test"]["threshold"], r["test"]["unanswerable_refused"],
                     r["test"]["false_refusals"]])
    lines += table(["score", "AUROC", "threshold (dev)", "test: unanswerable refused", "test: false refusals"],
                   list("lrrrr"), rows)
    up = res["update"]
    if not up.get("skipped"):
        lines += ["", "## Update u3 -> u7", "",
                  f"Pages whose visible text changed: {len(up['pages_with_changed_text'])} "
                  f"({', '.join(up['pages_with_changed_text'])}); the re-sync embedded {up['chunks_embedded']} chunks "
                  f"in {up['sync_s']} s. Before the update the update_only passages were found "
                  f"{sum(bool(v['passage5']) for v in res['update_only_before_update'].values())}/"
                  f"{len(res['update_only_before_update'])} times (expected 0)."]
    return lines


def _client_refusal_lines(res: dict[str, Any]) -> list[str]:
    """The client's own refusals per split, and the parameters the dev split fits (shipped in settings)."""
    by = res["client_refusal"].get("by_split") or {}
    rows = [[split, v["n"], v["unanswerable_refused"], v["false_refusals"], ", ".join(v["false_refused_ids"]) or "-"]
            for split, v in by.items()]
    lines = table(["split", "questions", "unanswerable refused", "false refusals", "falsely refused"], list("lrrrl"),
                  rows) if rows else []
    fit = res.get("client_fit")
    if fit:
        lines += ["", "Signals (`injection.refusal`) AUROC: "
                  + ", ".join(f"{k} {v}" for k, v in fit["auroc"].items())
                  + f". Logistic fit on dev of {', '.join(fit['features'])} -> `settings.context.refusal_*` "
                  f"{json.dumps(fit['params'])}; with those, test: unanswerable refused "
                  f"{fit['rates']['test']['unanswerable_refused']}, false refusals {fit['rates']['test']['false_refusals']}."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit-pages", type=int, default=0, help="index only N pages (the cited ones first)")
    parser.add_argument("--skip-update", action="store_true", help="do not apply the u7 update")
    parser.add_argument("--verify-only", action="store_true", help="only check the golden set against the pages")
    parser.add_argument("--work", default="",
                        help="keep the indexed data here and reuse it on the next run with the same pages "
                             "(for iterating on retrieval; the kept index is after the update)")
    parser.add_argument("--from-rows", action="store_true",
                        help="rebuild the report from the last run's answers (cached evidence-rows.json)")
    args = parser.parse_args()
    res = report(args, json.loads((CACHE / "evidence-rows.json").read_text())) if args.from_rows else run(args)
    if not res:
        return
    command = "python -m bench.evidence" + (f" --limit-pages {args.limit_pages}" if args.limit_pages else "") + (
        " --skip-update" if args.skip_update else "")
    write("evidence", res, markdown(res, command))


if __name__ == "__main__":
    main()
