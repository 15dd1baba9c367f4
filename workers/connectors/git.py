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
(``git ls-tree``), so an unchanged file is never fetched.  The listed commit
is the run's planned revision (its pending cursor): a document task reads
the file at that commit through :meth:`GitConnector.for_run`, in whichever
process it runs and however many runs that process has served; a commit
that cannot be had there fails the fetch retryably, never as "unchanged".  Against the last
synced commit (the source's cursor in the registry, promoted when a run
finishes) ``git diff --name-status -M`` reports renames, which are listed as
moves (:attr:`ObjectRef.moved_from`).  Every chunk is stamped with the
``commit`` and ``path`` it was read at and the commit's date as its date
(:meth:`GitRevision.chunk_meta`).

Credentials: a token in a file (``sources.git_token_file`` or the source's
``token_file`` option) is handed to git by ``GIT_ASKPASS`` (a script that
reads the file when git asks), never put in the URL, the environment or a
log line.  A location with credentials in it (userinfo, a query string or a
fragment) is refused; any URL in a git error message has its userinfo and
query redacted.  Transports are an allow-list (https, ssh, git, file, scp-like
and local paths), checked in :func:`check_location` and enforced in git's
environment (``GIT_ALLOW_PROTOCOL``); every URL and ref argument comes after
``--``.

What it does not do: submodules (skipped), Git LFS (pointer files are
indexed as text), symbolic links (listed, fail as ``unsupported_type``; the
mode is the listing's, never a pathspec lookup).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from freshindex.acl.model import FOLDER_SIDECAR, is_sidecar
from freshindex.core import flock
from freshindex.core.errors import ConfigError, DocumentError, SourceError
from freshindex.core.types import ObjectRef
from freshindex.workers.connectors import ChunkMeta, RunScoped, Sidecars
from freshindex.workers.connectors.options import SourceOptions
from freshindex.workers.connectors.registry import ConnectorEnv, ConnectorOption, ConnectorSpec, CursorStore, SourceLike
from freshindex.workers.connectors.webhooks import GITHUB, GITLAB

#: Characters of the commit a citation shows.
SHORT = 10
_REPO_ENV = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                       "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_COMMON_DIR"})
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_QUERY = re.compile(r"(?P<url>[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?#]*)[?#][^\s]*")
#: Transports git may use for a source (``GIT_ALLOW_PROTOCOL``): never ``ext::`` (runs a command) or ``fd::``.
TRANSPORTS = ("https", "ssh", "git", "file")
#: Commits whose tree listing a connector keeps (they are immutable: keyed by commit, never by run).
TREES_KEPT = 4
_ASKPASS = """#!/bin/sh
# Written by freshindex: answers git's credential prompts from a file named in the environment.
case "$1" in
  Username*) printf '%s\\n' "${FRESHINDEX_GIT_USERNAME:-x-access-token}" ;;
  *) head -n 1 "$FRESHINDEX_GIT_TOKEN_FILE" ;;
esac
"""


