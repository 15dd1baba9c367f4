"""A git source through a package's real release history: is embedding work proportional to change?

``python -m bench.git_history [--package requests] [--versions 2.30.0,2.31.0,...]`` downloads the
sdists from the package registry (cached in ``$FRESHINDEX_BENCH_CACHE/sdists``), commits them one by
one into a local repository (``git mv`` of the package folder when a release moves it, as requests
2.32.0 did into ``src/``), registers the repository as a ``git`` source and syncs after each commit.
Per step it records the chunks embedded, the Python symbols (functions, classes, methods) whose source
changed, the documents moved, whether the deletion guard held, and the time.  Writes
``bench/results/git_history.json`` and ``.md``.  The embedder is the hashing stand-in: how many chunks
are embedded does not depend on the model (the vector cache is keyed by the embedded text's hash).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.corpora.common import cache_dir

PACKAGE = "requests"
VERSIONS = ("2.30.0", "2.31.0", "2.32.0", "2.32.1", "2.32.2", "2.32.3")
#: Fixed author and dates: the same releases make the same commits.
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.invalid", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def fetch_sdist(package: str, version: str) -> Path | None:
    """The sdist of ``package==version`` from the registry (cached), or None when it cannot be downloaded."""
    cache = cache_dir("sdists")
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"{package}-{version}.tar.gz"))
    if found:
        return found[0]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                           f"{package}=={version}", "-d", str(cache)], capture_output=True, timeout=180)
    found = sorted(cache.glob(f"{package}-{version}.tar.gz"))
    return found[0] if done.returncode == 0 and found else None


def git(repo: Path, *args: str) -> str:
    import os

    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def _unpack(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data")
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top


def _package_dir(tree: Path, package: str) -> str | None:
    for rel in (package, f"src/{package}"):
        if (tree / rel / "__init__.py").is_file():
            return rel
    return None


def commit_release(repo: Path, sdist: Path, package: str, version: str, *,
                   keep: tuple[str, ...] = (), modules: tuple[str, ...] = ()) -> dict[str, Any]:
    """Commit the release in ``sdist`` on top of ``repo`` (created when absent); what moved and the commit.

    ``keep`` limits the tree to these top-level names (and the package folder), ``modules`` the package
    folder to these file names (a smaller test); empty keeps everything.
    A package folder that changed place is moved with ``git mv`` first, so git records the rename.
    """
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        git(repo, "init", "-q", "-b", "main")
    with tempfile.TemporaryDirectory() as tmp:
        tree = _unpack(sdist, Path(tmp))
        new_pkg = _package_dir(tree, package)
        old_pkg = _package_dir(repo, package)
        moved = None
        if old_pkg and new_pkg and old_pkg != new_pkg:
            (repo / new_pkg).parent.mkdir(parents=True, exist_ok=True)
            git(repo, "mv", old_pkg, new_pkg)
            moved = (old_pkg, new_pkg)
        for child in repo.iterdir():
            if child.name != ".git":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        for child in tree.iterdir():
            top = child.name
            if keep and top not in keep and top != new_pkg.split("/")[0]:
                continue
            dest = repo / top
            shutil.copytree(child, dest) if child.is_dir() else shutil.copy2(child, dest)
        if modules and new_pkg:
            for f in (repo / new_pkg).iterdir():
                if f.name not in modules:
                    shutil.rmtree(f) if f.is_dir() else f.unlink()
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--allow-empty", "-m", f"{package} {version}")
        git(repo, "tag", "-f", f"v{version}")
    return {"version": version, "commit": git(repo, "rev-parse", "HEAD").strip(), "moved": moved}


def symbols(repo: Path, commit: str) -> dict[str, str]:
    """``qualified name -> hash of its source`` for every function, class and method in the commit's .py files.

    The name is module-relative (``models.Response.json``), not path-relative, so a moved package keeps
    its symbols.
    """
    out: dict[str, str] = {}
    files = [f for f in git(repo, "ls-tree", "-r", "--name-only", commit).splitlines() if f.endswith(".py")]
    for path in files:
        text = git(repo, "show", f"{commit}:{path}")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        module = path.removeprefix("src/").removesuffix(".py").replace("/", ".")

        def walk(node: ast.AST, prefix: str, text: str = text) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = f"{prefix}.{child.name}"
                    out[name] = hashlib.sha256((ast.get_source_segment(text, child) or "").encode()).hexdigest()
                    walk(child, name, text)

        walk(tree, module)
    return out


def changed_symbols(before: dict[str, str], after: dict[str, str]) -> int:
    """Symbols added or whose source changed (a removed symbol embeds nothing)."""
    return sum(1 for name, digest in after.items() if before.get(name) != digest)


def run(package: str, versions: tuple[str, ...], workdir: Path) -> dict[str, Any]:
    from freshindex.registry.records import SourceSetup
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    sdists = {v: fetch_sdist(package, v) for v in versions}
    missing = [v for v, p in sdists.items() if p is None]
    if missing:
        raise SystemExit(f"cannot download {package} {', '.join(missing)} from the package registry")
    repo = workdir / "repo"
    svc = Services(load_settings(data_dir=workdir / "data", embedding={"provider": "hashing"}))
    steps: list[dict[str, Any]] = []
    prev: dict[str, str] = {}
    try:
        for i, version in enumerate(versions):
            step = commit_release(repo, sdists[version], package, version)  # type: ignore[arg-type]
            if i == 0:
                svc.registry.add_source("repo", kind="git", location=str(repo), owner="bench", kb="default",
                                        setup=SourceSetup(options={"ref": "main"}))
            now = symbols(repo, step["commit"])
            started = time.perf_counter()
            report = sync_inline(svc, "repo")
            seconds = time.perf_counter() - started
            summary = report.run.summary
            steps.append({
                "version": version, "commit": step["commit"][:10],
                "moved": "{} -> {}".format(*step["moved"]) if step["moved"] else "",
                "status": report.run.status, "documents_changed": summary.get("documents_changed", 0),
                "documents_moved": len(summary.get("moves") or []),
                "symbols_changed": changed_symbols(prev, now), "symbols": len(now),
                "chunks_embedded": summary.get("chunks_embedded", 0), "chunks_reused": summary.get("chunks_reused", 0),
                "held": bool(summary.get("held")), "seconds": round(seconds, 2),
            })
            prev = now
    finally:
        svc.close()
    return {"package": package, "versions": list(versions), "embedder": "hashing", "steps": steps}


def markdown(data: dict[str, Any]) -> list[str]:
    from bench.report import table

    rows = [[s["version"], s["commit"], s["moved"] or "-", s["status"], s["documents_changed"], s["documents_moved"],
             s["symbols_changed"], s["chunks_embedded"], s["chunks_reused"], "yes" if s["held"] else "no",
             s["seconds"]] for s in data["steps"]]
    return [f"# Git history: {data['package']} {data['versions'][0]} .. {data['versions'][-1]}", "",
            "Each release committed on top of the last (a `git mv` where the package moved), then one sync of "
            "the `git` source. Symbols: Python functions, classes and methods added or changed since the "
            "previous release (module-relative names, so a moved package keeps them). Embedder: hashing "
            "(embedded counts do not depend on the model).", "",
            *table(["release", "commit", "moved", "status", "docs changed", "docs moved", "symbols changed",
                    "chunks embedded", "chunks reused", "held", "s"],
                   ["l", "l", "l", "l", "r", "r", "r", "r", "r", "l", "r"], rows)]


def main() -> None:
    from bench.report import write

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default=PACKAGE)
    parser.add_argument("--versions", default=",".join(VERSIONS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = run(args.package, tuple(args.versions.split(",")), Path(tmp))
    write("git_history", data, markdown(data))


if __name__ == "__main__":
    main()
