"""Real package releases for tests: a source distribution from the package index, downloaded once.

``sdist_tree(name, version)`` runs ``pip download --no-deps --no-binary :all:``
into the bench cache (``bench.corpora.common.cache_dir("pypi")``), unpacks the
archive next to it and returns the unpacked release folder; later calls reuse
both.  Offline (or the index unreachable) it returns None with the reason in
``sdist_tree.last_error``, so a test can skip with it.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

from bench.corpora import common
from tests.cachelock import cache_lock


def sdist_tree(name: str, version: str) -> Path | None:
    cache = common.cache_dir("pypi")
    with cache_lock(cache):  # another test process may be fetching the same release now
        return _fetch(cache, name, version)


def _fetch(cache: Path, name: str, version: str) -> Path | None:
    unpacked = cache / f"{name}-{version}"
    if (unpacked / "PKG-INFO").is_file():
        return unpacked
    archive = cache / f"{name}-{version}.tar.gz"
    if not archive.is_file():
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               f"{name}=={version}", "-d", str(cache)], capture_output=True, text=True,
                              timeout=300, check=False)
        if proc.returncode != 0 or not archive.is_file():
            sdist_tree.last_error = f"pip download {name}=={version} failed: {proc.stderr.strip()[-300:]}"
            return None
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    return unpacked if (unpacked / "PKG-INFO").is_file() else None


sdist_tree.last_error = ""  # type: ignore[attr-defined]

__all__ = ["sdist_tree"]
