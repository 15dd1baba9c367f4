"""Where a process keeps its state on disk, checked before anything opens it: one line per problem.

A misspelt data dir must not answer as an empty index, and a data dir that
is a file or not writable must not end in a traceback from deep inside
SQLite or the vector store.  :class:`freshindex.services.Services` calls
:func:`check_registry_path` and :func:`check_store_path` before it opens the
registry and the embedded store; ``worker`` and ``beat`` call
:func:`check_data_dir`.  ``create`` False (the CLI's reading commands, see
``CREATES_STATE`` in :mod:`freshindex.cli`): what is read must already
exist.  Every problem is a :class:`core.errors.ConfigError` (exit 2).  This
module imports no metrics: ``worker`` checks its data dir before
prometheus-client is imported (its multiprocess mode is chosen then).  What
it does not check: a server database or a Qdrant server (their own
connection errors say what is wrong), or permissions on the files inside.
"""

from __future__ import annotations

import os
from pathlib import Path

from freshindex.core.errors import ConfigError
from freshindex.settings import Settings

_WHERE = "set FRESHINDEX_DATA_DIR (or data_dir in the --config file)"


def check_data_dir(settings: Settings, *, create: bool, needed_for: str) -> Path:
    """The data dir, resolved, once it is a usable folder; a one-line ConfigError otherwise.

    ``create`` False: it must exist (a misspelt data dir must not answer as an
    empty index).  True: it may be missing if the nearest existing folder
    above it is writable.  Either way it must be a writable folder, not a file.
    """
    d = settings.data_dir.resolve()
    if d.exists() and not d.is_dir():
        raise ConfigError(f"data dir {d} is a file, not a folder; {_WHERE}")
    if not d.exists():
        if not create:
            raise ConfigError(f"data dir {d} does not exist (looked for {needed_for}); {_WHERE}, "
                              "or create it with `freshindex sources add`")
        _check_creatable(d, f"data dir {d}")
    elif not os.access(d, os.W_OK | os.X_OK):
        raise ConfigError(f"data dir {d} is not writable by this user (uid {os.geteuid()}), and {needed_for} "
                          f"writes there: fix its permissions or {_WHERE}")
    return d


def _check_creatable(path: Path, what: str) -> None:
    """``path`` does not exist: it can be made if the nearest existing folder above it is a writable folder."""
    above = path.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise ConfigError(f"{what} cannot be created: {above} is a file, not a folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} cannot be created: {above} is not writable by this user (uid {os.geteuid()})")


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for another database or ``:memory:``)."""
    if not url.startswith("sqlite"):
        return None
    path = url.split("///", 1)[-1] if "///" in url else ""
    path = path.split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def check_registry_path(settings: Settings, *, create: bool) -> None:
    """A SQLite registry's file can be opened (``create`` False: it exists); nothing for a server database.

    In the data dir (the default) see :func:`check_data_dir`.  At a path of
    its own (``registry.url``), its folder must exist: a misspelt folder is
    not created.
    """
    file = sqlite_file(settings.registry_url)
    if file is None:
        return
    file = file.resolve()
    if settings.registry.url is None:
        check_data_dir(settings, create=create, needed_for=f"the registry at {file}")
    else:
        if not file.parent.is_dir():
            what = "is a file, not a folder" if file.parent.exists() else "does not exist"
            raise ConfigError(f"registry {file}: its folder {file.parent} {what} (registry.url, "
                              "FRESHINDEX_REGISTRY__URL)")
        if not os.access(file.parent, os.W_OK | os.X_OK):
            raise ConfigError(f"registry {file}: its folder {file.parent} is not writable by this user "
                              f"(uid {os.geteuid()}); SQLite writes its journal there")
    if file.is_dir():
        raise ConfigError(f"registry {file} is a folder, not a SQLite file")
    if not create and not file.exists():
        raise ConfigError(f"no registry at {file}: nothing was registered with these settings; "
                          f"{_WHERE} or registry.url, or register a source with `freshindex sources add`")


def check_store_path(settings: Settings, *, create: bool) -> None:
    """An embedded store's folder (``vector_store.path``, default data_dir/vectors) can be opened; nothing for a server."""
    vs = settings.vector_store
    if vs.kind not in ("edge", "local"):
        return
    path = settings.vector_path
    if vs.path is None:
        check_data_dir(settings, create=create, needed_for=f"the vector store at {path}")
    elif not path.exists():
        if not create:
            raise ConfigError(f"vector store folder {path} does not exist (vector_store.path, "
                              "FRESHINDEX_VECTOR_STORE__PATH)")
        _check_creatable(path, f"vector store folder {path}")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"vector store folder {path} is a file, not a folder")
    if path.exists() and not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"vector store folder {path} is not writable by this user (uid {os.geteuid()})")


__all__ = ["check_data_dir", "check_registry_path", "check_store_path", "sqlite_file"]