def redact(text: str) -> str:
    """``text`` with the userinfo, query and fragment of every URL in it replaced by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}***@", text)
    return _QUERY.sub(lambda m: f"{m['url']}?***", text)


_CREDENTIALS = ("a git location must not carry credentials: put the token in a file and name it with "
                "--option token_file=PATH (or settings sources.git_token_file)")


#: Hidden folders a repository keeps its project documentation and automation in (contributing and security
#: guides, issue templates, CI workflows).  Any other hidden folder (.aws, .ssh, .kube, .yarn, .venv) is skipped.
HIDDEN_FOLDERS = frozenset({".github", ".gitlab", ".circleci"})
#: A hidden file outside those folders is listed when it is documentation or configuration by its extension
#: (.readthedocs.yaml, .pre-commit-config.yaml); one without (.gitignore, .env, .npmrc) is not.
HIDDEN_FILE_TYPES = (".md", ".rst", ".txt", ".yml", ".yaml", ".toml")


def hidden_listed(path: str) -> bool:
    """Whether a tracked ``path`` is listed: a path with no hidden part always, a hidden one only as
    :data:`HIDDEN_FOLDERS` and :data:`HIDDEN_FILE_TYPES` say (an ACL sidecar always, it is read apart)."""
    *folders, name = path.split("/")
    if name == FOLDER_SIDECAR:
        return True
    if any(f.startswith(".") and f not in HIDDEN_FOLDERS for f in folders):
        return False
    return not name.startswith(".") or name.lower().endswith(HIDDEN_FILE_TYPES)


def check_location(location: str, _options: Mapping[str, Any] | None = None) -> str:
    """A URL (https, ssh, git, file), an scp-like address or a local repository; nothing else.

    Refused: another transport (``ext::``, ``fd::``, ``http``), credentials anywhere in a URL
    (userinfo with a password, an https user, a query string or a fragment), a location that
    git would read as an option.
    """
    if location.startswith("-") or any(ord(c) < 32 for c in location):
        raise ConfigError(f"not a git location: {redact(location)!r}")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*::", location):
        raise ConfigError(f"git transport {location.split('::', 1)[0]!r} is not allowed (allowed: "
                          f"{', '.join(TRANSPORTS)}, scp-like addresses, local paths)")
    if "://" in location:
        parts = urlsplit(location)
        if parts.scheme.lower() not in TRANSPORTS:
            raise ConfigError(f"git transport {parts.scheme!r} is not allowed (allowed: {', '.join(TRANSPORTS)})")
        if parts.password is not None or (parts.username and parts.scheme == "https") or parts.query \
                or parts.fragment or "?" in location or "#" in location:
            raise ConfigError(_CREDENTIALS)
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
class Tree:
    """The files of one commit: immutable, so cached by commit id and shared by every run that planned it."""

    commit: str
    date: str | None  # the committer date, ISO 8601
    blobs: dict[str, tuple[str, str]]  # path -> (mode, blob id)


@dataclass(frozen=True)
class Listing:
    """What one run's listing saw: the tree it planned, the commit it diffed against, the renames between."""

    tree: Tree
    base: str | None
    moved_from: dict[str, str]  # new path -> old path (renames between base and commit)

    @property
    def commit(self) -> str:
        return self.tree.commit


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
        #: The last listing made in this process (the planner's); document tasks read :meth:`for_run`'s tree.
        self.listing: Listing | None = None
        self._trees: OrderedDict[str, Tree] = OrderedDict()
        self._lock = threading.Lock()  # one git fetch into the cache at a time: see _guard

    # -- git ------------------------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        # The host's own git set-up (ssh command, credential helpers, proxies) stays; only where git works is ours.
        env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
        env.update(GIT_TERMINAL_PROMPT="0", GIT_DIR=str(self.repo), LC_ALL="C",
                   GIT_ALLOW_PROTOCOL=":".join(TRANSPORTS))
        if self.token_file is not None:
            askpass = self.cache_dir / "askpass.sh"
            if not askpass.exists():  # written whole, then renamed: another process never runs half a script
                self.cache_dir.mkdir(parents=True, exist_ok=True)
                tmp = askpass.with_name(f".askpass.{os.getpid()}.{threading.get_ident()}")
                tmp.write_text(_ASKPASS)
                tmp.chmod(0o700)
                os.replace(tmp, askpass)
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
            self.git("remote", "set-url", "--", "origin", self.location)
            return self.git("rev-parse", "--verify", "-q", "refs/freshindex/tip", check=False).returncode == 0
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", str(self.repo)], env=self._env(), check=True,
                       capture_output=True, timeout=self.timeout_s)
        self.git("remote", "add", "--", "origin", self.location)
        return False

    def fetch_ref(self) -> str:
        """Fetch the ref into ``refs/freshindex/tip``; the commit it names now."""
        warm = self._ensure_repo()
        shallow = () if warm else ("--depth", "1")
        self.git("fetch", "-q", "--no-tags", "--filter=blob:none", *shallow, "--", "origin",
                 f"+{self.ref}:refs/freshindex/tip")
        return self.git("rev-parse", "refs/freshindex/tip^{commit}").stdout.decode().strip()

    def _has_commit(self, commit: str) -> bool:
        return self.git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0

    # -- Connector ------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """One fetch or listing into the cache at a time: threads of this process (document tasks and
        the working-ahead thread), then every process on the host sharing the cache (prefork children,
        beat, serve), whose concurrent ``git fetch`` would fail on git's own ref and shallow locks."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with self._lock, flock.exclusive(self.cache_dir / ".fetch.lock", timeout=self.timeout_s,
                                         what=f"the git cache of {redact(self.location)}", error=SourceError):
            yield

    def list(self) -> Iterator[ObjectRef]:
        yield from self._list(record=True)

    def _list(self, *, record: bool) -> builtins.list[ObjectRef]:  # `list` is the method above
        """Fetch and list the ref's tip; ``record``: this is a run's listing, so its commit becomes the run's
        pending cursor (its planned revision). Any other read never moves a run's plan."""
        with self._guard():
            commit = self.fetch_ref()
            synced = (self.cursor.get() or {}) if self.cursor is not None else {}
            base = synced.get("commit") if synced.get("ref") == self.ref else None
            moved_from: dict[str, str] = {}
            if base and base != commit and self._has_commit(base):
                diff = self.git("diff", "--name-status", "-z", "-M", base, commit)
                moved_from = {new: old for status, new, old in parse_name_status(diff.stdout) if status == "R" and old}
            elif base and base != commit:
                base = None  # the cache lost it (a new volume): no moves to report, the etags still say what changed
            tree = self._tree_locked(commit)
        self.listing = Listing(tree, base, moved_from)
        self.sidecar_keys = {path for path in tree.blobs if is_sidecar(path)}
        if record and self.cursor is not None:
            self.cursor.set_pending({"commit": commit, "ref": self.ref})
        return [ObjectRef(key=path, etag=oid if mode != "120000" else f"symlink-{oid}", size=0,
                          moved_from=moved_from.get(path))
                for path, (mode, oid) in tree.blobs.items() if not is_sidecar(path)]

    def _tree_locked(self, commit: str) -> Tree:
        """The files of ``commit`` (cached by commit); the caller holds the lock and the commit is here."""
        tree = self._trees.get(commit)
        if tree is not None:
            self._trees.move_to_end(commit)
            return tree
        out = self.git("ls-tree", "-r", "-z", "--full-tree", commit).stdout.decode("utf-8", "surrogateescape")
        blobs: dict[str, tuple[str, str]] = {}
        for entry in filter(None, out.split("\0")):
            meta, path = entry.split("\t", 1)
            mode, kind, oid = meta.split()
            if kind != "blob":
                continue  # a submodule (commit)
            if not hidden_listed(path):
                continue  # .aws/credentials, .ssh/, .yarn/releases/: not documentation (hidden_listed)
            blobs[path] = (mode, oid)
        date = self.git("show", "-s", "--format=%cI", commit).stdout.decode().strip() or None
        tree = self._trees[commit] = Tree(commit, date, blobs)
        while len(self._trees) > TREES_KEPT:
            self._trees.popitem(last=False)
        return tree

    def tree(self, commit: str) -> Tree:
        """The files of ``commit``, fetching it into the cache when this process has not seen it.

        Raises :class:`SourceError` (retryable) when the remote no longer serves it (a force-push):
        the document is then recorded as a failed fetch and read again by the next run.
        """
        with self._guard():
            if commit not in self._trees and not self._has_commit(commit):
                self.fetch_ref()  # the usual case: the tip moved on past what this process last fetched
                if not self._has_commit(commit):
                    self.git("fetch", "-q", "--no-tags", "--filter=blob:none", "--", "origin", commit, check=False)
                if not self._has_commit(commit):
                    raise SourceError(f"commit {commit[:SHORT]} of {redact(self.location)} ({self.ref}) cannot be "
                                      "fetched here (force-pushed away?); the document is read again next run")
            return self._tree_locked(commit)

    def for_run(self, run_id: int) -> GitRevision:
        """This repository as run ``run_id`` listed it: its planned commit, from the registry.

        Without a cursor (a connector used on its own, no registry) it is the last listing of this
        object.  A run that recorded no commit (closed, or listed elsewhere without a registry) is a
        retryable :class:`SourceError`: nothing is read at a guessed revision.
        """
        if self.cursor is None:
            return self._current()
        planned = self.cursor.planned(run_id) or {}
        commit = planned.get("commit")
        if not isinstance(commit, str) or planned.get("ref", self.ref) != self.ref:
            raise SourceError(f"run {run_id} of {redact(self.location)} recorded no planned commit for "
                              f"{self.ref}; the document is read again by the next run")
        return GitRevision(self, self.tree(commit))

    def fetch(self, key: str) -> bytes:
        """``key`` at the commit of this object's last listing (see :meth:`for_run` for a run's reads)."""
        return self._current().fetch(key)

    def chunk_meta(self, key: str) -> dict[str, Any]:
        return self._current().chunk_meta(key)

    def _current(self) -> GitRevision:
        """The last listing's commit (listing now, without recording it, when this object has none)."""
        if self.listing is None:
            self._list(record=False)
        assert self.listing is not None
        return GitRevision(self, self.listing.tree)


