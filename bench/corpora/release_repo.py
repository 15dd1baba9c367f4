"""A package's release history as a local git repository: the shared part of the repository corpora.

``bench.corpora.structlog_repo`` and ``bench.corpora.markdown_repo`` each pin a package and consecutive
releases (their sdists' SHA-256); :func:`build` commits them in order into one repository with
``bench.git_history.commit_release`` (one commit per release on ``main``, tagged ``v<version>``, fixed
author and dates, so the same releases give the same commit ids), leaving out what only the sdist has
(``PKG-INFO``, ``*.egg-info``, a ``setup.cfg`` holding nothing but ``[egg_info]``).  ``upto`` stops at a
release, and a later call goes on from the last tagged one: the first release is the one a knowledge base
is indexed at, the rest its update.  :func:`export` writes a release's work tree as plain files;
:func:`verify` checks a golden set with ``bench.corpora.blind``'s rules against the first (old) and last
(new) release.  The sdists are downloaded into the shared ``sdists`` cache (``bench.git_history.fetch_sdist``).

It does not index anything, nor decide how a benchmark asks the questions.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.corpora import blind, common
from bench.git_history import commit_release, fetch_sdist, git

SDIST_ONLY = ("PKG-INFO",)


@dataclass(frozen=True)
class History:
    """A package's pinned releases, oldest first: the first is the old (indexed) one, the last the update."""

    package: str
    releases: tuple[tuple[str, str], ...]  # (version, sdist SHA-256)
    commits: tuple[str, ...]  # the commit id each release gets, in order

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.releases)

    @property
    def old(self) -> str:
        return self.versions[0]

    @property
    def new(self) -> str:
        return self.versions[-1]


def sdist(history: History, version: str) -> Path:
    """The release's sdist (downloaded once into the shared cache), checked against its pinned SHA-256."""
    path = fetch_sdist(history.package, version)
    if path is None:
        raise RuntimeError(f"pip download {history.package}=={version} failed")
    want = dict(history.releases)[version]
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != want:
        raise RuntimeError(f"{path}: SHA-256 {got}, pinned {want}")
    return path


def kept_names(path: Path) -> tuple[str, ...]:
    """The sdist's top-level names that a repository has (what the sdist adds left out)."""
    names: set[str] = set()
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            parts = m.name.split("/")
            if len(parts) < 2 or not parts[1]:
                continue
            top = parts[1]
            if top in SDIST_ONLY or top.endswith(".egg-info"):
                continue
            if top == "setup.cfg" and len(parts) == 2:
                text = tar.extractfile(m).read().decode("utf-8", "replace")  # type: ignore[union-attr]
                if [s for s in text.split() if s.startswith("[")] == ["[egg_info]"]:
                    continue
            names.add(top)
    return tuple(sorted(names))


def tags(repo: Path) -> list[str]:
    """The releases committed so far, oldest first (from the first-parent history of ``main``)."""
    if not (repo / ".git").exists():
        return []
    subjects = git(repo, "log", "--reverse", "--first-parent", "--format=%s", "main").splitlines()
    return [s.split(" ", 1)[1] for s in subjects]


def count_files(repo: Path) -> int:
    """Files at ``main`` in ``repo``."""
    return len(git(repo, "ls-tree", "-r", "--name-only", "main").splitlines())


def build(history: History, repo: Path, upto: str | None = None) -> Path:
    """Commit the releases up to ``upto`` (default: all) into ``repo``, going on from the last one there."""
    repo = Path(repo)
    done = tags(repo)
    if done != list(history.versions[: len(done)]):
        raise RuntimeError(f"{repo} holds releases {done}, not a prefix of {list(history.versions)}")
    last = history.versions.index(upto) if upto else len(history.versions) - 1
    for i in range(len(done), last + 1):
        version = history.versions[i]
        path = sdist(history, version)
        step = commit_release(repo, path, history.package, version, keep=kept_names(path))
        if step["commit"] != history.commits[i]:
            raise RuntimeError(f"{history.package} {version} committed as {step['commit']}, "
                               f"expected {history.commits[i]}")
    return repo


