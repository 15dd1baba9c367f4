"""A Git repository (one branch or tag) as a source, through the ``git`` binary.

Why the binary and not dulwich or GitPython: it adds no dependency, speaks
every transport and credential helper the host is set up for (SSH agents,
``credential.helper``, proxies), and its rename detection is git's own, so
"moved" means what ``git log --follow`` says.

Layout: a bare repository under the source's folder (``data_dir/sources/<id>
/repo.git``) with the remote as ``origin``.  The first listing fetches the
ref's tip only (``--depth 1``); later listings fetch with
``--filter=blob:none`` (commits and trees; a blob is fetched when it is read,
and only changed paths are read), so an incremental sync moves what changed.

Change detection: keys are paths at the listed commit, etags are blob ids
(``git ls-tree``), so an unchanged file is never fetched.  Against the last
synced commit (the source's cursor in the registry, promoted when a run
finishes) ``git diff --name-status -M`` reports renames, which are listed as
moves (:attr:`ObjectRef.moved_from`).  Every chunk is stamped with the
``commit`` and ``path`` it was read at (:meth:`GitConnector.chunk_meta`).

Credentials: a token in a file (``sources.git_token_file`` or the source's
``token_file`` option) is handed to git by ``GIT_ASKPASS`` (a script that
reads the file when git asks), never put in the URL, the environment or a
log line.  A location with credentials in it is refused; any URL in a git
error message has its userinfo redacted.

What it does not do: submodules (skipped), Git LFS (pointer files are
indexed as text), symbolic links (listed, fail as ``unsupported_type``).
"""

from __future__ import annotations

import builtins
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from freshindex.acl.model import FOLDER_SIDECAR, is_sidecar
from freshindex.core.errors import ConfigError, DocumentError, SourceError
from freshindex.core.types import ObjectRef
from freshindex.workers.connectors import ChunkMeta, Sidecars
from freshindex.workers.connectors.registry import ConnectorEnv, ConnectorOption, ConnectorSpec, CursorStore, SourceLike

#: Characters of the commit a citation shows.
SHORT = 10
_REPO_ENV = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                       "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_COMMON_DIR"})
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_ASKPASS = """#!/bin/sh
# Written by freshindex: answers git's credential prompts from a file named in the environment.
case "$1" in
  Username*) printf '%s\\n' "${FRESHINDEX_GIT_USERNAME:-x-access-token}" ;;
  *) head -n 1 "$FRESHINDEX_GIT_TOKEN_FILE" ;;
esac
"""


def redact(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}***@", text)


def check_location(location: str, _options: Mapping[str, Any] | None = None) -> str:
    """A URL (https, ssh, git, file) or a local path; credentials in a URL are refused."""
    if "://" in location:
        parts = urlsplit(location)
        if parts.password is not None or (parts.username and parts.scheme in ("http", "https")):
            raise ConfigError("a git location must not carry credentials: put the token in a file and name it with "
                              "--option token_file=PATH (or settings sources.git_token_file)")
        return urlunsplit(parts)
    if re.match(r"^[\w.-]+@[\w.-]+:", location):  # scp-like ssh: git@host:org/repo.git (the user is not a secret)
        return location
    path = Path(location).expanduser()
    if not (path / ".git").exists() and not (path / "HEAD").is_file():
        raise ConfigError(f"{location} is not a git repository (no .git, not a bare repository)")
    return str(path.resolve())


def source_uri(location: str, key: str) -> str:
    """``<repository>#<path>``; the commit a chunk was read at is in its payload (``commit``)."""
    return f"{redact(location)}#{key}"


def parse_name_status(out: bytes) -> list[tuple[str, str, str | None]]:
    """``git diff --name-status -z -M`` -> ``[(status letter, path, old path or None)]``."""
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    changes: list[tuple[str, str, str | None]] = []
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i][0]
        if status in "RC":
            changes.append((status, fields[i + 2], fields[i + 1]))
            i += 3
        else:
            changes.append((status, fields[i + 1], None))
            i += 2
    return changes


