"""Python-Markdown's release history 3.7 .. 3.10 as a local git repository, to index through ``--kind git``.

Six consecutive releases of Python-Markdown (PyPI package ``markdown``; sdists with the MkDocs Markdown
docs under ``docs/``, the package under ``markdown/``, the test suite under ``tests/``), committed in order
into one repository by ``bench.corpora.release_repo`` (one commit per release on ``main``, tagged
``v<version>``; ``PKG-INFO``, ``Markdown.egg-info`` and the generated ``setup.cfg`` left out).  The OLD
release, the one a knowledge base is first indexed at, is 3.7 (``OLD_COMMIT``); the update moves ``main``
through 3.8, 3.8.1, 3.8.2 and 3.9 to 3.10 (``NEW_COMMIT``).  A question's ``page`` is a path in the
repository (``docs/extensions/toc.md``, ``markdown/extensions/toc.py``), and its passage is checked
against the 3.10 work tree (``bench.corpora.blind``'s rules).  It does not index the repository nor
ask the questions: a benchmark does, as a ``git`` source (``SOURCE_OPTIONS``).

    python -m bench.corpora.markdown_repo [--cache DIR] [--dest DIR] [--upto VERSION]   # build and verify
"""

from __future__ import annotations

from bench.corpora import common, release_repo

NAME = "markdown_repo"
PACKAGE = "markdown"
HISTORY = release_repo.History(
    PACKAGE,
    (("3.7", "2ae2471477cfd02dbbf038d5d9bc226d40def84b4fe2986e49b59b6b472bbed2"),
     ("3.8", "7df81e63f0df5c4b24b7d156eb81e4690595239b7d70937d0409f1b0de319c6f"),
     ("3.8.1", "a2e2f01cead4828ee74ecca9623045f62216aef2212a7685d6eb9163f590b8c1"),
     ("3.8.2", "247b9a70dd12e27f67431ce62523e675b866d254f900c4fe75ce3dda62237c45"),
     ("3.9", "d2900fe1782bd33bdbbd56859defef70c2e78fc46668f8eb9df3128138f2cb6a"),
     ("3.10", "37062d4f2aa4b2b6b32aefb80faa300f82cc790cb949a35b8caede34f2b68c0e")),
    ("dae2a3b237bd94886695a5b60768659e4a1f93f1",
     "9a7ed38513ca1cfa32da885ba48f1c68ff55dc9d",
     "c5076252b315c5cee9e2a9e5c852c9a3436a9684",
     "81429afa6a1a2320d91d6c764c961956aca96e1f",
     "4165e2329b6952f9d24846f41146a1d7e752dc10",
     "63610d10489e0fd754d29eccf9b6c2ebce10cf5a"),
)
OLD_VERSION, NEW_VERSION = HISTORY.old, HISTORY.new
OLD_COMMIT, NEW_COMMIT = HISTORY.commits[0], HISTORY.commits[-1]
VERSION = f"{PACKAGE} {OLD_VERSION} -> {NEW_VERSION}"
SOURCE_KIND, SOURCE_OPTIONS = "git", {"ref": "main"}
DEFAULT_CACHE = common.cache_dir(NAME)
_MODULE = release_repo.CorpusModule(NAME, HISTORY, __doc__ or "")
QUESTIONS = _MODULE.questions
materialise, verify, count_pages = _MODULE.materialise, _MODULE.verify, _MODULE.count_pages
load_questions, main = _MODULE.load_questions, _MODULE.main

if __name__ == "__main__":
    main()