class GitRevision:
    """One commit of a :class:`GitConnector`'s repository: what a document task reads."""

    def __init__(self, repo: GitConnector, tree: Tree) -> None:
        self.repo, self.tree = repo, tree

    def __eq__(self, other: object) -> bool:
        """The same commit of the same repository object reads the same (a run's ACL resolver is kept across
        its documents' revisions: ``workers.batch.RunBatch.acl_resolver``)."""
        return isinstance(other, GitRevision) and other.repo is self.repo and other.tree.commit == self.tree.commit

    def __hash__(self) -> int:
        return hash((id(self.repo), self.tree.commit))

    def list(self) -> Iterator[ObjectRef]:
        """The files of this commit (the :class:`Connector` protocol; a run's listing is the repository's)."""
        for path, (mode, oid) in sorted(self.tree.blobs.items()):
            if not is_sidecar(path):
                yield ObjectRef(key=path, etag=oid if mode != "120000" else f"symlink-{oid}", size=0)

    def fetch(self, key: str) -> bytes:
        entry = self.tree.blobs.get(key)
        if entry is None:
            raise DocumentError(DocumentError.VANISHED, f"{key} is not in {self.tree.commit[:SHORT]}")
        mode, oid = entry
        if mode == "120000":  # the listing's own mode: a key is never read back as a pathspec
            raise DocumentError(DocumentError.UNSUPPORTED, f"{key} is a symbolic link in the repository; not followed")
        size = int(self.repo.git("cat-file", "-s", oid).stdout.strip() or 0)
        if size > self.repo.max_bytes:
            raise DocumentError(DocumentError.TOO_LARGE, f"{size} bytes, limit {self.repo.max_bytes}")
        return self.repo.git("cat-file", "blob", oid).stdout

    def chunk_meta(self, key: str) -> dict[str, Any]:
        """``commit`` (full id), ``path`` and ``modified`` (the commit's date) for every chunk of ``key``."""
        meta: dict[str, Any] = {"commit": self.tree.commit, "path": key}
        if self.tree.date:
            meta["modified"] = self.tree.date
        return meta


