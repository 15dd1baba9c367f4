"""Real-corpus speed: freshindex against a naive pipeline, full build and release update.

Two real release pairs, in one invocation on the same machine:

* **django**: Debian's ``python-django-doc`` ``3:3.2.25-0+deb12u3`` then
  ``3:3.2.25-0+deb12u7`` (the HTML pages, fetched and filtered as
  :mod:`bench.evidence` does, by importing its ``fetch``/``pages``).
  ``--limit-pages N`` keeps N pages present in both releases, evenly spaced
  over the sorted page list (deterministic); 0 keeps all of them.
* **code** (``--corpus code`` runs both pairs, ``--corpus requests`` or
  ``--corpus markupsafe`` one): PyPI sdists, URL and sha256 pinned from PyPI's
  simple index, cached under ``~/.cache/freshindex-bench/pypi/``; the Python
  files of each sdist are the corpus.

  - **requests** 2.31.0 -> 2.32.0: 2.32.0 moved the package ``requests/`` to
    ``src/requests/`` (19 of 33 files at a new path) while most of its code
    stayed the same (82 of about 660 symbols changed or new): the release pair
    that shows whether a move re-embeds only what changed.  2.32.0 was later
    yanked for an unrelated certificate-handling regression; its sdist stays
    on PyPI and is the release that made the move.
  - **MarkupSafe** 1.0 -> 1.1.0: also moved ``markupsafe/`` to
    ``src/markupsafe/`` (and ``tests.py`` to ``tests/``), but rewrote most of
    its code in the same release.

Each side runs in its own child process (peak RSS from ``os.wait4``):

* **naive**: the pipeline a LangChain user writes: the page text
  (BeautifulSoup ``get_text``; code read as text), a recursive character
  splitter (1,000 characters, no overlap, separators ``\\n\\n``, ``\\n``,
  space, character), the same ONNX MiniLM file through a plain onnxruntime
  session with default options, **one text per run**, vectors in a dict keyed
  like LangChain's record manager (hash of source path + chunk text).  Its
  update re-reads every file and embeds the chunks whose key it has not seen
  (``index(..., cleanup="incremental")`` at its best); the chunks of every
  file whose bytes changed (its ``cleanup=None`` default, re-embedding
  changed files) are counted too.
* **freshindex**: ``Services`` + ``sync_inline``, the embedded default
  (SQLite registry, Qdrant Edge), a temporary data directory, the model
  warmed up before timing.  Full build, three no-op re-syncs (median), then
  the new release mirrored into the source folder (only files whose bytes
  differ are written, vanished ones deleted; ``sync.max_deletion_share=1``
  because a release that moves its files is a deliberate deletion) and the
  update sync.

freshindex runs once per embedder variant (``--variant``, in order; the
last one is held to the goals): ``fresh`` (the defaults: runs cut by token
length, at most 256 padded tokens, one run per core at once),
``legacy`` (the batching before: 32 texts a run however long)
and ``one-per-run``: the before/after of the embedder in one invocation.

Then, untimed, freshindex's own parser and chunker are run over both
releases to count the chunks whose text truly changed (a multiset diff of
chunk texts; the goal ratio divides by the distinct ones, since a text that
occurs twice is embedded once) and to give a reason for every embed beyond
those, and the files at a new path (and how many of them moved byte for
byte); for a code pair, the changed symbols (a symbol, keyed by its file path without a
leading ``src/`` and its qualified name, changed when its parts' text
differs or it is new).

    python -m bench.realcorpus [--limit-pages 150] [--corpus django --corpus code|requests|markupsafe]
        [--variant legacy --variant fresh] [--name realcorpus]

Writes bench/results/realcorpus.json and .md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("FRESHINDEX_BENCH_CACHE", Path.home() / ".cache" / "freshindex-bench"))
_PYPI = "https://files.pythonhosted.org/packages/"
#: Code release pairs (old, new): each an sdist's URL and sha256, as PyPI's simple index lists them.
#: Both releases moved their package under ``src/``.
CODE_PAIRS: dict[str, dict[str, Any]] = {
    "requests": {"label": "requests 2.31.0 -> 2.32.0 (*.py)", "releases": (
        (_PYPI + "9d/be/10918a2eac4ae9f02f6cfe6414b7a155ccd8f7f9d4380d62fd5b955065c3/requests-2.31.0.tar.gz",
         "942c5a758f98d790eaed1a29cb6eefc7ffb0d1cf7af05c3d2791656dbd6ad1e1"),
        (_PYPI + "28/a2/423f4d16d6934ef502f10ad56673719dd4345e656aedbd6687ccc359ffc5/requests-2.32.0.tar.gz",
         "fa5490319474c82ef1d2c9bc459d3652e3ae4ef4c4ebdd18a21145a47ca4b6b8"),
    )},
    "markupsafe": {"label": "MarkupSafe 1.0 -> 1.1.0 (*.py)", "releases": (
        (_PYPI + "4d/de/32d741db316d8fdb7680822dd37001ef7a448255de9699ab4bfcbdf4172b/MarkupSafe-1.0.tar.gz",
         "a6be69091dac236ea9c6bc7d012beab42010fa914c459791d627dad4910eb665"),
        (_PYPI + "ac/7e/1b4c2e05809a4414ebce0892fe1e32c14ace86ca7d50c70f00979ca9b3a3/MarkupSafe-1.1.0.tar.gz",
         "4e97332c9ce444b0c2c38dd22ddc61c743eb208d916e4265a2a3b575bdccb1d3"),
    )},
}
NAIVE_CHUNK_CHARS = 1000
GOALS = {"full_build_wall_ratio": 0.75, "update_over_truly_changed": 1.1, "update_over_naive": 0.5,
         "code_update_over_changed_symbols": 1.3, "noop_over_full": 0.02, "peak_rss_mb": 1024}


# -- corpora ------------------------------------------------------------------

def django_trees(limit: int) -> tuple[dict[str, Path], dict[str, Path]]:
    """(old, new) page maps of the Django manual, ``limit`` pages present in both (0: all pages)."""
    from bench.evidence import NEW, OLD, fetch, pages

    old, new = pages(fetch(OLD)), pages(fetch(NEW))
    common = sorted(set(old) & set(new))
    if limit and limit < len(common):
        step = len(common) / limit
        common = [common[int(i * step)] for i in range(limit)]
    return {k: old[k] for k in common}, {k: new[k] for k in common}


#: PostgreSQL 15's HTML manual (DocBook XSL), the two releases bookworm carries: 1,167 and 1,169 pages.
POSTGRES_DOC = ("postgresql-doc-15", "15.18-0+deb12u1", "15.20-0+deb12u1")


def _debian_html(package: str, version: str) -> Path:
    """The ``html/`` folder of ``package=version`` (``apt-get download``), unpacked once under the cache."""
    base = CACHE / package
    base.mkdir(parents=True, exist_ok=True)
    target = base / version
    html = target / "usr" / "share" / "doc" / package / "html"
    if not html.is_dir():
        deb = base / f"{package}_{version.replace(':', '%3a')}_all.deb"
        if not deb.exists():
            subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=base, check=True, capture_output=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
    return html


def postgres_trees(limit: int) -> tuple[dict[str, Path], dict[str, Path]]:
    """(old, new) page maps of PostgreSQL 15's manual: every page of each release (0: no limit),
    or ``limit`` pages present in both."""
    package, old_v, new_v = POSTGRES_DOC
    maps = []
    for version in (old_v, new_v):
        html = _debian_html(package, version)
        maps.append({p.relative_to(html).as_posix(): p for p in sorted(html.rglob("*.html"))})
    old, new = maps
    if limit:
        common = sorted(set(old) & set(new))
        if limit < len(common):
            step = len(common) / limit
            common = [common[int(i * step)] for i in range(limit)]
        return {k: old[k] for k in common}, {k: new[k] for k in common}
    return old, new


def _sdist(url: str, sha256: str) -> Path:
    """The unpacked sdist at ``url``, downloaded once and checked against its pinned sha256."""
    base = CACHE / "pypi"
    base.mkdir(parents=True, exist_ok=True)
    name = url.rsplit("/", 1)[1]
    target = base / name.removesuffix(".tar.gz")
    if not target.is_dir():
        archive = base / name
        if not archive.exists():
            with urllib.request.urlopen(url, timeout=60) as resp:
                archive.write_bytes(resp.read())
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != sha256:
            archive.unlink()
            raise SystemExit(f"{name}: sha256 {digest}, expected {sha256}")
        with tarfile.open(archive) as tar:
            tar.extractall(base, filter="data")
    return target


def code_trees(pair: str = "requests") -> tuple[dict[str, Path], dict[str, Path]]:
    """(old, new) Python files of one :data:`CODE_PAIRS` release pair, keyed by their path in the sdist."""
    def py(root: Path) -> dict[str, Path]:
        return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*.py"))}

    old, new = CODE_PAIRS[pair]["releases"]
    return py(_sdist(*old)), py(_sdist(*new))


def materialise(tree: dict[str, Path], dest: Path) -> None:
    """Make ``dest`` hold exactly ``tree``: write files whose bytes differ, delete the rest (rsync -c)."""
    dest.mkdir(parents=True, exist_ok=True)
    for existing in [p for p in dest.rglob("*") if p.is_file()]:
        if existing.relative_to(dest).as_posix() not in tree:
            existing.unlink()
    for key, src in tree.items():
        target = dest / key
        data = src.read_bytes()
        if target.exists() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


# -- the naive pipeline ----------------------------------------------------------

def split_recursive(text: str, size: int = NAIVE_CHUNK_CHARS,
                    separators: tuple[str, ...] = ("\n\n", "\n", " ", "")) -> list[str]:
    """LangChain's RecursiveCharacterTextSplitter with ``chunk_overlap=0``: pieces merged up to ``size``."""
    sep = separators[-1]
    rest: tuple[str, ...] = ()
    for i, s in enumerate(separators):
        if s == "" or s in text:
            sep, rest = s, separators[i + 1:]
            break
    parts = list(text) if sep == "" else text.split(sep)
    out: list[str] = []
    current: list[str] = []
    length = 0

    def flush() -> None:
        nonlocal current, length
        if current:
            joined = sep.join(current).strip()
            if joined:
                out.append(joined)
        current, length = [], 0

    for part in parts:
        if not part:
            continue
        if len(part) > size:
            flush()
            out.extend(split_recursive(part, size, rest) if rest else [part[:size]])
            continue
        extra = len(part) + (len(sep) if current else 0)
        if length + extra > size:
            flush()
            extra = len(part)
        current.append(part)
        length += extra
    flush()
    return out


