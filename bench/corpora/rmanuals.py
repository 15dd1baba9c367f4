"""The R manuals from Debian bookworm's ``r-doc-pdf``, whole, with some pages turned into scans.

``materialise(cache, dest)`` downloads ``r-doc-pdf`` (``apt-get download``
into ``cache``, reused when present), unpacks it (``dpkg-deb -x``) and writes
the seven manuals (R-FAQ, R-admin, R-data, R-exts, R-intro, R-ints, R-lang;
the reference manual ``refman.pdf``/``fullrefman.pdf`` is left out) into
``dest``, every page kept.  The pages listed in ``scanned_pages`` are
replaced by image-only scans (rendered at 200 dpi, rotated 0.4-0.9 degrees,
blurred, speckled, no text layer), the same treatment as ``bench/pdf.py``'s
``bench.corpora.common.scan_page`` (shared with ``bench.pdf``; nothing imports freshindex).  The
outline of each manual is kept.

Scanned pages, a seeded rule: number the pages of the seven manuals 0, 1,
2, ... across the files in name order (R-FAQ.pdf first, R-lang.pdf last);
a page is scanned when its number ``g`` satisfies ``g % 27 == 13``; it is
rotated by ``ANGLES[k % 4]`` (``k``: its rank among the scanned pages) with
speckle seed ``g``.

``verify(dest, questions)`` checks every question against the ORIGINAL
text layer (re-fetched through the default cache,
``$FRESHINDEX_BENCH_CACHE`` or ``~/.cache/freshindex-bench``, directory
``rmanuals``), the corpus in ``dest`` against the rule, and the
unanswerable questions' key terms against the whole extracted text.

    python -m bench.corpora.rmanuals [--cache DIR] [--dest DIR]   # materialise into DEST and verify
"""

from __future__ import annotations

from pathlib import Path

import pymupdf

from bench.corpora import common
from bench.corpora.common import scan_page

PACKAGE = "r-doc-pdf"
VERSION = "4.2.2.20221110-2"
DEB = f"{PACKAGE}_{VERSION}_all.deb"
MANUALS_DIR = "usr/share/R/doc/manual"
MANUALS = ("R-FAQ.pdf", "R-admin.pdf", "R-data.pdf", "R-exts.pdf", "R-intro.pdf", "R-ints.pdf", "R-lang.pdf")
PAGES = {"R-FAQ.pdf": 52, "R-admin.pdf": 85, "R-data.pdf": 41, "R-exts.pdf": 236, "R-intro.pdf": 113,
         "R-ints.pdf": 81, "R-lang.pdf": 69}
SCAN_EVERY, SCAN_OFFSET = 27, 13
ANGLES = (0.4, -0.6, 0.9, -0.5)
DEFAULT_CACHE = common.cache_dir("rmanuals")
QUESTIONS = Path(__file__).resolve().parents[1] / "goldens" / "rmanuals" / "questions.jsonl"


def _scan_rule(pages: dict[str, int]) -> list[tuple[str, int, int]]:
    """(file, 1-based page, global number) of every scanned page, in order."""
    out, g = [], 0
    for name in MANUALS:
        for p in range(1, pages[name] + 1):
            if g % SCAN_EVERY == SCAN_OFFSET:
                out.append((name, p, g))
            g += 1
    return out


#: The scanned pages, as "<file>.pdf#page=<n>" (1-based), 25 of the 677.
scanned_pages: list[str] = [f"{f}#page={p}" for f, p, _ in _scan_rule(PAGES)]


def fetch(cache: Path) -> Path:
    """The unpacked manuals directory (download and unpack once into ``cache``)."""
    root = cache / "x" / MANUALS_DIR
    if all((root / m).exists() for m in MANUALS):
        return root
    common.unpack(common.fetch_deb(PACKAGE, VERSION, cache), cache / "x", Path(MANUALS_DIR) / MANUALS[0])
    return root


def _set_toc(doc: pymupdf.Document, toc: list[list]) -> None:
    fixed, prev = [], 0
    for lvl, title, pg, *_ in toc:
        lvl = max(1, min(lvl, prev + 1))
        fixed.append([lvl, title, pg])
        prev = lvl
    doc.set_toc(fixed)


def materialise(cache: Path, dest: Path) -> Path:
    """Write the seven manuals (scanned pages as images) into ``dest``; return ``dest``."""
    manuals = fetch(Path(cache))
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    pages = {m: len(pymupdf.open(manuals / m)) for m in MANUALS}
    if pages != PAGES:
        raise RuntimeError(f"unexpected page counts {pages}")
    rule = _scan_rule(pages)
    for name in MANUALS:
        src = pymupdf.open(manuals / name)
        out = pymupdf.open()
        start = 0
        for k, (f, p, g) in enumerate(rule):
            if f != name:
                continue
            if p - 1 > start:
                out.insert_pdf(src, from_page=start, to_page=p - 2)
            out.insert_pdf(scan_page(src, p - 1, angle=ANGLES[k % len(ANGLES)], seed=g))
            start = p
        if start < len(src):
            out.insert_pdf(src, from_page=start, to_page=len(src) - 1)
        _set_toc(out, src.get_toc(simple=True))
        out.set_metadata(src.metadata)
        (dest / name).write_bytes(out.tobytes(garbage=3, deflate=True))
    return dest