def _build(source: SourceLike, env: ConnectorEnv) -> GitConnector:
    opts = source.options
    token = opts.get("token_file") or env.sources.git_token_file
    return GitConnector(source.location, str(opts.get("ref") or "HEAD"), env.data_dir, max_bytes=env.max_bytes,
                        cursor=env.cursor, token_file=Path(token) if token else None,
                        username=opts.get("username"), timeout_s=env.sources.git_timeout_s)


class GitOptions(SourceOptions):
    """A git source's options."""

    ref: str | None = None
    token_file: str | None = None
    username: str | None = None


SPEC = ConnectorSpec(
    kind="git",
    build=_build,
    source_uri=source_uri,
    location_help="a repository URL (https://host/org/repo.git, git@host:org/repo.git) or a local path",
    check_location=check_location,
    options=(ConnectorOption("ref", "branch or tag to index (default: the remote's HEAD)"),
             ConnectorOption("token_file", "file holding an access token (default: settings sources.git_token_file)"),
             ConnectorOption("username", "user name sent with the token (default x-access-token; GitLab: oauth2)")),
    hooks=(Sidecars, ChunkMeta, RunScoped),
    options_model=GitOptions,
    webhook_providers=(GITHUB, GITLAB),
    ref_option="ref",
)

__all__ = ["SHORT", "SPEC", "TRANSPORTS", "GitConnector", "GitRevision", "Tree", "check_location",
           "parse_name_status", "redact", "source_uri"]