def naive_text(key: str, data: bytes) -> str:
    """What a LangChain loader hands the splitter: the page's text, or the file as text."""
    if key.endswith(".html"):
        from bs4 import BeautifulSoup

        return BeautifulSoup(data, "html.parser").get_text()
    return data.decode("utf-8", errors="replace")


class NaiveEmbedder:
    """The MiniLM ONNX file in a default onnxruntime session: one text per run, mean pooling, L2."""

    def __init__(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from freshindex.models.onnx import MAX_TOKENS, _files

        model, tok = _files()
        self.tokenizer = Tokenizer.from_file(str(tok))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        self.model_s = 0.0  # seconds inside onnxruntime
        self.tokens = 0  # tokens the model saw (after the cut at MAX_TOKENS)
        self.cut = 0  # texts longer than the model's limit, silently cut

    def embed_one(self, text: str) -> Any:
        import numpy as np

        enc = self.tokenizer.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        mask = np.array([enc.attention_mask], dtype=np.int64)
        self.tokens += len(enc.ids)
        self.cut += bool(enc.overflowing)
        t0 = time.perf_counter()
        hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask,
                                         "token_type_ids": np.zeros_like(ids)})[0]
        self.model_s += time.perf_counter() - t0
        pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum()
        return (pooled / np.linalg.norm(pooled))[0].astype(np.float32)


