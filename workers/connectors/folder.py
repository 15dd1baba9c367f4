"""A local folder as a source.

Keys are POSIX paths relative to the root.  Hidden files and folders (a
leading dot) are skipped.  Symbolic links are followed only when they stay
inside the root.  Nothing is left out silently:

* a link (to a file or a folder) that leads out of the root is listed under
  its own key and fails as ``symlink_outside`` when fetched, so it is
  counted, shown by ``freshindex errors`` and never followed;
* a dangling link is listed and fails as ``unreadable``;
* a sub-folder that cannot be read (no read permission, or no search
  permission so its entries cannot be opened) is listed as one entry, its
  key with a trailing slash (``team/``), which fails as ``unreadable``; its
  key prefix is in :attr:`FolderConnector.unlisted_prefixes`, and the sync
  keeps the documents under it as they were (leaving them out would make
  them look deleted and tombstone them) while the rest of the source is
  indexed;
* the root itself unreadable fails the whole listing with
  :class:`core.errors.SourceError`.

A link to a folder inside the root is not followed (its files are listed
under their real path) and is not an error.
"""

from __future__ import annotations

import builtins
import functools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from freshindex.acl.model import FOLDER_SIDECAR, is_sidecar
from freshindex.core.errors import ConfigError, DocumentError, SourceError
from freshindex.core.types import ObjectRef
from freshindex.workers.connectors import Sidecars, UnlistedPrefixes
from freshindex.workers.connectors.options import SourceOptions
from freshindex.workers.connectors.registry import ConnectorSpec


class FolderConnector:
    def __init__(self, root: str | Path, *, max_bytes: int) -> None:
        self.root = Path(root).expanduser().resolve()
        self.max_bytes = max_bytes
        #: ACL sidecars (``.freshindex-acl.json``, ``<name>.acl.json``) the last
        #: listing saw: never listed as documents, read by ACL resolution.
        self.sidecar_keys: set[str] = set()
        #: Key prefixes (``team/``) of sub-folders the last listing could not read: the
        #: sync deletes nothing under them (workers/planner.py).
        self.unlisted_prefixes: frozenset[str] = frozenset()
        self._unlisted_why: dict[str, str] = {}

    def list(self) -> Iterator[ObjectRef]:
        try:
            is_dir = self.root.is_dir()
        except OSError as exc:  # a folder above the root cannot be searched
            raise SourceError(f"cannot reach folder {self.root}: {exc.strerror or exc}") from exc
        if not is_dir:
            raise SourceError(f"folder {self.root} does not exist or is not a folder")
        unlisted: dict[str, str] = {}

        def unreadable(exc: OSError) -> None:
            where = Path(exc.filename) if exc.filename else self.root
            if where == self.root:
                raise SourceError(
                    f"cannot read folder {self.root}: {exc.strerror or exc}; the listing would miss its "
                    "documents (and delete them from the index), so the sync stops"
                ) from exc
            unlisted[self._folder_key(where)] = exc.strerror or str(exc)

        self.sidecar_keys = set()
        self.unlisted_prefixes = frozenset()
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False, onerror=unreadable):
            try:
                refs = list(self._folder_refs(Path(dirpath), dirnames, filenames))
            except PermissionError as exc:  # names readable, entries not (no search permission)
                dirnames[:] = []
                unlisted[self._folder_key(Path(dirpath))] = exc.strerror or str(exc)
                continue
            yield from refs
        self.unlisted_prefixes = frozenset(unlisted)
        self._unlisted_why = dict(unlisted)
        for key, why in sorted(unlisted.items()):
            # Listed so that the sync records it (reason unreadable) and keeps what was indexed under it.
            yield ObjectRef(key=key, etag=f"unreadable-{why}", size=0, modified=None)

    def _folder_key(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() + "/"

    def _folder_refs(self, dirpath: Path, dirnames: builtins.list[str],  # `list` is the method above
                     filenames: builtins.list[str]) -> Iterator[ObjectRef]:
        """The refs of one folder's files (and of links out of the root); prunes ``dirnames`` in place."""
        links = sorted(d for d in dirnames if not d.startswith(".") and (dirpath / d).is_symlink())
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in links)
        for name in links:
            path = dirpath / name
            if not self._inside(path):
                yield self._link_ref(path)
        for name in sorted(filenames):
            if name.startswith(".") and name != FOLDER_SIDECAR:
                continue
            path = dirpath / name
            key = path.relative_to(self.root).as_posix()
            if is_sidecar(key):
                self.sidecar_keys.add(key)
                continue
            try:
                st = path.stat()
            except PermissionError:
                raise
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
        if key.endswith("/"):  # a folder the listing could not read (see list())
            why = getattr(self, "_unlisted_why", {}).get(key) or "it cannot be read"
            raise DocumentError(
                DocumentError.UNREADABLE,
                f"folder {key} cannot be read ({why}); the documents under it keep their last indexed state "
                "until it can be read",
            )
        try:
            resolved = path.resolve(strict=True)
        except PermissionError as exc:  # a folder on the way lost its search permission
            raise DocumentError(
                DocumentError.UNREADABLE, f"permission denied: {key} cannot be reached ({exc.strerror or exc})",
            ) from exc
        except (OSError, RuntimeError) as exc:
            try:
                link = path.is_symlink()
            except OSError:  # lstat fails too (EACCES, ENAMETOOLONG): it cannot be read, whatever it is
                raise DocumentError(DocumentError.UNREADABLE, f"{key} cannot be read: {exc}") from exc
            if link:
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


def _check_location(location: str, _options: Mapping[str, Any]) -> str:
    path = Path(location).expanduser()
    if not path.is_dir():
        raise ConfigError(f"{location} is not a folder")
    return str(path.resolve())


def _source_uri(location: str, key: str) -> str:
    return (_resolved_root(location) / key).as_uri()


@functools.lru_cache(maxsize=256)
def _resolved_root(location: str) -> Path:
    """``location`` resolved once a process, as :class:`FolderConnector` resolves its root once (each page's
    citation had resolved it again, a realpath walk per page)."""
    return Path(location).expanduser().resolve()


SPEC = ConnectorSpec(
    kind="folder",
    build=lambda source, env: FolderConnector(source.location, max_bytes=env.max_bytes),
    source_uri=_source_uri,
    location_help="a folder path",
    check_location=_check_location,
    hooks=(Sidecars, UnlistedPrefixes),
    options_model=SourceOptions,  # nothing of its own
)
