"""A local folder as a source.

Keys are POSIX paths relative to the root.  Hidden files and folders (a
leading dot) are skipped.  Symbolic links are followed only when they stay
inside the root.  Nothing is left out silently:

* a link (to a file or a folder) that leads out of the root is listed under
  its own key and fails as ``symlink_outside`` when fetched, so it is
  counted, shown by ``freshindex errors`` and never followed;
* a dangling link is listed and fails as ``unreadable``;
* a sub-folder that cannot be read fails the whole listing with
  :class:`core.errors.SourceError`: leaving it out would make every
  document under it look deleted and tombstone it.

A link to a folder inside the root is not followed (its files are listed
under their real path) and is not an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from freshindex.acl.model import FOLDER_SIDECAR, is_sidecar
from freshindex.core.errors import DocumentError, SourceError
from freshindex.core.types import ObjectRef


class FolderConnector:
    def __init__(self, root: str | Path, *, max_bytes: int) -> None:
        self.root = Path(root).expanduser().resolve()
        self.max_bytes = max_bytes
        #: ACL sidecars (``.freshindex-acl.json``, ``<name>.acl.json``) the last
        #: listing saw: never listed as documents, read by ACL resolution.
        self.sidecar_keys: set[str] = set()

    def list(self) -> Iterator[ObjectRef]:
        if not self.root.is_dir():
            raise SourceError(f"folder {self.root} does not exist or is not a folder")

        def unreadable(exc: OSError) -> None:
            raise SourceError(
                f"cannot read folder {exc.filename or self.root}: {exc.strerror or exc}; the listing would "
                "miss its documents (and delete them from the index), so the sync stops"
            ) from exc

        self.sidecar_keys = set()
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False, onerror=unreadable):
            links = sorted(d for d in dirnames if not d.startswith(".") and (Path(dirpath) / d).is_symlink())
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in links)
            for name in links:
                path = Path(dirpath) / name
                if not self._inside(path):
                    yield self._link_ref(path)
            for name in sorted(filenames):
                if name.startswith(".") and name != FOLDER_SIDECAR:
                    continue
                path = Path(dirpath) / name
                key = path.relative_to(self.root).as_posix()
                if is_sidecar(key):
                    self.sidecar_keys.add(key)
                    continue
                try:
                    st = path.stat()
                except OSError:
                    st = path.lstat()  # dangling link: list it, fetching it will fail
                    yield ObjectRef(key=key, etag=f"broken-{st.st_mtime_ns}", size=0, modified=st.st_mtime)
                    continue
                if path.is_symlink() and not self._inside(path):
                    yield self._link_ref(path)
                    continue
                if not path.is_file():
                    continue  # sockets, FIFOs, devices
                yield ObjectRef(key=key, etag=f"{st.st_mtime_ns}-{st.st_size}", size=st.st_size, modified=st.st_mtime)

    def _inside(self, path: Path) -> bool:
        try:
            return path.resolve(strict=True).is_relative_to(self.root)
        except (OSError, RuntimeError):  # dangling or a loop: not a way out, fetching reports it
            return True

    def _link_ref(self, path: Path) -> ObjectRef:
        st = path.lstat()
        # The etag changes when the link is re-pointed, so a fixed link is retried.
        target = os.readlink(path)
        return ObjectRef(key=path.relative_to(self.root).as_posix(), etag=f"symlink-{st.st_mtime_ns}-{target}",
                         size=0, modified=st.st_mtime)

    def fetch(self, key: str) -> bytes:
        path = (self.root / key)
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            if path.is_symlink():
                raise DocumentError(DocumentError.UNREADABLE, f"broken symbolic link: {exc}") from exc
            raise DocumentError(DocumentError.VANISHED, f"{key} disappeared after listing") from exc
        if not resolved.is_relative_to(self.root):
            what = "folder" if resolved.is_dir() else "file"
            raise DocumentError(
                DocumentError.SYMLINK_OUTSIDE,
                f"{key} is a symbolic link to a {what} outside the source folder ({resolved}); it is not followed",
            )
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
