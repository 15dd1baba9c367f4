"""A real, small tmpfs for disk-full tests: mounted by the test, unmounted after, skipped where mounting is refused.

Mounting needs root (or CAP_SYS_ADMIN); elsewhere the test skips with that
reason and does not count as passed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted(path: Path, size: str) -> Iterator[Path]:
    """``path`` as a fresh tmpfs of ``size`` (``8m``, ``256m``) for the block's life."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root and mount(8); this test does not run here")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {done.stderr.strip()[:200]}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(folder: Path, name: str = "filler") -> Path:
    """Write zeros into ``folder/name`` until the file system says it is full; the file is returned."""
    filler = folder / name
    block = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as out:
        for chunk in (block, b"\0" * 4096):
            try:
                while True:
                    out.write(chunk)
            except OSError:
                continue
    return filler


def free(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize
