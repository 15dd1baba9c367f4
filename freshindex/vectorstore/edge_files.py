"""The files of a Qdrant Edge store root: shard copies, the alias file, archives.

What :class:`vectorstore.edge.EdgeStore` does with files and directories,
apart from opening shards: copying a shard's data extents (a clone), writing
``aliases.json`` atomically (a swap), and packing a closed shard directory
into a tar (an archive) and back.  Plain functions of paths; no shard is
opened here, and nothing here takes the store's locks (the caller does).
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from freshindex.core.errors import StoreError


def is_scratch(name: str) -> bool:
    """A process that opens a shard (a reader included) writes short-lived
    ``.atomicwrite*`` temporaries into its folder: never part of the data."""
    return name.startswith(".atomicwrite") or name.endswith(".tmp")


def reader_scratch(_dir: str, names: list[str]) -> set[str]:
    """``shutil.copytree``'s ``ignore``: the readers' scratch files of a folder."""
    return {n for n in names if is_scratch(n)}


def tolerant_copy(src: str, dst: str) -> str:
    """:func:`sparse_copy`, except that a reader's scratch file vanishing mid-copy is skipped."""
    try:
        return sparse_copy(src, dst)
    except FileNotFoundError:
        if is_scratch(os.path.basename(src)):
            return dst
        raise


def sparse_copy(src: str, dst: str) -> str:
    """Copy a file's data extents only.

    Edge preallocates its mmap files (a 10k-chunk shard is 67 MB apparent,
    17 MB on disk); copying the holes as zeros would make a clone cost the
    preallocation instead of the data.
    """
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fin.fileno(), offset, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole remains
                break
            end = os.lseek(fin.fileno(), start, os.SEEK_HOLE)
            pos = start
            while pos < end:
                copied = os.copy_file_range(fin.fileno(), fout.fileno(), end - pos, pos, pos)
                if copied == 0:
                    raise OSError(f"copy_file_range made no progress on {src} at {pos}")
                pos += copied
            offset = end
        fout.truncate(size)
    shutil.copystat(src, dst)
    return dst


def copy_shard(source: Path, path: Path) -> None:
    """Copy the flushed shard directory ``source`` to ``path`` through a temporary sibling
    (data extents only, readers' scratch files left out); a copy that fails (a full disk) is removed."""
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(source, tmp, copy_function=tolerant_copy, ignore=reader_scratch)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_aliases(root: Path) -> dict[str, str]:
    """``aliases.json`` under ``root`` (empty when no alias was ever set)."""
    try:
        return json.loads((root / "aliases.json").read_text())
    except FileNotFoundError:
        return {}


def write_aliases(root: Path, aliases: dict[str, str]) -> None:
    """Replace ``aliases.json`` atomically: a fsynced temporary file, ``os.replace``, the folder fsynced.
    A reader opens either the old file or the new one."""
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".aliases.", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(aliases, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, root / "aliases.json")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(root)


def pack_shard(path: Path, dest: Path) -> None:
    """A tar of the (flushed and closed) shard directory ``path``, its files under ``shard/``."""
    with tarfile.open(dest, "w") as tar:
        tar.add(path, arcname="shard")


def unpack_shard(path: Path, source: Path | str) -> None:
    """Extract an archive of :func:`pack_shard` as the shard directory ``path`` (which must not exist).

    Only plain files and folders under ``shard/`` are accepted; the archive is
    extracted beside ``path`` and moved into place once it holds a shard."""
    if path.exists():
        raise StoreError(f"collection {path.name!r} already exists")
    tmp = path.with_name(f".{path.name}.import")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with tarfile.open(Path(source), "r") as tar:
            members = tar.getmembers()
            for m in members:
                if not (m.isfile() or m.isdir()) or not (m.name == "shard" or m.name.startswith("shard/")):
                    raise StoreError(f"unexpected member {m.name!r} in a collection archive")
            tar.extractall(tmp, members=members, filter="data")
        if not (tmp / "shard" / "edge_config.json").exists():
            raise StoreError("the archive holds no edge shard")
        os.replace(tmp / "shard", path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