def _norm(text: str) -> str:
    return " ".join(text.split())


def _split(ref: str) -> tuple[str, int]:
    name, _, page = ref.partition("#page=")
    return name, int(page)


def verify(dest: Path, questions: list[dict]) -> list[str]:
    """Problems with ``dest`` and ``questions`` (empty when every check passes)."""
    problems: list[str] = []
    dest = Path(dest)
    manuals = fetch(DEFAULT_CACHE)
    texts: dict[str, list[str]] = {m: [_norm(p.get_text()) for p in pymupdf.open(manuals / m)] for m in MANUALS}
    scanned = set(scanned_pages)
    # The corpus: the seven manuals, whole; scanned pages image-only, the others as the original text layer.
    found = sorted(p.name for p in dest.iterdir())
    if found != sorted(MANUALS):
        problems.append(f"dest holds {found}, expected {sorted(MANUALS)}")
    for m in MANUALS:
        if not (dest / m).exists():
            continue
        doc = pymupdf.open(dest / m)
        if len(doc) != len(texts[m]):
            problems.append(f"{m}: {len(doc)} pages, original has {len(texts[m])}")
            continue
        for i, page in enumerate(doc, start=1):
            got = _norm(page.get_text())
            if f"{m}#page={i}" in scanned:
                if got or not page.get_images():
                    problems.append(f"{m}#page={i}: scanned page has a text layer or no image")
            elif got != texts[m][i - 1]:
                problems.append(f"{m}#page={i}: text differs from the original")
    if len(scanned) != 25:
        problems.append(f"{len(scanned)} scanned pages, expected 25")
    corpus = " ".join(t for pages in texts.values() for t in pages).lower()

    def page_text(ref: str) -> str | None:
        name, pno = _split(ref)
        if name not in texts or not 1 <= pno <= len(texts[name]):
            return None
        return texts[name][pno - 1]

    ids = set()
    counts: dict[str, int] = {}
    on_scans = 0
    for i, q in enumerate(questions):
        qid = q.get("id", f"#{i}")
        if qid in ids:
            problems.append(f"{qid}: duplicate id")
        ids.add(qid)
        kind = q.get("kind")
        counts[kind] = counts.get(kind, 0) + 1
        if q.get("split") not in ("dev", "test"):
            problems.append(f"{qid}: bad split")
        if not q.get("question"):
            problems.append(f"{qid}: no question")
        if kind == "unanswerable":
            if q.get("page") is not None or q.get("passage") is not None:
                problems.append(f"{qid}: unanswerable with page or passage")
            if not q.get("key_terms"):
                problems.append(f"{qid}: no key_terms")
            for t in q.get("key_terms", []):
                if _norm(t).lower() in corpus:
                    problems.append(f"{qid}: key term {t!r} occurs in the corpus")
            continue
        if kind not in ("prose", "table", "code", "config", "distractor"):
            problems.append(f"{qid}: unknown kind {kind!r}")
            continue
        text = page_text(q.get("page") or "")
        passage = _norm(q.get("passage") or "")
        if text is None:
            problems.append(f"{qid}: page {q.get('page')!r} not in the corpus")
            continue
        if not 30 <= len(passage) <= 200:
            problems.append(f"{qid}: passage length {len(passage)} outside 30-200")
        if passage not in text:
            problems.append(f"{qid}: passage not on {q['page']}")
        on_scans += q["page"] in scanned
        if kind == "distractor":
            dps = q.get("distractor_pages") or []
            if not dps:
                problems.append(f"{qid}: no distractor_pages")
            for dp in dps:
                dt = page_text(dp)
                if dt is None:
                    problems.append(f"{qid}: distractor page {dp!r} not in the corpus")
                elif dp == q["page"]:
                    problems.append(f"{qid}: distractor page is the canonical page")
                elif passage in dt:
                    problems.append(f"{qid}: passage also on distractor page {dp}")
    need = {"prose": 20, "table": 8, "code": 8, "distractor": 6, "unanswerable": 12}
    for kind, n in need.items():
        if counts.get(kind, 0) < n:
            problems.append(f"only {counts.get(kind, 0)} {kind} questions, need {n}")
    answerable = sum(counts.get(k, 0) for k in ("prose", "table", "code", "config"))
    if answerable < 42:
        problems.append(f"only {answerable} answerable questions, need 42")
    if on_scans < 8:
        problems.append(f"only {on_scans} questions on scanned pages, need 8")
    return problems


def load_questions(path: Path = QUESTIONS) -> list[dict]:
    return common.load_questions(path)


def main() -> None:
    common.main(__doc__ or "", "rmanuals", materialise, verify, "*.pdf")


if __name__ == "__main__":
    main()
