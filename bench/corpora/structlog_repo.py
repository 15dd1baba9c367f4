"""structlog's release history 24.4.0 .. 25.5.0 as a local git repository, to index through ``--kind git``.

Six consecutive releases of structlog (PyPI sdists: MyST Markdown docs under ``docs/``, the package under
``src/structlog``, tests, changelog), committed in order into one repository by
``bench.corpora.release_repo`` (one commit per release on ``main``, tagged ``v<version>``; ``PKG-INFO``
left out).  The OLD release, the one a knowledge base is first indexed at, is 24.4.0 (``OLD_COMMIT``);
the update moves ``main`` through the other five releases to 25.5.0 (``NEW_COMMIT``).  A question's
``page`` is a path in the repository (``docs/processors.md``, ``src/structlog/dev.py``), and its passage
is checked against the 25.5.0 work tree (``bench.corpora.blind``'s rules).  It does not index the
repository nor ask the questions: a benchmark does, as a ``git`` source (``SOURCE_OPTIONS``).

    python -m bench.corpora.structlog_repo [--cache DIR] [--dest DIR] [--upto VERSION]   # build and verify
"""

from __future__ import annotations

from bench.corpora import common, release_repo

NAME = "structlog_repo"
PACKAGE = "structlog"
HISTORY = release_repo.History(
    PACKAGE,
    (("24.4.0", "b27bfecede327a6d2da5fbc96bd859f114ecc398a6389d664f62085ee7ae6fc4"),
     ("25.1.0", "2ef2a572e0e27f09664965d31a576afe64e46ac6084ef5cec3c2b8cd6e4e3ad3"),
     ("25.2.0", "d9f9776944207d1035b8b26072b9b140c63702fd7aa57c2f85d28ab701bd8e92"),
     ("25.3.0", "8dab497e6f6ca962abad0c283c46744185e0c9ba900db52a423cb6db99f7abeb"),
     ("25.4.0", "186cd1b0a8ae762e29417095664adf1d6a31702160a46dacb7796ea82f7409e4"),
     ("25.5.0", "098522a3bebed9153d4570c6d0288abf80a031dfdb2048d59a49e9dc2190fc98")),
    ("98b8fab1c6a0e21b42eb27c6520211f23b564cc3",
     "ef53f422a58425f74c230d74f3767f6b4095eb3d",
     "7aea93f251eb65a93e16ed33696019036990f4f5",
     "22c9fa09645c53276831d11019bee45ab1d9c30d",
     "02f79283344408f38db8d1046e7703aa1e01e702",
     "80b867d1fabef4dc989fc6714cb9f369d2ec21c1"),
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
