"""The CPython 3.11 HTML documentation from Debian bookworm's python3.11-doc, as a golden-set corpus.

Nothing in freshindex was tuned on it: another Sphinx theme (python-docs-theme) and another page
structure than the Django docs. ``materialise`` downloads the .deb with ``apt-get download``, unpacks
it with ``dpkg-deb -x`` and copies every HTML page of the documentation (no page limit) into ``dest``,
keeping the documentation's own relative paths (``library/json.html``, ``c-api/list.html`` ...).
Left out: the generated index pages (``genindex*.html``, ``py-modindex.html``, ``search.html``) and the
``_static``/``_sources``/``_images`` trees (theme assets, reST sources, pictures), plus non-page files
(``searchindex.js``, ``objects.inv``, ``.buildinfo``, the devhelp file). Debian ships the changelog
gzipped (``whatsnew/changelog.html.gz``); it is a real page of the docs, so it is unpacked to
``whatsnew/changelog.html``.

No older release of these pages is in bookworm (no python3.9-doc, python3.10-doc or python2.7-doc), so
the near-duplicates the distractor questions rely on are the natural ones inside the docs themselves
(see bench/goldens/python311/README.md).

``verify`` checks the golden questions against the materialised pages. A page's text is the text of its
main content (``div[role=main]``, Sphinx's ``div.body``) with whitespace collapsed to single spaces.

    python -m bench.corpora.python311 [--cache DIR] [--dest DIR]
"""

from __future__ import annotations

import gzip
import re
import shutil
from pathlib import Path

from bs4 import BeautifulSoup

from bench.corpora import common

PACKAGE = "python3.11-doc"
VERSION = "3.11.2-6+deb12u9"
HTML_DIR = "usr/share/doc/python3.11/html"
SKIP_TREES = ("_static", "_sources", "_images")
SKIP_PAGES = ("py-modindex.html", "search.html")
GZIPPED_PAGES = ("whatsnew/changelog.html.gz",)
MIN_PAGES = 490  # 499 pages in 3.11.2-6+deb12u9

KINDS = ("prose", "table", "code", "config", "distractor", "unanswerable")
MINIMUMS = {"prose": 20, "table": 8, "code": 8, "distractor": 6, "unanswerable": 12}
MIN_ANSWERABLE = 42
# Kinds whose passage must also be found when inline tags are joined with a space (get_text(" ")): their
# passages then do not depend on how an extractor joins inline markup. Code passages are exempt: the
# highlighter wraps every token in its own span, so only the plain join keeps a code line readable.
JOIN_ROBUST_KINDS = ("prose", "table", "config", "distractor")

DEFAULT_CACHE = common.cache_dir("python311")
QUESTIONS = Path(__file__).resolve().parents[1] / "goldens" / "python311" / "questions.jsonl"


def fetch(cache: Path) -> Path:
    """The .deb in ``cache``, downloaded when absent (``apt-get update`` only if the first try fails)."""
    return common.fetch_deb(PACKAGE, VERSION, cache)


def _unpack(cache: Path, deb: Path) -> Path:
    return common.unpack(deb, cache / f"unpacked-{VERSION}", Path(HTML_DIR) / "index.html") / HTML_DIR


def corpus_pages(html: Path) -> list[str]:
    """Relative paths of the pages that make up the corpus, inside the unpacked html directory."""
    pages = []
    for path in html.rglob("*.html"):
        rel = path.relative_to(html).as_posix()
        if rel.split("/")[0] in SKIP_TREES or path.name.startswith("genindex") or rel in SKIP_PAGES:
            continue
        pages.append(rel)
    return sorted(pages)


def materialise(cache: Path, dest: Path) -> Path:
    """Put every page of the corpus under ``dest`` and return ``dest``, the folder to index."""
    return copy_pages(_unpack(cache, fetch(cache)), dest)


