"""The CMake HTML documentation of two Debian releases: bullseye's 3.18.4 (old) and bookworm's 3.25.1 (new).

``cmake-doc`` ships CMake's Sphinx-built reference (one page per command, variable, property, module,
policy, generator, environment variable; the manuals, guides and release notes) under
``usr/share/doc/cmake-data/html``.  A corpus folder holds EVERY HTML page of one release (no page limit),
at the documentation's own relative paths (``command/add_library.html``,
``variable/CMAKE_BUILD_TYPE.html``); left out are ``genindex.html`` and ``search.html`` and every non-page
file (``_static``, ``_sources``, ``_images``, ``objects.inv``, ``searchindex.js``).

``materialise(cache, dest)`` writes the NEW release (3.25.1-1, bookworm main, ``apt-get download``);
``materialise(cache, dest, OLD_VERSION)`` the OLD one (3.18.4-2+deb11u1, bullseye main: bookworm's apt
sources do not list it, so it is fetched from the Debian archive's pool and checked against the SHA-256 of
bullseye's ``Packages`` index).  Materialising one release over a folder holding the other IS the update:
changed pages are rewritten, new pages added, pages the release does not have removed, identical pages
left untouched (their mtime kept).  Freshness questions are answerable only after that update.

``verify(dest, questions)`` checks ``dest`` holds the new release's pages and the golden set with
``bench.corpora.blind``'s rules (a page's text: the visible text of Sphinx's ``role="main"`` block).
It does not index the pages nor ask the questions.

    python -m bench.corpora.cmake_docs [--dest DIR] [--old-dest DIR]   # materialise and verify
"""

from __future__ import annotations

from pathlib import Path

from bench.corpora import blind, common

NAME = "cmake_docs"
PACKAGE = "cmake-doc"
VERSION = "3.25.1-1"
OLD_VERSION = "3.18.4-2+deb11u1"
OLD_URL = "http://deb.debian.org/debian/pool/main/c/cmake/cmake-doc_3.18.4-2+deb11u1_all.deb"
OLD_SHA256 = "bbe5a83737c414a96ccab557d7b0129a2adc45f3d199c9ce4cbe57666021341b"
HTML_DIR = "usr/share/doc/cmake-data/html"
SKIP_PAGES = ("genindex.html", "search.html")
PAGES = {VERSION: 1934, OLD_VERSION: 1708}
DEFAULT_CACHE = common.cache_dir(NAME)
QUESTIONS = common.GOLDENS / NAME / "questions.jsonl"


def fetch(cache: Path, version: str = VERSION) -> Path:
    """The unpacked ``html/`` directory of ``version`` (downloaded and unpacked once into ``cache``)."""
    cache = Path(cache)
    if version == VERSION:
        deb = common.fetch_deb(PACKAGE, VERSION, cache)
    elif version == OLD_VERSION:
        deb = common.fetch_pool_deb(OLD_URL, OLD_SHA256, cache)
    else:
        raise ValueError(f"{PACKAGE} {version} is not pinned here ({VERSION} or {OLD_VERSION})")
    return common.unpack(deb, cache / f"unpacked-{version}", Path(HTML_DIR) / "index.html") / HTML_DIR


def corpus_pages(html: Path) -> list[str]:
    """Relative paths of the pages of one release, inside its unpacked html directory."""
    return sorted(rel for p in html.rglob("*.html") if (rel := p.relative_to(html).as_posix()) not in SKIP_PAGES)


def materialise(cache: Path, dest: Path, version: str = VERSION) -> Path:
    """Make ``dest`` hold exactly the pages of ``version`` (the update, when it held the other); return it."""
    html = fetch(Path(cache), version)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    wanted = corpus_pages(html)
    if len(wanted) != PAGES[version]:
        raise RuntimeError(f"{PACKAGE} {version}: {len(wanted)} pages, expected {PAGES[version]}")
    for rel in wanted:
        target = dest / rel
        data = (html / rel).read_bytes()
        if target.is_file() and target.read_bytes() == data:
            continue  # unchanged: keep its mtime, so a re-run does not look like an edit
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    keep = set(wanted)
    for path in sorted(dest.rglob("*"), reverse=True):  # pages of the other release, then emptied folders
        rel = path.relative_to(dest).as_posix()
        if path.is_file() and rel not in keep:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return dest


def old_folder(cache: Path = DEFAULT_CACHE) -> Path:
    """The old release's pages, materialised once under ``cache`` (what freshness passages must be absent from)."""
    return materialise(cache, Path(cache) / "corpus-old", OLD_VERSION)


def verify(dest: Path, questions: list[dict]) -> list[str]:
    """Problems with the new release in ``dest`` and with ``questions`` (empty when every check passes)."""
    dest = Path(dest)
    problems: list[str] = []
    found = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    if found != corpus_pages(fetch(DEFAULT_CACHE)):
        problems.append(f"{dest}: {len(found)} files, not the {PAGES[VERSION]} pages of {PACKAGE} {VERSION}")
    if questions:
        problems += blind.check(questions, old_folder(), dest)[0]
    return problems


def count_pages(dest: Path) -> int:
    return sum(1 for _ in Path(dest).rglob("*.html"))


def load_questions(path: Path = QUESTIONS) -> list[dict]:
    return common.load_questions(path) if path.is_file() else []


def main() -> None:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_CACHE / "corpus")
    parser.add_argument("--old-dest", type=Path, default=None, help="also write the old release's pages here")
    args = parser.parse_args()
    for version, folder in ((OLD_VERSION, args.old_dest), (VERSION, args.dest)):
        if folder is not None:
            root = materialise(DEFAULT_CACHE, folder, version)
            files = list(root.rglob("*.html"))
            print(f"{PACKAGE} {version}: {root} ({len(files)} pages, {sum(p.stat().st_size for p in files)} bytes)")
    problems = verify(args.dest, load_questions())
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