def run_naive(old: Path, new: Path) -> dict[str, Any]:
    """Full build of ``old``, a no-op re-index, then the update to ``new``."""
    model = NaiveEmbedder()
    model.embed_one("warm up the model")
    store: dict[str, Any] = {}  # record-manager key -> vector
    file_hashes: dict[str, str] = {}

    def index(root: Path) -> dict[str, Any]:
        started = time.perf_counter()
        model_s, tokens, cut = model.model_s, model.tokens, model.cut
        embedded = chunks = changed_file_chunks = 0
        seen: set[str] = set()
        hashes: dict[str, str] = {}
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            key = path.relative_to(root).as_posix()
            data = path.read_bytes()
            hashes[key] = hashlib.sha256(data).hexdigest()
            pieces = split_recursive(naive_text(key, data))
            chunks += len(pieces)
            if file_hashes.get(key) != hashes[key]:
                changed_file_chunks += len(pieces)
            for piece in pieces:
                rk = hashlib.sha256(f"{key}\x00{piece}".encode()).hexdigest()
                seen.add(rk)
                if rk not in store:
                    store[rk] = model.embed_one(piece)
                    embedded += 1
        for rk in [k for k in store if k not in seen]:  # cleanup="incremental"
            del store[rk]
        file_hashes.clear()
        file_hashes.update(hashes)
        return {"wall_s": round(time.perf_counter() - started, 3), "chunks": chunks, "embedded": embedded,
                "changed_file_chunks": changed_file_chunks, "embed_s": round(model.model_s - model_s, 3),
                "tokens": model.tokens - tokens, "cut_texts": model.cut - cut}

    full = index(old)
    print(f"naive: full build {full['wall_s']} s", file=sys.stderr)
    noop = index(old)
    update = index(new)
    return {"full": full, "noop": noop, "update": update}


