"""Room on the file system under an Edge store: checked before a shard is mapped or written.

Qdrant Edge maps its files into memory and preallocates them sparse (a
26-point shard is about 165 MB apparent and under 1 MB on ext4).  A page of a
mapping that the file system cannot back is not an error the engine can
return: the kernel sends SIGBUS and the process dies (exit 135).  Measured
on this project's engine (qdrant-edge-py 0.9.0):

* on **tmpfs** (``emptyDir: {medium: Memory}``, ``/dev/shm``, most ``/tmp``
  of containers) reading a hole allocates a page: loading a shard touches
  most of its mapped files (the tmpfs under a 26-point shard went from 22 MB
  to 104 MB used at its first query), so a query or ``snapshots verify`` on
  a full tmpfs, or on one with less free space than the shard's holes, died
  with SIGBUS;
* on **ext4** reading a hole allocates nothing: a query and a verify of the
  same shard on a full ext4 answered, or failed with the engine's own "No
  space left on device" (opening writes a small temporary file); none died.
  Writing into a hole on a full disk is what faults there (a build).

So: before a shard is mapped for reading, the bytes its files could still
fault in (:func:`holes`: apparent size minus allocated blocks) must be free
where reading allocates (:func:`reads_allocate`); before any write,
:data:`WRITE_HEADROOM` bytes must be free (plus the holes, on tmpfs).  A
shortfall is a :class:`core.errors.StoreError` naming the folder and the
figures, which the CLI prints as one line (exit 1) and the HTTP API answers
with 503.

What this does not guarantee: it is a check, not a reservation (reserving
would cost every preallocated byte: 165 MB for a 26-point shard on tmpfs), so
another process that fills the disk between the check and the fault can
still cause a SIGBUS; the headroom of a write is an estimate (one upsert batch
and one new 32 MB preallocated file of the engine), not a bound the engine
promises; other file systems whose reads allocate (ramfs has no limit,
hugetlbfs is not used for files) are treated as ext4 is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

from freshindex.core.errors import StoreError

#: ``statfs.f_type`` of tmpfs (and of the shmem behind ``/dev/shm``), from ``linux/magic.h``.
TMPFS_MAGIC = 0x01021994
#: Bytes that must stay free under the store before anything is written to it: one upsert batch of the
#: engine and a new preallocated 32 MB file (vectors, payload pages) with room to spare.
WRITE_HEADROOM = 64 * 1024 * 1024

_libc = None


def _fs_type(path: Path) -> int | None:
    """The file system magic of ``path`` (``statfs(2)``), or None where it cannot be read (not Linux)."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux; f_type comes first
        if _libc.statfs(os.fsencode(path), buf) != 0:
            return None
        return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    except (OSError, AttributeError):
        return None


def reads_allocate(path: Path) -> bool:
    """Whether reading a hole of a mapped file under ``path`` allocates a page (tmpfs: yes; ext4, xfs: no)."""
    return _fs_type(path) == TMPFS_MAGIC


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system of ``path`` (``statvfs`` ``f_bavail``)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def holes(shard: Path) -> int:
    """Bytes the files of the shard folder ``shard`` could still fault in: apparent size minus allocated
    blocks, summed over its files (0 for a folder that is gone)."""
    total = 0
    for dirpath, _dirs, files in os.walk(shard):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:  # a reader's scratch file came and went
                continue
            total += max(0, st.st_size - st.st_blocks * 512)
    return total


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def check_readable(shard: Path, name: str) -> None:
    """Refuse to map the shard ``shard`` (collection ``name``) where its holes could not be backed.

    Only where reading allocates (:func:`reads_allocate`): elsewhere a read
    of a hole costs nothing and a full disk does not stop a query.
    """
    if not shard.exists() or not reads_allocate(shard):
        return
    need, free = holes(shard), free_bytes(shard)
    if need > free:
        raise StoreError(
            f"no space left to open collection {name!r}: its files under {shard.parent} can still take "
            f"{_mib(need)} on this tmpfs and {_mib(free)} is free (free space or grow the volume; see "
            "runbooks/freshindex-disk-low.md)")


def check_writable(root: Path, name: str, shard: Path | None = None, *, incoming: int = 0) -> None:
    """Refuse a write to collection ``name`` under the store ``root`` with less than the headroom free.

    The headroom is :data:`WRITE_HEADROOM` plus ``incoming`` (bytes about to
    be copied in: a clone's data), plus the holes of ``shard`` (an existing
    shard written into) where reading allocates.
    """
    need = WRITE_HEADROOM + incoming
    if shard is not None and shard.exists() and reads_allocate(root):
        need += holes(shard)
    free = free_bytes(root)
    if need > free:
        raise StoreError(
            f"no space left to write collection {name!r}: {_mib(free)} free under {root}, {_mib(need)} needed "
            "(free space or grow the volume; see runbooks/freshindex-disk-low.md)")


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` (an ``OSError``, or the engine's plain ``Exception`` text) says the disk is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return "No space left on device" in text or "os error 28" in text or "Disk quota exceeded" in text


__all__ = ["TMPFS_MAGIC", "WRITE_HEADROOM", "check_readable", "check_writable", "free_bytes", "holes",
           "out_of_space", "reads_allocate"]
