"""Cross-process locks on one host: an exclusive ``flock`` on a lock file, waited for up to a deadline.

Why: processes on one host share folders (the embedded store's root, a git
source's bare cache) and a read-modify-write there from two of them (an
``aliases.json`` rewrite, a ``git fetch`` updating refs) would otherwise lose
one of the writes or fail on git's own lock files.  The kernel drops the lock
of a killed process, so a crash never leaves it held.

What it does not do: lock across hosts (``flock`` is coherent within one
kernel; a root on a network file system shared by several machines is not
supported, see docs/operations.md), order its waiters, or protect a file
that a writer changes without taking the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from freshindex.core.errors import RetryableError, StoreBusyError


@contextlib.contextmanager
def exclusive(path: Path, *, timeout: float, what: str,
              error: type[RetryableError] = StoreBusyError) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the block.

    Raises ``error`` (retryable; :class:`StoreBusyError` by default) naming ``what``
    when another process holds it for longer than ``timeout`` seconds: a clear
    error, never a wait without end.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise error(f"{what} held by another process for over {timeout:g} s") from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