# -- freshindex -------------------------------------------------------------------

#: freshindex embedder variants measured side by side: the defaults, the batching before token
#: budgets (32 texts a run however long) and one text per run.
VARIANTS = {"fresh": {}, "legacy": {"_batch_tokens": 10**9, "_max_padding": 1.0},
            "one-per-run": {"_batch_size": 1}}


def run_fresh(old: Path, new: Path, work: Path, noop_repeat: int, variant: str = "fresh") -> dict[str, Any]:
    """Full build of ``old`` through Services + sync_inline, no-op re-syncs, then the update to ``new``."""
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    source = work / "source"
    materialise(_tree(old), source)
    svc = Services(load_settings(data_dir=work / "data", sync={"max_deletion_share": 1.0}))
    svc.registry.add_source("bench", kind="folder", location=str(source), owner="bench", kb="bench")
    for attr, value in VARIANTS[variant].items():  # bench-only: the embedder's knobs, before its session loads
        if not hasattr(svc.embedder, attr):
            raise SystemExit(f"variant {variant}: the embedder has no {attr}")
        setattr(svc.embedder, attr, value)
    svc.embedder.embed(["warm up the model"])  # load time is not build time
    model = svc.embedder.model_id

    def sync() -> dict[str, Any]:
        embed0 = svc.metrics.value("freshindex_embed_seconds_total", model=model)
        t0 = time.perf_counter()
        report = sync_inline(svc, "bench")
        wall = time.perf_counter() - t0
        s = report.run.summary
        embed_s = svc.metrics.value("freshindex_embed_seconds_total", model=model) - embed0
        print(f"fresh[{variant}]: sync {wall:.1f} s, {s.get('chunks_embedded', 0)} embedded", file=sys.stderr)
        return {"wall_s": round(wall, 3), "embed_s": round(embed_s, 3), "embedded": s.get("chunks_embedded", 0), "reused": s.get("chunks_reused", 0),
                "kept": s.get("chunks_kept", 0), "documents": s.get("documents", {}), "build": str(report.build_status),
                "points": report.snapshot.point_count if report.snapshot else None,
                "errors": [f"{e.key}: {e.reason}" for e in report.errors][:20]}

    full = sync()
    _dump_embedded(svc, "bench", work / "full_texts.jsonl")
    noops = [sync() for _ in range(noop_repeat)]
    materialise(_tree(new), source)
    update = sync()
    svc.close()
    return {"full": full, "noop": {"runs_s": [n["wall_s"] for n in noops],
                                   "wall_s": statistics.median(n["wall_s"] for n in noops),
                                   "embedded": sum(n["embedded"] for n in noops)}, "update": update}


