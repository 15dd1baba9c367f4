"""The mechanical checks of a golden set written blind, against an older and a newer release of a corpus.

A golden set for a corpus with two releases (a repository's old and new work tree, a manual's old and new
folder) is written by someone who never sees freshindex; these are the rules their questions must pass,
the same ones the writers run themselves (a copy of this file with the corpora's folders added):

* a page's text: an HTML page's text content inside its ``role="main"`` element (the whole body when the
  page has none; scripts, styles, the head and Sphinx's ``headerlink`` anchors left out; block elements
  separated by a space); a PDF page (``<file>.pdf#page=N``) as ``pdftotext`` gives it (PyMuPDF when
  poppler is not installed); any other file its raw text.  Whitespace collapsed to one space;
* an answerable question's ``passage`` (20-300 characters) occurs in its ``page``'s text in the NEW
  release, exactly;
  a ``distractor`` question's passage occurs on none of its ``distractor_pages``;
* a ``freshness`` question's passage occurs nowhere in the OLD release (neither on its page nor elsewhere),
  typographic quotes, dashes and the ellipsis read as their ASCII forms on both sides (a generator that
  switched its smart quotes off does not make old text look new);
* an ``unanswerable`` question's ``key_terms`` occur in no page of either release (case-insensitive, quotes
  and dashes folded as above);
* no run of six consecutive words of the question occurs in its page (lower-cased, every character that
  is not a letter or a digit read as a space);
* the set holds at least 40 prose/table/code/config, 10 unanswerable, 5 distractor and 5 freshness
  questions (issue 43's minimum); ids are unique.

Standard library only, so a question writer can run it with any Python 3.10+.  It does not judge whether
a question is well asked, whether the passage answers it, nor anything about retrieval.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

ANSWERABLE = ("prose", "table", "code", "config", "distractor", "freshness")
KINDS = (*ANSWERABLE, "unanswerable")
#: Minimum counts per golden set: (kinds counted together, at least).
MINIMUMS = ((("prose", "table", "code", "config"), 40), (("unanswerable",), 10), (("distractor",), 5),
            (("freshness",), 5))
PASSAGE_CHARS = (20, 300)
RUN = 6
#: The interpreter that reads a PDF with PyMuPDF when pdftotext is missing: the one running this, unless the
#: verifier runs under a bare Python (``FRESHINDEX_PYMUPDF_PYTHON``).
PYMUPDF_PYTHON = os.environ.get("FRESHINDEX_PYMUPDF_PYTHON", sys.executable)

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track",
         "wbr"}
_BLOCK = {"p", "div", "li", "ul", "ol", "dl", "dt", "dd", "td", "th", "tr", "table", "thead", "tbody", "pre", "h1",
          "h2", "h3", "h4", "h5", "h6", "section", "blockquote", "figure", "figcaption", "caption", "header",
          "footer", "nav", "article", "aside", "main", "form", "hr"}
_SKIP = {"script", "style", "head", "title", "template", "noscript"}


class _Text(HTMLParser):
    """Text of an HTML page: all of it and the part inside the first ``role="main"`` element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.parts: list[str] = []
        self.main: list[str] = []
        self.skip_at: int | None = None
        self.main_at: int | None = None
        self.found_main = False

    def _add(self, text: str) -> None:
        if self.skip_at is not None:
            return
        self.parts.append(text)
        if self.main_at is not None:
            self.main.append(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            if tag in ("br", "hr"):
                self._add(" ")
            return
        self.stack.append(tag)
        depth = len(self.stack)
        a = {k: v or "" for k, v in attrs}
        if self.skip_at is None and (tag in _SKIP or "headerlink" in a.get("class", "").split()):
            self.skip_at = depth
        if not self.found_main and a.get("role") == "main":
            self.main_at, self.found_main = depth, True
        if tag in _BLOCK:
            self._add(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "hr"):
            self._add(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID or tag not in self.stack:
            return
        if tag in _BLOCK:
            self._add(" ")
        while self.stack and self.stack.pop() != tag:
            pass
        depth = len(self.stack)
        if self.skip_at is not None and depth < self.skip_at:
            self.skip_at = None
        if self.main_at is not None and depth < self.main_at:
            self.main_at = None

    def handle_data(self, data: str) -> None:
        self._add(data)


_FOLD = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-",
                       "\u2026": "...", "\u00a0": " "})


