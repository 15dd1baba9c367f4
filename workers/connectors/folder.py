"""A local folder as a source.

Keys are POSIX paths relative to the root.  Hidden files and folders (a
leading dot) are skipped.  Symbolic links are followed only when they stay
inside the root; a link that leaves the root or dangles is listed, so that
its failure is recorded against the document instead of vanishing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from core.errors import DocumentError, SourceError
from core.types import ObjectRef


class FolderConnector:
    def __init__(self, root: str | Path, *, max_bytes: int) -> None:
        self.root = Path(root).expanduser().resolve()
        self.max_bytes = max_bytes

    def list(self) -> Iterator[ObjectRef]:
        if not self.root.is_dir():
            raise SourceError(f"folder {self.root} does not exist or is not a folder")
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                path = Path(dirpath) / name
                key = path.relative_to(self.root).as_posix()
                try:
                    st = path.stat()
                except OSError:
                    st = path.lstat()  # dangling link: list it, fetching it will fail
                    yield ObjectRef(key=key, etag=f"broken-{st.st_mtime_ns}", size=0, modified=st.st_mtime)
                    continue
                if not path.is_file():
                    continue  # sockets, FIFOs, devices
                yield ObjectRef(key=key, etag=f"{st.st_mtime_ns}-{st.st_size}", size=st.st_size, modified=st.st_mtime)

    def fetch(self, key: str) -> bytes:
        path = (self.root / key)
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            if path.is_symlink():
                raise DocumentError(DocumentError.UNREADABLE, f"broken symbolic link: {exc}") from exc
            raise DocumentError(DocumentError.VANISHED, f"{key} disappeared after listing") from exc
        if not resolved.is_relative_to(self.root):
            raise DocumentError(DocumentError.UNSAFE_KEY, f"{key} resolves outside the source folder")
        try:
            size = resolved.stat().st_size
            if size > self.max_bytes:
                raise DocumentError(DocumentError.TOO_LARGE, f"{size} bytes, limit {self.max_bytes}")
            with open(resolved, "rb") as fh:
                data = fh.read(self.max_bytes + 1)
        except PermissionError as exc:
            raise DocumentError(DocumentError.UNREADABLE, f"permission denied: {exc.filename}") from exc
        except IsADirectoryError as exc:
            raise DocumentError(DocumentError.UNREADABLE, f"{key} is a directory") from exc
        except OSError as exc:
            raise DocumentError(DocumentError.UNREADABLE, f"{exc.strerror or exc}") from exc
        if len(data) > self.max_bytes:
            raise DocumentError(DocumentError.TOO_LARGE, f"more than {self.max_bytes} bytes")
        return data
