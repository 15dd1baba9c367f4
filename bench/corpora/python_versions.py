"""The CPython documentation of two releases side by side: 3.11 and the 3.9 that Debian shipped before it.

Real older copies of HTML pages from another generator than the PDF manuals
(``bench.corpora.rmanuals_versions``), for the rule that the version to
answer from is the newest unless the question names another
(``injection.duplicates.passed_over``).  The folder to index holds two
version directories:

``3.11/``
    Debian bookworm's ``python3.11-doc`` 3.11.2-6+deb12u9, every page, exactly as
    ``bench.corpora.python311`` takes them.
``3.9/``
    Debian bullseye's ``python3.9-doc`` 3.9.2-1, the release bookworm's replaced,
    every page by the same rules.  Bookworm's apt sources do not list it, so it
    is downloaded from the Debian archive's pool (``deb.debian.org``) and checked
    against the SHA-256 of bullseye's ``Packages`` index.

The questions are ``bench.corpora.python311``'s answerable ones, written from
the 3.11 pages before any system output was seen; their page moves into
``3.11/``.  Nothing here was written for this corpus.

    python -m bench.corpora.python_versions [--cache DIR] [--dest DIR]   # materialise into DEST and verify
"""

from __future__ import annotations

from pathlib import Path

from bench.corpora import common, python311

NEW_DIR, OLD_DIR = "3.11", "3.9"
OLD_VERSION = "3.9.2-1"
OLD_URL = "http://deb.debian.org/debian/pool/main/p/python3.9/python3.9-doc_3.9.2-1_all.deb"
OLD_SHA256 = "ac9833e794eea7f87e57530c9b914d600ae469895614f8fcd2241b21d0694ecb"
OLD_HTML_DIR = "usr/share/doc/python3.9/html"
OLD_MIN_PAGES = 450
PACKAGE = python311.PACKAGE
VERSION = f"{python311.VERSION} + python3.9-doc {OLD_VERSION}"
DEFAULT_CACHE = python311.DEFAULT_CACHE  # the 3.11 download is shared with bench.corpora.python311
NAME = "python-versions"
ALONE = "python311"  # bench.transfer's corpus holding the newer release alone
PDF = False


def fetch_old(cache: Path) -> Path:
    """The unpacked 3.9 html directory (download, check and unpack once into ``cache``)."""
    deb = common.fetch_pool_deb(OLD_URL, OLD_SHA256, cache)
    return common.unpack(deb, cache / f"unpacked-{OLD_VERSION}", Path(OLD_HTML_DIR) / "index.html") / OLD_HTML_DIR


def materialise(cache: Path, dest: Path) -> Path:
    """``dest/3.11`` as ``bench.corpora.python311`` makes it, ``dest/3.9`` the older pages by the same rules."""
    dest = Path(dest)
    python311.materialise(cache, dest / NEW_DIR)
    python311.copy_pages(fetch_old(Path(cache)), dest / OLD_DIR)
    return dest


def load_questions() -> list[dict]:
    """The answerable python311 questions, their page (and distractor pages) in the 3.11 directory."""
    return common.versioned_questions(python311.load_questions(), NEW_DIR)


def _unprefixed(q: dict) -> dict:
    return common.unversioned(q, NEW_DIR)


def verify(dest: Path, questions: list[dict]) -> list[str]:
    """Problems: the 3.11 side as ``bench.corpora.python311`` checks it, the 3.9 side whole."""
    dest = Path(dest)
    problems = common.verify_versioned(python311.verify, python311.load_questions(), dest, (NEW_DIR, OLD_DIR), questions)
    old = sum(1 for _ in (dest / OLD_DIR).rglob("*.html"))
    if old < OLD_MIN_PAGES:
        problems.append(f"{OLD_DIR}: {old} pages, expected at least {OLD_MIN_PAGES}")
    return problems


def older_texts() -> dict[str, str]:
    """Each 3.9 page's main text (as ``bench.corpora.python311`` reads a page), by its path."""
    html = fetch_old(DEFAULT_CACHE)
    return {rel: python311.page_texts((html / rel).read_bytes())[0] for rel in python311.corpus_pages(html)}


def passage_in_older(q: dict, texts: dict[str, str]) -> bool:
    """Whether the question's passage is on the same page of 3.9 word for word."""
    rel = q["page"].split("/", 1)[1]
    return " ".join(q["passage"].split()) in texts.get(rel, "")


def count_pages(dest: Path) -> dict[str, int]:
    return {d: sum(1 for _ in (dest / d).rglob("*.html")) for d in (NEW_DIR, OLD_DIR)}


def main() -> None:
    common.main(__doc__ or "", "python311", materialise, lambda d, _q: verify(d, load_questions()), "*.html")


if __name__ == "__main__":
    main()