def _dump_embedded(svc: Any, kb: str, out: Path, batch: int = 500) -> None:
    """Write what the full build embedded (header and chunk text, one JSON line per chunk), a batch at a time:
    the figures are computed by the parent, so that counting them adds nothing to this process's peak memory."""
    from freshindex.core.types import embed_header

    ids = svc.registry.live_chunk_ids_for_kb(kb)
    with out.open("w") as f:
        for i in range(0, len(ids), batch):
            for r in svc.registry.chunk_rows(ids[i : i + batch]):
                f.write(json.dumps([embed_header(r.heading_path, r.title), r.text]) + "\n")


def _embedded_tokens(dump: Path, batch: int = 256) -> dict[str, int]:
    """Tokens of what the full build embedded: the whole embedded texts, and their chunk texts alone."""
    from tokenizers import Tokenizer

    from freshindex.core.types import embed_text
    from freshindex.models.onnx import MAX_TOKENS, _files

    tokenizer = Tokenizer.from_file(str(_files()[1]))
    tokenizer.no_padding()  # the file pads batches; count real tokens only
    tokenizer.no_truncation()
    out = {"tokens": 0, "text_tokens": 0, "over_limit": 0}
    lines = dump.read_text().splitlines()
    for i in range(0, len(lines), batch):
        pairs = [json.loads(line) for line in lines[i : i + batch]]
        for e in tokenizer.encode_batch([embed_text([h] if h else [], t) for h, t in pairs]):
            out["tokens"] += min(len(e.ids), MAX_TOKENS)
            out["over_limit"] += len(e.ids) > MAX_TOKENS
        out["text_tokens"] += sum(min(len(e.ids), MAX_TOKENS) for e in tokenizer.encode_batch([t for _, t in pairs]))
    return out


def _tree(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}


# -- analysis: what truly changed ---------------------------------------------------

