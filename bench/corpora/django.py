"""The Django 3.2.25 HTML documentation from Debian bookworm's python-django-doc, whole, as a golden-set corpus.

The release is ``3:3.2.25-0+deb12u7`` (bookworm-security), the newer of the
two releases ``bench.evidence`` uses.  ``materialise`` downloads the .deb
with ``apt-get download`` into ``cache`` (reused when present; an ``apt-get
update`` only when the first try fails), unpacks it with ``dpkg-deb -x`` and
copies EVERY HTML page of the documentation (no page limit) into ``dest``,
keeping the documentation's own relative paths (``topics/http/sessions.html``
...).  Left out: the generated ``genindex.html``, ``py-modindex.html`` and
``search.html`` (the same rule as ``bench.evidence``), and every non-page
file (``_static``, ``_sources``, ``_images`` hold no ``.html``).

``verify`` checks the golden questions against the materialised pages with
``bench.evidence``'s rules (a page's text is its whole visible text; passages
compared with whitespace and ``|`` removed; an unanswerable question's key
terms must occur nowhere in the corpus, as a whole word).  The golden set was
written on a 60-page sample, so the key-term check over the WHOLE corpus can
fail where it passed then.  ``update_only`` questions are left unchecked here:
they need the older release, and ``bench.evidence`` checks them.

    python -m bench.corpora.django [--cache DIR] [--dest DIR]
"""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.corpora import common

PACKAGE = "python-django-doc"
VERSION = "3:3.2.25-0+deb12u7"
HTML_DIR = f"usr/share/doc/{PACKAGE}/html"
SKIP_PAGES = ("genindex.html", "py-modindex.html", "search.html")
MIN_PAGES = 400

DEFAULT_CACHE = common.cache_dir("django")
QUESTIONS = Path(__file__).resolve().parents[1] / "goldens" / "django" / "questions.jsonl"


def fetch(cache: Path) -> Path:
    """The unpacked ``html/`` directory of the release (download and unpack once into ``cache``)."""
    root = cache / VERSION.split("+")[-1]  # the directory bench.evidence unpacks into: shared, not duplicated
    if not (root / HTML_DIR / "index.html").is_file():
        common.unpack(common.fetch_deb(PACKAGE, VERSION, cache), root, Path(HTML_DIR) / "index.html")
    return root / HTML_DIR


def corpus_pages(html: Path) -> list[str]:
    """Relative paths of the pages that make up the corpus, inside the unpacked html directory."""
    return sorted(rel for p in html.rglob("*.html") if (rel := p.relative_to(html).as_posix()) not in SKIP_PAGES)


def materialise(cache: Path, dest: Path) -> Path:
    """Put every page of the corpus under ``dest`` and return ``dest``, the folder to index."""
    html = fetch(Path(cache))
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    wanted = set(corpus_pages(html))
    for rel in sorted(wanted):
        target = dest / rel
        if target.is_file() and target.stat().st_size == (html / rel).stat().st_size:
            continue  # already there: keep its mtime, so a re-run does not look like an edit
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html / rel, target)
    for path in dest.rglob("*.html"):  # pages left by an earlier materialisation of another version
        if path.relative_to(dest).as_posix() not in wanted:
            path.unlink()
    return dest


def verify(dest: Path, questions: list[dict]) -> list[str]:
    """Problems with ``questions`` against the corpus in ``dest`` (empty when every check passes).

    Each problem about one question starts with its id and ``": "``.
    """
    from bench.evidence import pages, verify_golden

    tree = pages(Path(dest))
    problems: list[str] = []
    if len(tree) < MIN_PAGES:
        problems.append(f"{dest}: {len(tree)} pages, expected at least {MIN_PAGES}")
    checked = [q for q in questions if q.get("kind") != "update_only"]  # bench.evidence checks those (u3 and u7)
    # The same release on both sides: the passages must be on their page of u7, distractor pages must not hold them.
    return problems + verify_golden(checked, tree, tree)


def load_questions(path: Path = QUESTIONS) -> list[dict]:
    return common.load_questions(path)


def main() -> None:
    common.main(__doc__ or "", "django", materialise, verify, "*.html")


if __name__ == "__main__":
    main()