@dataclass(frozen=True)
class Listing:
    commit: str
    base: str | None
    blobs: dict[str, str]  # path -> blob id
    moved_from: dict[str, str]  # new path -> old path (renames between base and commit)


class GitConnector:
    """One ref of one repository; see the module docstring."""

    def __init__(self, location: str, ref: str, cache_dir: Path, *, max_bytes: int, cursor: CursorStore | None = None,
                 token_file: Path | None = None, username: str | None = None, timeout_s: float = 300.0) -> None:
        self.location = check_location(location)
        self.ref = ref.removeprefix("refs/heads/").removeprefix("refs/tags/") if ref else "HEAD"
        self.cache_dir = cache_dir
        self.repo = cache_dir / "repo.git"
        self.max_bytes = max_bytes
        self.cursor = cursor
        self.token_file = token_file
        self.username = username
        self.timeout_s = timeout_s
        #: ACL sidecars the last listing saw (never listed as documents).
        self.sidecar_keys: set[str] = set()
        self.listing: Listing | None = None

    # -- git ------------------------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        # The host's own git set-up (ssh command, credential helpers, proxies) stays; only where git works is ours.
        env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
        env.update(GIT_TERMINAL_PROMPT="0", GIT_DIR=str(self.repo), LC_ALL="C")
        if self.token_file is not None:
            askpass = self.cache_dir / "askpass.sh"
            if not askpass.exists():
                askpass.write_text(_ASKPASS)
                askpass.chmod(0o700)
            env.update(GIT_ASKPASS=str(askpass), FRESHINDEX_GIT_TOKEN_FILE=str(self.token_file))
            if self.username:
                env["FRESHINDEX_GIT_USERNAME"] = self.username
        return env

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        """Run ``git args`` on the cache; a failure is a :class:`SourceError` with URLs redacted."""
        try:
            proc = subprocess.run(["git", *args], env=self._env(), capture_output=True, timeout=self.timeout_s,
                                  check=False)
        except subprocess.TimeoutExpired as exc:
            raise SourceError(f"git {args[0]} of {redact(self.location)} took over {self.timeout_s:.0f} s") from exc
        except FileNotFoundError as exc:
            raise SourceError("the git binary is not installed (apt-get install git)") from exc
        if check and proc.returncode != 0:
            err = redact(proc.stderr.decode("utf-8", "replace").strip())[-800:]
            raise SourceError(f"git {args[0]} failed for {redact(self.location)} ({self.ref}): {err}")
        return proc

    def _ensure_repo(self) -> bool:
        """Create the bare cache on first use; True when it already held a fetched commit."""
        if (self.repo / "HEAD").is_file():
            self.git("remote", "set-url", "origin", self.location)
            return self.git("rev-parse", "--verify", "-q", "refs/freshindex/tip", check=False).returncode == 0
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", str(self.repo)], env=self._env(), check=True,
                       capture_output=True, timeout=self.timeout_s)
        self.git("remote", "add", "origin", self.location)
        return False

    def fetch_ref(self) -> str:
        """Fetch the ref into ``refs/freshindex/tip``; the commit it names now."""
        warm = self._ensure_repo()
        shallow = () if warm else ("--depth", "1")
        self.git("fetch", "-q", "--no-tags", "--filter=blob:none", *shallow, "origin",
                 f"+{self.ref}:refs/freshindex/tip")
        return self.git("rev-parse", "refs/freshindex/tip^{commit}").stdout.decode().strip()

    def _has_commit(self, commit: str) -> bool:
        return self.git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0

    # -- Connector ------------------------------------------------------------------------------------------

    def list(self) -> Iterator[ObjectRef]:
        yield from self._list(record=True)

    def _list(self, *, record: bool) -> builtins.list[ObjectRef]:  # `list` is the method above
        """Fetch and list; ``record``: this is the run's listing, so its commit becomes the pending cursor."""
        commit = self.fetch_ref()
        synced = (self.cursor.get() or {}) if self.cursor is not None else {}
        base = synced.get("commit") if synced.get("ref") == self.ref else None
        moved_from: dict[str, str] = {}
        if base and base != commit and self._has_commit(base):
            diff = self.git("diff", "--name-status", "-z", "-M", base, commit)
            moved_from = {new: old for status, new, old in parse_name_status(diff.stdout) if status == "R" and old}
        elif base and base != commit:
            base = None  # the cache lost it (a new volume): no moves to report, the etags still say what changed
        out = self.git("ls-tree", "-r", "-z", "--full-tree", commit).stdout.decode("utf-8", "surrogateescape")
        blobs: dict[str, str] = {}
        self.sidecar_keys = set()
        refs: list[ObjectRef] = []
        for entry in filter(None, out.split("\0")):
            meta, path = entry.split("\t", 1)
            mode, kind, oid = meta.split()
            if kind != "blob":
                continue  # a submodule (commit)
            if any(part.startswith(".") for part in path.split("/")) and path.rsplit("/", 1)[-1] != FOLDER_SIDECAR:
                continue  # .github/, .gitignore: not documentation, as in a folder source
            if is_sidecar(path):
                self.sidecar_keys.add(path)
                blobs[path] = oid
                continue
            blobs[path] = oid
            etag = oid if mode != "120000" else f"symlink-{oid}"
            refs.append(ObjectRef(key=path, etag=etag, size=0, moved_from=moved_from.get(path)))
        self.listing = Listing(commit, base, blobs, moved_from)
        if record and self.cursor is not None:
            self.cursor.set_pending({"commit": commit, "ref": self.ref})
        return refs

    def _listing(self) -> Listing:
        if self.listing is None:  # a document task in another process: fetch and list once, cursor untouched
            self._list(record=False)
        assert self.listing is not None
        return self.listing

    def fetch(self, key: str) -> bytes:
        listing = self._listing()
        oid = listing.blobs.get(key)
        if oid is None:
            raise DocumentError(DocumentError.VANISHED, f"{key} is not in {listing.commit[:SHORT]}")
        mode = self.git("ls-tree", "--full-tree", listing.commit, "--", key).stdout.split(b" ", 1)[0]
        if mode == b"120000":
            raise DocumentError(DocumentError.UNSUPPORTED, f"{key} is a symbolic link in the repository; not followed")
        size = int(self.git("cat-file", "-s", oid).stdout.strip() or 0)
        if size > self.max_bytes:
            raise DocumentError(DocumentError.TOO_LARGE, f"{size} bytes, limit {self.max_bytes}")
        return self.git("cat-file", "blob", oid).stdout

    def chunk_meta(self, key: str) -> dict[str, Any]:
        """``commit`` (full id) and ``path`` for every chunk of ``key``, as read at the listed commit."""
        return {"commit": self._listing().commit, "path": key}

    def head(self) -> str | None:
        """The commit of the last listing, or None before one."""
        return self.listing.commit if self.listing else None


def _build(source: SourceLike, env: ConnectorEnv) -> GitConnector:
    opts = source.options
    token = opts.get("token_file") or env.sources.git_token_file
    return GitConnector(source.location, str(opts.get("ref") or "HEAD"), env.data_dir, max_bytes=env.max_bytes,
                        cursor=env.cursor, token_file=Path(token) if token else None,
                        username=opts.get("username"), timeout_s=env.sources.git_timeout_s)


SPEC = ConnectorSpec(
    kind="git",
    build=_build,
    source_uri=source_uri,
    location_help="a repository URL (https://host/org/repo.git, git@host:org/repo.git) or a local path",
    check_location=check_location,
    options=(ConnectorOption("ref", "branch or tag to index (default: the remote's HEAD)"),
             ConnectorOption("token_file", "file holding an access token (default: settings sources.git_token_file)"),
             ConnectorOption("username", "user name sent with the token (default x-access-token; GitLab: oauth2)")),
    hooks=(Sidecars, ChunkMeta),
)

__all__ = ["SHORT", "SPEC", "GitConnector", "check_location", "parse_name_status", "redact", "source_uri"]
