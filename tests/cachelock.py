"""One lock per download cache, for tests that fetch real packages into a shared folder.

``make test`` runs the suite in several processes (pytest-xdist); two test files
that need the same Debian package or PyPI sdist would otherwise download and
unpack it into the same folder at once (one deleting the other's archive, a
rename finding its target taken).  What it does not do: lock across machines
or time out (a download has its own timeout).
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def cache_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder/.lock`` exclusively (flock) for the block; the folder is made when missing."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