def collapse(text: str) -> str:
    return " ".join(text.split())


def fold(text: str) -> str:
    """``text`` with typographic quotes, dashes, the ellipsis and no-break spaces in their ASCII forms."""
    return collapse(text.translate(_FOLD))


def html_text(raw: str) -> str:
    """The text of an HTML page as the rules above read it, whitespace collapsed."""
    p = _Text()
    p.feed(raw)
    p.close()
    return collapse("".join(p.main if p.found_main else p.parts))


def pdf_pages(path: Path) -> list[str]:
    """Each page's text of a PDF, whitespace collapsed (pdftotext, else PyMuPDF in :data:`PYMUPDF_PYTHON`)."""
    if shutil.which("pdftotext"):
        out = subprocess.run(["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, check=True).stdout
        pages = out.decode("utf-8", "replace").split("\f")
        return [collapse(t) for t in (pages[:-1] if pages and not pages[-1].strip() else pages)]
    code = ("import json,sys,pymupdf;print(json.dumps([p.get_text() for p in pymupdf.open(sys.argv[1])]))")
    out = subprocess.run([PYMUPDF_PYTHON, "-c", code, str(path)], capture_output=True, check=True, text=True).stdout
    return [collapse(t) for t in json.loads(out)]


class Release:
    """One release's folder: its pages and their texts, read once."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._texts: dict[str, str | None] = {}
        self._pdf: dict[str, list[str]] = {}

    def files(self) -> list[str]:
        return sorted(p.relative_to(self.root).as_posix() for p in self.root.rglob("*")
                      if p.is_file() and ".git" not in p.relative_to(self.root).parts)

    def text(self, page: str) -> str | None:
        """The page's text, or None when the release has no such page (or it is not text)."""
        if page in self._texts:
            return self._texts[page]
        name, sep, number = page.partition("#page=")
        path = self.root / name
        text: str | None = None
        if path.is_file() and not sep:
            raw = path.read_bytes()
            if b"\0" not in raw[:8192]:
                decoded = raw.decode("utf-8", "replace")
                text = html_text(decoded) if path.suffix.lower() in (".html", ".htm") else collapse(decoded)
        elif path.is_file() and name.lower().endswith(".pdf") and number.isdigit():
            if name not in self._pdf:
                self._pdf[name] = pdf_pages(path)
            pages = self._pdf[name]
            text = pages[int(number) - 1] if 1 <= int(number) <= len(pages) else None
        self._texts[page] = text
        return text

    def all_texts(self) -> dict[str, str]:
        """Every page's text (a PDF's pages one by one)."""
        out: dict[str, str] = {}
        for f in self.files():
            if f.lower().endswith(".pdf"):
                if f not in self._pdf:
                    self._pdf[f] = pdf_pages(self.root / f)
                out.update({f"{f}#page={i}": t for i, t in enumerate(self._pdf[f], start=1)})
            elif (t := self.text(f)) is not None:
                out[f] = t
        return out


def words(text: str) -> list[str]:
    return re.sub(r"[\W_]+", " ", text.lower()).split()


def shared_run(question: str, page_text: str, n: int = RUN) -> str | None:
    """The first run of ``n`` consecutive words of the question that the page also has, or None."""
    q, p = words(question), words(page_text)
    grams = {tuple(p[i:i + n]) for i in range(len(p) - n + 1)}
    for i in range(len(q) - n + 1):
        if tuple(q[i:i + n]) in grams:
            return " ".join(q[i:i + n])
    return None


def _check_answerable(q: dict, old: Release, new: Release, old_all: dict[str, str] | None) -> list[str]:
    out: list[str] = []
    page, passage = q.get("page"), q.get("passage")
    if not isinstance(page, str) or not isinstance(passage, str):
        return ["needs a 'page' and a 'passage' (strings)"]
    passage = collapse(passage)
    if not PASSAGE_CHARS[0] <= len(passage) <= PASSAGE_CHARS[1]:
        out.append(f"passage is {len(passage)} characters, expected {PASSAGE_CHARS[0]}-{PASSAGE_CHARS[1]}")
    text = new.text(page)
    if text is None:
        return [*out, f"page {page!r} is not a text page of the new release"]
    if passage not in text:
        out.append(f"passage not found on {page} (new release)")
    if (run := shared_run(q.get("question", ""), text)) is not None:
        out.append(f"question shares six words with {page}: {run!r}")
    if q["kind"] == "distractor":
        pages = q.get("distractor_pages")
        if not isinstance(pages, list) or not pages:
            out.append("a distractor question needs 'distractor_pages' (a non-empty list)")
        for d in pages or []:
            t = new.text(d)
            if t is None:
                out.append(f"distractor page {d!r} is not a text page of the new release")
            elif passage in t:
                out.append(f"passage is also on distractor page {d}")
    if q["kind"] == "freshness" and old_all is not None:
        hits = [p for p, t in old_all.items() if fold(passage) in t]
        if hits:
            out.append(f"freshness passage is already in the old release: {', '.join(hits[:3])}")
    return out


def _check_unanswerable(q: dict, texts: list[str]) -> list[str]:
    terms = q.get("key_terms")
    if not isinstance(terms, list) or not terms or not all(isinstance(t, str) and t.strip() for t in terms):
        return ["an unanswerable question needs 'key_terms' (a non-empty list of strings)"]
    if q.get("page") or q.get("passage"):
        return ["an unanswerable question has no page or passage"]
    return [f"key term {t!r} occurs in the corpus" for t in terms
            if any(fold(t).lower() in text for text in texts)]


def check(questions: list[dict], old_root: Path, new_root: Path) -> tuple[list[str], Counter]:
    """(problems, each starting with the question's id and ': '; counts per kind) of ``questions``."""
    old, new = Release(old_root), Release(new_root)
    old_all = ({p: fold(t) for p, t in old.all_texts().items()}
               if any(q.get("kind") == "freshness" for q in questions) else None)
    lowered: list[str] | None = None
    problems: list[str] = []
    seen: set[str] = set()
    counts: Counter = Counter()
    for n, q in enumerate(questions, start=1):
        qid = str(q.get("id") or f"line {n}")
        kind = q.get("kind")
        if qid in seen:
            problems.append(f"{qid}: duplicate id")
        seen.add(qid)
        if kind not in KINDS or not str(q.get("question") or "").strip():
            problems.append(f"{qid}: needs a 'question' and a 'kind' among {', '.join(KINDS)}")
            continue
        counts[kind] += 1
        if kind == "unanswerable":
            if lowered is None:
                lowered = [fold(t).lower() for t in [*new.all_texts().values(), *old.all_texts().values()]]
            found = _check_unanswerable(q, lowered)
        else:
            found = _check_answerable(q, old, new, old_all)
        problems += [f"{qid}: {p}" for p in found]
    for kinds, least in MINIMUMS:
        got = sum(counts[k] for k in kinds)
        if got < least:
            problems.append(f"set: {' + '.join(kinds)}: {got} questions, at least {least} wanted")
    return problems, counts


def load(path: Path) -> list[dict]:
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not JSON ({e})") from None
    return out


def main(corpora: dict[str, tuple[str, str]] | None = None) -> None:
    corpora = corpora or {}
    parser = argparse.ArgumentParser(description="Check a blind golden set against a corpus's two releases.")
    parser.add_argument("questions", type=Path, nargs="?", help="questions.jsonl")
    parser.add_argument("--corpus", choices=sorted(corpora) or None, help="a corpus by name (its folders known)")
    parser.add_argument("--old", type=Path, help="the old release's folder (instead of --corpus)")
    parser.add_argument("--new", type=Path, help="the new release's folder (instead of --corpus)")
    parser.add_argument("--show", metavar="PAGE", help="print PAGE's text as the checks read it, and stop")
    parser.add_argument("--release", choices=("new", "old"), default="new", help="the release --show reads")
    args = parser.parse_args()
    if args.corpus:
        old_root, new_root = (Path(p) for p in corpora[args.corpus])
    elif args.old and args.new:
        old_root, new_root = args.old, args.new
    else:
        parser.error("give --corpus NAME, or --old DIR and --new DIR")
    if args.show:
        text = Release(new_root if args.release == "new" else old_root).text(args.show)
        print(text if text is not None else f"{args.show}: no such text page in the {args.release} release")
        sys.exit(0 if text is not None else 1)
    if args.questions is None:
        parser.error("give questions.jsonl (or --show PAGE)")
    problems, counts = check(load(args.questions), old_root, new_root)
    for p in problems:
        print(p)
    print("counts: " + ", ".join(f"{k} {counts[k]}" for k in KINDS))
    print(f"{len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
