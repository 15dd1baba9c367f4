"""The R manuals of two releases side by side: the current one and the one it replaced.

A real older version of every page, for the rule that the newest valid
version is the answer and an older copy only its mirror
(``injection.duplicates``).  The folder to index holds two version
directories:

``4.2.2/``
    Debian bookworm's ``r-doc-pdf`` 4.2.2.20221110-2, made exactly as
    ``bench.corpora.rmanuals`` makes it (seven manuals whole, 25 pages turned
    into scans).
``4.0.4/``
    Debian bullseye's ``r-doc-pdf`` 4.0.4-1, the release bookworm's replaced:
    the same seven manuals as shipped (662 pages, text layer). Bookworm's apt
    sources do not list it, so it is downloaded from the Debian archive's pool
    (``deb.debian.org``) and checked against the SHA-256 of bullseye's
    ``Packages`` index.

The questions are ``bench.corpora.rmanuals``'s answerable ones, written from
the 4.2.2 pages before any system output was seen; their page moves into
``4.2.2/``.  Nothing here was written for this corpus.

    python -m bench.corpora.rmanuals_versions [--cache DIR] [--dest DIR]   # materialise into DEST and verify
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pymupdf

from bench.corpora import common, rmanuals

NEW_DIR, OLD_DIR = "4.2.2", "4.0.4"
OLD_VERSION = "4.0.4-1"
OLD_URL = "http://deb.debian.org/debian/pool/main/r/r-base/r-doc-pdf_4.0.4-1_all.deb"
OLD_SHA256 = "43ed1dfcc8274bf77c86583b3a2b074c5ba9de2a6e3f08e673929f0a4627299a"
OLD_PAGES = {"R-FAQ.pdf": 50, "R-admin.pdf": 86, "R-data.pdf": 41, "R-exts.pdf": 225, "R-intro.pdf": 113,
             "R-ints.pdf": 78, "R-lang.pdf": 69}
PACKAGE = rmanuals.PACKAGE
VERSION = f"{rmanuals.VERSION} + {OLD_VERSION}"
DEFAULT_CACHE = rmanuals.DEFAULT_CACHE  # the 4.2.2 download is shared with bench.corpora.rmanuals


def fetch_old(cache: Path) -> Path:
    """The unpacked 4.0.4 manuals directory (download, check and unpack once into ``cache``)."""
    root = cache / "x-4.0.4"
    manuals = root / rmanuals.MANUALS_DIR
    if all((manuals / m).exists() for m in rmanuals.MANUALS):
        return manuals
    common.unpack(common.fetch_pool_deb(OLD_URL, OLD_SHA256, cache), root,
                  Path(rmanuals.MANUALS_DIR) / rmanuals.MANUALS[0])
    return manuals


def materialise(cache: Path, dest: Path) -> Path:
    """``dest/4.2.2`` as ``bench.corpora.rmanuals`` makes it, ``dest/4.0.4`` the older manuals as shipped."""
    dest = Path(dest)
    rmanuals.materialise(cache, dest / NEW_DIR)
    old = fetch_old(Path(cache))
    (dest / OLD_DIR).mkdir(parents=True, exist_ok=True)
    for m in rmanuals.MANUALS:
        shutil.copyfile(old / m, dest / OLD_DIR / m)
    return dest


def load_questions() -> list[dict]:
    """The answerable rmanuals questions, their page (and distractor pages) in the 4.2.2 directory."""
    return common.versioned_questions(rmanuals.load_questions(), NEW_DIR)


def _unprefixed(q: dict) -> dict:
    return common.unversioned(q, NEW_DIR)


def verify(dest: Path, questions: list[dict]) -> list[str]:
    """Problems with ``dest`` and ``questions``: the 4.2.2 side as ``bench.corpora.rmanuals`` checks it, the
    4.0.4 side byte-equal to the shipped manuals."""
    dest = Path(dest)
    problems = common.verify_versioned(rmanuals.verify, rmanuals.load_questions(), dest, (NEW_DIR, OLD_DIR), questions)
    old = fetch_old(DEFAULT_CACHE)
    for m in rmanuals.MANUALS:
        path = dest / OLD_DIR / m
        if not path.is_file() or path.read_bytes() != (old / m).read_bytes():
            problems.append(f"{OLD_DIR}/{m}: not the shipped manual")
        elif len(pymupdf.open(path)) != OLD_PAGES[m]:
            problems.append(f"{OLD_DIR}/{m}: {len(pymupdf.open(path))} pages, expected {OLD_PAGES[m]}")
    return problems


NAME = "rmanuals-versions"
ALONE = "rmanuals"  # bench.transfer's corpus holding the newer release alone
PDF = True


def older_texts() -> dict[str, str]:
    """Each 4.0.4 manual's whole text, whitespace collapsed."""
    old = fetch_old(DEFAULT_CACHE)
    return {m: " ".join(" ".join(p.get_text().split()) for p in pymupdf.open(old / m)) for m in rmanuals.MANUALS}


def passage_in_older(q: dict, texts: dict[str, str]) -> bool:
    """Whether the question's passage is in its manual's 4.0.4 text word for word (anywhere in the manual)."""
    name = q["page"].split("/", 1)[1].partition("#page=")[0]
    return " ".join(q["passage"].split()) in texts[name]


def count_pages(dest: Path) -> dict[str, int]:
    return {d: sum(len(pymupdf.open(p)) for p in sorted((dest / d).glob("*.pdf"))) for d in (NEW_DIR, OLD_DIR)}


def main() -> None:
    common.main(__doc__ or "", "rmanuals", materialise, lambda d, _q: verify(d, load_questions()), "*.pdf")


if __name__ == "__main__":
    main()