def copy_pages(html: Path, dest: Path) -> Path:
    """Every page of an unpacked CPython html directory into ``dest`` (as the corpus takes them); ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for rel in corpus_pages(html):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html / rel, target)
        wanted.add(rel)
    for rel in GZIPPED_PAGES:
        if not (html / rel).is_file() and (html / rel.removesuffix(".gz")).is_file():
            continue  # shipped plain: copied above
        plain = rel.removesuffix(".gz")
        target = dest / plain
        target.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(html / rel) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
        wanted.add(plain)
    for path in dest.rglob("*.html"):  # pages left by an earlier materialisation of another version
        if path.relative_to(dest).as_posix() not in wanted:
            path.unlink()
    return dest


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def page_texts(html: bytes) -> tuple[str, str]:
    """The main content's visible text, inline tags joined as written and joined with a space."""
    soup = BeautifulSoup(html, "html.parser")
    main = soup.select_one('div[role="main"]') or soup.select_one("div.body") or soup.body or soup
    for tag in main.find_all(["script", "style"]):
        tag.decompose()
    return _norm(main.get_text()), _norm(main.get_text(" "))


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def verify(dest: Path, questions: list[dict]) -> list[str]:
    """Problems with ``questions`` against the corpus in ``dest``; empty when every check passes."""
    problems: list[str] = []
    pages = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*.html"))
    if len(pages) < MIN_PAGES:
        problems.append(f"{dest}: {len(pages)} pages, expected at least {MIN_PAGES}")
    texts = {rel: page_texts((dest / rel).read_bytes()) for rel in pages}
    lowered = {rel: (plain.lower(), spaced.lower(), _squash(plain)) for rel, (plain, spaced) in texts.items()}

    ids: set[str] = set()
    counts = dict.fromkeys(KINDS, 0)
    splits = {"dev": 0, "test": 0}
    for n, q in enumerate(questions, 1):
        qid = q.get("id") or f"line {n}"
        if qid in ids:
            problems.append(f"{qid}: duplicate id")
        ids.add(qid)
        kind = q.get("kind")
        if kind not in KINDS:
            problems.append(f"{qid}: unknown kind {kind!r}")
            continue
        counts[kind] += 1
        if q.get("split") not in splits:
            problems.append(f"{qid}: split must be dev or test")
        else:
            splits[q["split"]] += 1
        if not str(q.get("question", "")).strip():
            problems.append(f"{qid}: empty question")
        if kind == "unanswerable":
            if q.get("page") is not None or q.get("passage") is not None:
                problems.append(f"{qid}: unanswerable questions have page and passage null")
            terms = q.get("key_terms") or []
            if not terms:
                problems.append(f"{qid}: no key_terms")
            for term in terms:
                low, squashed = term.lower(), _squash(term)
                hits = [rel for rel, (plain, spaced, flat) in lowered.items()
                        if low in plain or low in spaced or squashed in flat]
                if hits:
                    problems.append(f"{qid}: key term {term!r} occurs in {', '.join(hits[:3])}")
            continue
        page, passage = q.get("page"), q.get("passage")
        if page not in texts:
            problems.append(f"{qid}: page {page!r} is not in the corpus")
            continue
        if not isinstance(passage, str) or not 30 <= len(passage) <= 200:
            problems.append(f"{qid}: passage must be 30-200 characters")
            continue
        if passage != _norm(passage):
            problems.append(f"{qid}: passage is not whitespace-normalised")
        plain, spaced = texts[page]
        if passage not in plain:
            problems.append(f"{qid}: passage not found on {page}")
        elif kind in JOIN_ROBUST_KINDS and passage not in spaced:
            problems.append(f"{qid}: passage on {page} depends on how inline tags are joined")
        if kind == "distractor":
            others = q.get("distractor_pages") or []
            if not others:
                problems.append(f"{qid}: no distractor_pages")
            for other in others:
                if other == page or other not in texts:
                    problems.append(f"{qid}: distractor page {other!r} is the page itself or not in the corpus")
                elif _squash(passage) in lowered[other][2]:
                    problems.append(f"{qid}: passage also found on distractor page {other}")
        elif "distractor_pages" in q:
            problems.append(f"{qid}: distractor_pages on a {kind} question")

    answerable = sum(c for k, c in counts.items() if k != "unanswerable")
    for kind, least in MINIMUMS.items():
        if counts[kind] < least:
            problems.append(f"{counts[kind]} {kind} questions, need at least {least}")
    if answerable < MIN_ANSWERABLE:
        problems.append(f"{answerable} answerable questions, need at least {MIN_ANSWERABLE}")
    if abs(splits["dev"] - splits["test"]) > 1:
        problems.append(f"splits unbalanced: {splits}")
    return problems


def load_questions(path: Path = QUESTIONS) -> list[dict]:
    return common.load_questions(path)


def main() -> None:
    common.main(__doc__ or "", "python311", materialise, verify, "*.html")


if __name__ == "__main__":
    main()