def export(repo: Path, version: str, into: Path) -> Path:
    """The work tree of release ``version`` as plain files in ``into`` (emptied first), byte for byte as
    committed (no ``export-subst``, unlike ``git archive``); returns ``into``."""
    into = Path(into)
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    listing = git(repo, "ls-tree", "-r", "-z", f"v{version}").split("\0")
    entries = [(meta.split()[0], meta.split()[2], path) for meta, _, path in (e.partition("\t") for e in listing if e)]
    batch = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch"], check=True, capture_output=True,
                           input="".join(f"{sha}\n" for _, sha, _ in entries).encode()).stdout
    pos = 0
    for mode, _sha, path in entries:
        header_end = batch.index(b"\n", pos)
        size = int(batch[pos:header_end].split()[2])
        data = batch[header_end + 1:header_end + 1 + size]
        pos = header_end + 1 + size + 1
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            target.symlink_to(data.decode())
            continue
        target.write_bytes(data)
        if mode == "100755":
            target.chmod(0o755)
    return into


def verify(history: History, repo: Path, questions: list[dict]) -> list[str]:
    """Problems with the repository (releases, commit ids) and with ``questions`` (``bench.corpora.blind``)."""
    repo = Path(repo)
    problems: list[str] = []
    if tags(repo) != list(history.versions):
        problems.append(f"{repo}: releases {tags(repo)}, expected {list(history.versions)}")
        return problems
    for version, commit in zip(history.versions, history.commits, strict=True):
        got = git(repo, "rev-parse", f"v{version}^{{commit}}").strip()
        if got != commit:
            problems.append(f"v{version} is {got}, expected {commit}")
    if not questions:
        return problems
    with tempfile.TemporaryDirectory() as tmp:
        old = export(repo, history.old, Path(tmp) / "old")
        new = export(repo, history.new, Path(tmp) / "new")
        found, _ = blind.check(questions, old, new)
    return problems + found


def main(doc: str, name: str, history: History, questions: list[dict]) -> None:
    """``python -m bench.corpora.<name>``: build the repository, optionally export the old and new work trees,
    verify; exit 1 on a problem."""
    import argparse
    import sys

    from bench.corpora.common import cache_dir

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=cache_dir(name) / "repo")
    parser.add_argument("--upto", choices=history.versions, default=None)
    parser.add_argument("--export", type=Path, default=None, help="write the old and new work trees to DIR/old, DIR/new")
    args = parser.parse_args()
    repo = build(history, args.dest, args.upto)
    files = git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    print(f"repository: {repo} ({len(tags(repo))} releases, {len(files)} files at HEAD)")
    if args.export:
        for side, version in (("old", history.old), ("new", history.new)):
            print(f"{side}: {export(repo, version, args.export / side)} ({history.package} {version})")
    if args.upto:  # a partial history: build() checked each commit id; the golden set needs the whole one
        return
    problems = verify(history, repo, questions)
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problems")
    sys.exit(1 if problems else 0)


class CorpusModule:
    """The corpus interface (``materialise``, ``verify``, ``count_pages``, ``load_questions``, ``main``) of one
    release history, so that a corpus module is its ``History`` and one line."""

    def __init__(self, name: str, history: History, doc: str) -> None:
        self.name, self.history, self.doc = name, history, doc
        self.questions = common.GOLDENS / name / "questions.jsonl"

    def materialise(self, cache: Path, dest: Path, upto: str | None = None) -> Path:
        """The repository at ``dest`` with the releases up to ``upto`` (default: all) committed; returns ``dest``.
        ``cache`` is unused: the sdists live in the shared ``sdists`` cache."""
        return build(self.history, Path(dest), upto)

    def verify(self, dest: Path, questions: list[dict]) -> list[str]:
        """Problems with the repository at ``dest`` and with ``questions`` (empty when every check passes)."""
        return verify(self.history, Path(dest), questions)

    def count_pages(self, dest: Path) -> int:
        """Files in the repository's newest commit (each one a document of the ``git`` source)."""
        return count_files(Path(dest))

    def load_questions(self, path: Path | None = None) -> list[dict]:
        path = path or self.questions
        return common.load_questions(path) if path.is_file() else []

    def main(self) -> None:
        main(self.doc, self.name, self.history, self.load_questions())