def chunk_release(root: Path) -> dict[str, list[Any]]:
    """freshindex's chunks of every file under ``root`` (hashing embedder: no model is loaded)."""
    from freshindex.core.ids import document_id
    from freshindex.services import Services
    from freshindex.settings import load_settings

    svc = Services(load_settings(data_dir=Path(tempfile.mkdtemp(prefix="fi-rc-an-")) / "d"))
    out: dict[str, list[Any]] = {}
    for key, path in sorted(_tree(root).items()):
        try:
            parsed = svc.parsers.parse(path.read_bytes(), key)
            out[key] = list(svc.chunker.chunk(document_id("bench", key), parsed))
        except Exception as exc:  # a document freshindex records as failed: no chunks
            out[key] = []
            print(f"analysis: {key}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return out


def _symbol(chunk: Any) -> tuple[str, str] | None:
    meta = chunk.meta or {}
    if "symbol" not in meta:
        return None
    return (re.sub(r"^src/", "", meta.get("path") or ""), str(meta["symbol"]))


def analyse(old: Path, new: Path) -> dict[str, Any]:
    """Chunks whose text truly changed, the embeds freshindex should make, and why each extra one happens."""
    before, after = chunk_release(old), chunk_release(new)
    old_chunks = [c for cs in before.values() for c in cs]
    new_chunks = [c for cs in after.values() for c in cs]
    old_texts = Counter(c.text for c in old_chunks)
    remaining = old_texts.copy()
    changed = 0
    for c in new_chunks:
        if remaining[c.text] > 0:
            remaining[c.text] -= 1
        else:
            changed += 1
    old_hashes = {c.content_hash for c in old_chunks}
    by_text = {c.text: c for c in old_chunks}
    expected: dict[str, Any] = {}
    for c in new_chunks:
        if c.content_hash not in old_hashes:
            expected.setdefault(c.content_hash, c)
    reasons: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    distinct = 0  # new texts, counted once however often they occur (the vector cache embeds them once)
    for c in expected.values():
        twin = by_text.get(c.text)
        if twin is None:
            distinct += 1
            continue  # its text changed: a true change
        if twin.title != c.title:
            why = "same text, document title changed"
        elif tuple(twin.heading_path) != tuple(c.heading_path):
            why = "same text, heading path changed"
        elif twin.embed_text != c.embed_text:
            why = "same text, embedded header changed"
        else:
            why = "same embedded text, other content hash (version or kind)"
        reasons[why] += 1
        key = (c.meta or {}).get("path") or c.title or ""
        examples.setdefault(why, []).append(f"{key} :: {' > '.join(c.heading_path)[:80]}")
    result: dict[str, Any] = {
        "old_chunks": len(old_chunks), "new_chunks": len(new_chunks), "truly_changed_chunks": changed,
        "truly_changed_distinct": distinct,
        "expected_embeds": len(expected), "extra_embed_reasons": dict(reasons),
        "extra_embed_examples": {k: v[:5] for k, v in examples.items()},
        "pages_bytes_changed": sum(1 for k in after if k in before and (new / k).read_bytes() != (old / k).read_bytes()),
        "pages_text_changed": sum(1 for k in after if k in before
                                  and [c.text for c in after[k]] != [c.text for c in before[k]]),
    }
    # Moves: a file at a path the old release does not have, byte for byte one the old release had elsewhere.
    gone = {(old / k).read_bytes() for k in before if k not in after}
    moved = [k for k in after if k not in before]
    result["files_new_path"] = len(moved)
    result["files_moved_unchanged"] = sum(1 for k in moved if (new / k).read_bytes() in gone)
    old_sym: dict[tuple[str, str], list[str]] = {}
    new_sym: dict[tuple[str, str], list[str]] = {}
    for chunks, into in ((old_chunks, old_sym), (new_chunks, new_sym)):
        for c in chunks:
            s = _symbol(c)
            if s is not None:
                into.setdefault(s, []).append(c.text)
    if new_sym:
        result["symbols_old"], result["symbols_new"] = len(old_sym), len(new_sym)
        result["changed_symbols"] = sum(1 for s, parts in new_sym.items() if old_sym.get(s) != parts)
    return result


# -- driver --------------------------------------------------------------------------

def _child(side: str, old: Path, new: Path, work: Path, out: Path, noop_repeat: int) -> dict[str, Any]:
    """Run one side in a child process; its figures plus its peak RSS (``os.wait4``)."""
    cmd = [sys.executable, "-m", "bench.realcorpus", "--child", side if side == "naive" else "fresh",
           "--variant", "fresh" if side == "naive" else side, "--old", str(old), "--new", str(new),
           "--work", str(work), "--out", str(out), "--noop-repeat", str(noop_repeat)]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} child failed with exit code {proc.returncode}")
    data = json.loads(out.read_text())
    data["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)  # Linux: KiB
    data["process_s"] = round(time.perf_counter() - started, 1)
    data["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 1)
    return data


def _ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    return round(a / b, digits) if a is not None and b else None


def run_corpus(name: str, old_tree: dict[str, Path], new_tree: dict[str, Path], noop_repeat: int,
               variants: list[str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="fi-rc-" + re.sub(r"[^a-z0-9]+", "-", name.lower())))
    try:
        old, new = work / "old", work / "new"
        materialise(old_tree, old)
        materialise(new_tree, new)
        load_before = os.getloadavg()
        sides = {side: _child(side, old, new, work / side, work / f"{side}.json", noop_repeat)
                 for side in ("naive", *variants)}
        load_after = os.getloadavg()
        for v in variants:
            sides[v]["full"].update(_embedded_tokens(work / v / "full_texts.jsonl"))
        truth = analyse(old, new)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    naive, fresh = sides["naive"], sides[variants[-1]]
    ratios = {
        "full_build_wall_ratio": _ratio(fresh["full"]["wall_s"], naive["full"]["wall_s"]),
        "update_over_truly_changed": _ratio(fresh["update"]["embedded"], truth["truly_changed_distinct"]),
        "update_over_naive": _ratio(fresh["update"]["embedded"], naive["update"]["embedded"]),
        "update_over_naive_changed_files": _ratio(fresh["update"]["embedded"], naive["update"]["changed_file_chunks"]),
        "noop_over_full": _ratio(fresh["noop"]["wall_s"], fresh["full"]["wall_s"], 4),
        "update_wall_ratio": _ratio(fresh["update"]["wall_s"], naive["update"]["wall_s"]),
        "peak_rss_ratio": _ratio(fresh["peak_rss_mb"], naive["peak_rss_mb"]),
        "full_build_wall_ratio_by_variant": {v: _ratio(sides[v]["full"]["wall_s"], naive["full"]["wall_s"])
                                             for v in variants},
    }
    nf, ff = naive["full"], fresh["full"]
    if nf.get("tokens") and nf.get("embed_s") and ff.get("text_tokens"):
        # The least a full build can take with this model: its chunk text alone (no header, no parse,
        # no registry), embedded at the rate the naive side's model ran at, over the naive side's wall time.
        ratios["full_build_floor_ratio"] = _ratio(nf["embed_s"] * ff["text_tokens"] / nf["tokens"], nf["wall_s"])
    if truth.get("changed_symbols") is not None:
        ratios["code_update_over_changed_symbols"] = _ratio(fresh["update"]["embedded"], truth["changed_symbols"])
    unexplained = (fresh["update"]["embedded"] - truth["truly_changed_distinct"]
                   - sum(truth["extra_embed_reasons"].values()))
    truth["unexplained_embeds"] = unexplained
    return {"corpus": name, "files_old": len(old_tree), "files_new": len(new_tree), "sides": sides,
            "measured_variant": variants[-1], "naive": naive, "fresh": fresh,
            "truth": truth, "ratios": ratios, "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in load_after]}


def _goal_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    out = []
    for r in rows:
        ra = r["ratios"]
        checks = [("full build wall / naive", ra["full_build_wall_ratio"], GOALS["full_build_wall_ratio"]),
                  ("update embeds / truly changed", ra["update_over_truly_changed"], GOALS["update_over_truly_changed"]),
                  ("update embeds / naive (incremental)", ra["update_over_naive"], GOALS["update_over_naive"]),
                  ("no-op / full build", ra["noop_over_full"], GOALS["noop_over_full"]),
                  ("peak RSS MB", r["fresh"]["peak_rss_mb"], GOALS["peak_rss_mb"])]
        if "code_update_over_changed_symbols" in ra:
            checks.append(("update embeds / changed symbols", ra["code_update_over_changed_symbols"],
                           GOALS["code_update_over_changed_symbols"]))
        for label, value, goal in checks:
            ok = value is not None and value <= goal
            out.append([r["corpus"], label, value, f"<= {goal}", "met" if ok else "MISSED"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit-pages", type=int, default=150, help="Django pages (0: all of them)")
    parser.add_argument("--corpus", action="append", choices=("django", "code", *CODE_PAIRS),
                        help="django, a code pair, or code (every code pair); default: all of them")
    parser.add_argument("--noop-repeat", type=int, default=3)
    parser.add_argument("--name", default="realcorpus", help="results file name")
    parser.add_argument("--variant", action="append", choices=tuple(VARIANTS),
                        help="freshindex variants, run in this order; the last one is held to the goals "
                             "(default: legacy then fresh)")
    parser.add_argument("--child", choices=("naive", "fresh"), help=argparse.SUPPRESS)
    parser.add_argument("--old", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--new", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.work.mkdir(parents=True, exist_ok=True)
        data = (run_naive(args.old, args.new) if args.child == "naive"
                else run_fresh(args.old, args.new, args.work, args.noop_repeat, (args.variant or ["fresh"])[-1]))
        args.out.write_text(json.dumps(data, default=str))
        return
    from bench.report import table, write

    corpora: list[str] = []
    for name in args.corpus or ["django", "code"]:
        for each in (CODE_PAIRS if name == "code" else [name]):
            if each not in corpora:
                corpora.append(each)
    rows = []
    for name in corpora:
        old, new = django_trees(args.limit_pages) if name == "django" else code_trees(name)
        label = f"django ({len(old)} pages)" if name == "django" else CODE_PAIRS[name]["label"]
        rows.append(run_corpus(label, old, new, args.noop_repeat, args.variant or ["legacy", "fresh"]))
    command = "python -m bench.realcorpus " + " ".join(sys.argv[1:])
    meta = {"command": command.strip(), "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "cores": os.cpu_count(), "python": platform.python_version(), "uptime": _uptime(),
            "embedding": _embedding_settings(), "goals": GOALS}
    lines = ["# Real-corpus benchmark: freshindex against a naive pipeline", "",
             f"`{meta['command']}` on {meta['cores']} cores ({meta['machine']}), load at the end: {meta['uptime']}.",
             f"freshindex embedding settings: {meta['embedding']}. Each side in its own process, one after the other.",
             "The machine may be shared with other jobs (the load averages beside each corpus say how busy it "
             "was): wall-time ratios move with the load, embed counts do not.",
             ""]
    lines += table(
        ["corpus", "side", "full build s", "in model s", "chunks", "embedded (full)", "tokens embedded",
         "model tokens/s", "no-op s", "update s", "update embedded", "peak RSS MB", "load 1/5/15 before"],
        list("llrrrrrrrrrrl"),
        [[r["corpus"], side, d["full"]["wall_s"], d["full"].get("embed_s", "-"),
          d["full"].get("points") or d["full"].get("chunks"), d["full"]["embedded"], _tokens_cell(d["full"]),
          round(d["full"]["tokens"] / d["full"]["embed_s"]) if d["full"].get("tokens") and d["full"].get("embed_s")
          else "-",
          d["noop"]["wall_s"], d["update"]["wall_s"], d["update"]["embedded"],
          d["peak_rss_mb"], " ".join(map(str, r["load_before"]))]
         for r in rows for side, d in r["sides"].items()],
    )
    lines += ["", "Goals (ratios measured in this run, for the last freshindex variant; full build wall / naive "
              "by variant: " + "; ".join(f"{r['corpus']}: {r['ratios']['full_build_wall_ratio_by_variant']}"
                                         for r in rows) + "):", ""]
    lines += table(["corpus", "measure", "value", "goal", ""], list("llrll"), _goal_rows(rows))
    floors = [f"{r['corpus']}: {r['ratios']['full_build_floor_ratio']}" for r in rows
              if r["ratios"].get("full_build_floor_ratio") is not None]
    if floors:
        lines += ["", "Floor of the full-build ratio with this model: freshindex's chunk text alone (no header, no "
                  "parse, no registry, no store), embedded at the naive side's measured tokens per second, over the "
                  "naive side's wall time: " + "; ".join(floors) + ". A ratio goal below the floor needs fewer "
                  "tokens than the content has, or a faster model."]
    lines += ["", "What truly changed (freshindex's own chunking of both releases) and why extra chunks were embedded:",
              ""]
    for r in rows:
        t = r["truth"]
        sym = (f", symbols {t['symbols_old']} -> {t['symbols_new']}, {t['changed_symbols']} changed"
               if "changed_symbols" in t else "")
        moves = (f", {t['files_new_path']} at a new path ({t['files_moved_unchanged']} of them moved byte for byte)"
                 if t.get("files_new_path") else "")
        lines.append(f"- {r['corpus']}: {t['pages_bytes_changed']} files changed in bytes at the same path, "
                     f"{t['pages_text_changed']} in chunk text{moves}; {t['truly_changed_chunks']} of "
                     f"{t['new_chunks']} chunks with new text ({t['truly_changed_distinct']} distinct){sym}; "
                     f"update embedded {r['fresh']['update']['embedded']} (naive: {r['naive']['update']['embedded']} "
                     f"incremental, {r['naive']['update']['changed_file_chunks']} re-embedding changed files); extra: "
                     + (", ".join(f"{n} {why}" for why, n in t["extra_embed_reasons"].items()) or "none")
                     + f"; unexplained by the analysis: {t['unexplained_embeds']}.")
    write(args.name, {"meta": meta, "rows": rows}, lines)


def _tokens_cell(full: dict[str, Any]) -> str:
    if not full.get("tokens"):
        return "-"
    if "text_tokens" in full:  # freshindex: of which the chunk text, the rest the context header
        return f"{full['tokens']} ({full['text_tokens']} text, {full['over_limit']} over the limit)"
    return f"{full['tokens']} ({full.get('cut_texts', 0)} texts cut at the limit)"


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _embedding_settings() -> dict[str, Any]:
    from freshindex.settings import load_settings

    e = load_settings().embedding
    return {"provider": e.provider, "batch_size": e.batch_size, "threads": e.threads}


if __name__ == "__main__":
    main()
