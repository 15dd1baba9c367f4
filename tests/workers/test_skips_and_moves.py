"""Skipped is not failed, and moves are moves, on real material.

Skips: given a real Sphinx documentation tree (CPython 3.11's HTML docs from
Debian's python3.11-doc: two pages of text, two generated index pages that
hold only links, the search page, a stylesheet and an SVG from ``_static``)
registered with ``--exclude 'search*.html'``; when it syncs, the run is
``succeeded``, the index pages are skipped as ``empty``, the stylesheet and
the SVG as ``unsupported_type`` and the search page as ``excluded``, each
listed by ``documents list --skipped`` with its reason and counted by reason;
the next sync fetches none of them again and still calls them skipped.

Moves: given a folder holding the real requests 2.31.0 release (its sdist);
when its package moves from ``requests/`` to ``src/requests/`` (what 2.32
did), the sync is not held, embeds nothing, removes every old key in the same
build and serves each module once.  When, later, one module is renamed while
most of the others are deleted, the rename still goes through, the deletions
are held, and the held documents are served labelled ``PENDING_DELETION``.
A connector's own rename hint (``moved_from``, what a git source gives
from ``git diff -M``) is a move even when the content changed a little, and
the renamed document re-embeds only its edited chunks (the vector cache is
keyed by model and chunk content).  Moves found by similarity on sources
without such a hint: ``tests/workers/test_moves.py`` and
``tests/workers/test_moves_release.py``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from click.testing import CliRunner

from freshindex.core.types import ObjectRef
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.connectors.folder import FolderConnector
from freshindex.workers.runner import sync_inline
from tests.sdists import sdist_tree

PAGES = {  # source path in the docs -> key in the test source
    "library/textwrap.html": "library/textwrap.html",
    "library/text.html": "library/text.html",
    "genindex-Q.html": "genindex-Q.html",
    "genindex-Y.html": "genindex-Y.html",
    "search.html": "search.html",
    "_static/pydoctheme.css": "_static/pydoctheme.css",
    "_static/py.svg": "_static/py.svg",
}
SKIPPED = {"genindex-Q.html": "empty", "genindex-Y.html": "empty", "search.html": "excluded",
           "_static/pydoctheme.css": "unsupported_type", "_static/py.svg": "unsupported_type"}


@pytest.fixture(scope="module")
def python_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from bench.corpora import python311

    try:
        html = python311._unpack(python311.DEFAULT_CACHE, python311.fetch(python311.DEFAULT_CACHE))
    except Exception as exc:  # offline, or no apt here
        pytest.skip(f"python3.11-doc is not available: {exc}")
    root = tmp_path_factory.mktemp("pydocs")
    for src, key in PAGES.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html / src, root / key)
    return root


def test_a_real_docs_tree_with_index_pages_and_assets_syncs_as_succeeded(python_docs: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from freshindex.cli import cli

    for k in [k for k in __import__("os").environ if k.startswith("FRESHINDEX_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("FRESHINDEX_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FRESHINDEX_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("FRESHINDEX_CONTEXT__REFUSAL_CALIBRATION", "false")
    runner = CliRunner()

    def run(*args: str) -> object:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    added = run("sources", "add", "pydocs", "--kind", "folder", "--location", str(python_docs),
                "--exclude", "search*.html", "--json")
    assert added["exclude"] == ["search*.html"] and added["include"] == []
    shown = run("sources", "show", "pydocs", "--json")
    assert shown["exclude"] == ["search*.html"]

    report = run("sync", "pydocs", "--json")
    assert report["status"] == "succeeded", report
    assert report["errors"] == []
    assert report["documents"]["added"] == 2 and report["documents"]["skipped"] == len(SKIPPED)
    assert {s["key"]: s["reason"] for s in report["skipped"]} == SKIPPED
    assert report["skipped_by_reason"] == {"empty": 2, "excluded": 1, "unsupported_type": 2}
    assert "search*.html" in next(s["detail"] for s in report["skipped"] if s["key"] == "search.html")

    listed = run("documents", "list", "--skipped", "--json")
    assert {d["key"]: d["error_reason"] for d in listed} == SKIPPED
    assert all(d["state"] == "skipped" and d["error_detail"] for d in listed)
    assert run("documents", "errors", "--json") == []  # skips are not documents in error

    again = run("sync", "pydocs", "--json")
    assert again["status"] == "succeeded" and again["documents"]["skipped"] == len(SKIPPED)
    assert again["skipped"] == [] and again["documents"]["unchanged"] == 2  # nothing re-read


@pytest.fixture(scope="module")
def requests_release() -> Path:
    tree = sdist_tree("requests", "2.31.0")
    if tree is None:
        pytest.skip(f"the requests 2.31.0 sdist is not available: {sdist_tree.last_error}")
    return tree


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    # The deletion guard at its defaults: a move must not need a looser one.  (Refusal calibration, a
    # few hundred queries per build, is not what this tests.)
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                      context={"refusal_calibration": False}))
    try:
        yield services
    finally:
        services.close()


def _served_keys(svc: Services, question: str) -> list[str]:
    return [e.key for e in svc.client.retrieve(question, kb="default", limit=10).evidence]


def test_a_package_moved_under_src_is_a_move_not_a_deletion(svc: Services, requests_release: Path,
                                                             tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(requests_release / "requests", root / "requests")
    shutil.copy(requests_release / "README.md", root / "README.md")
    modules = sorted(p.name for p in (root / "requests").glob("*.py"))
    svc.registry.add_source("requests", kind="folder", location=str(root), owner="t", kb="default")
    first = sync_inline(svc, "requests")
    assert first.run.status == "succeeded" and first.as_dict()["documents"]["added"] == len(modules) + 1
    points = first.snapshot.point_count

    (root / "src").mkdir()
    shutil.move(str(root / "requests"), str(root / "src" / "requests"))
    moved = sync_inline(svc, "requests")
    d = moved.as_dict()
    assert moved.run.status == "succeeded" and d["held_reason"] is None and d["pending_deletion"] is None
    assert sorted(m["from"] for m in d["moves"]) == [f"requests/{m}" for m in modules]
    assert all(m["to"] == "src/" + m["from"] for m in d["moves"])
    assert d["documents"]["moved"] == len(modules) and d["documents"]["added"] == len(modules)
    assert d["documents"]["deleted"] == 0
    assert d["chunks_embedded"] == 0 and d["chunks_reused"] > 0  # the vector cache is content-keyed
    assert svc.metrics.value("freshindex_documents_moved_total", source="requests") == len(modules)
    # One build: the old keys' points went with it, nothing is served twice.
    assert moved.build_status == "built" and moved.snapshot.point_count == points
    keys = _served_keys(svc, "How do I send a POST request with a JSON body and a timeout?")
    assert keys and all(not k.startswith("requests/") for k in keys)
    docs = svc.registry.documents_for_source("requests")
    assert {k for k, doc in docs.items() if doc.state == "active"} == {"README.md"} | {
        f"src/requests/{m}" for m in modules}

    # Later: one module renamed, most of the others deleted. The rename goes through; the deletions are held.
    pkg = root / "src" / "requests"
    (pkg / "api.py").rename(pkg / "public_api.py")
    doomed = [m for m in modules if m not in ("api.py", "__init__.py", "models.py")]
    for m in doomed:
        (pkg / m).unlink()
    held = sync_inline(svc, "requests")
    h = held.as_dict()
    assert held.run.status == "held" and h["moves"] == [{"from": "src/requests/api.py",
                                                         "to": "src/requests/public_api.py"}]
    assert h["pending_deletion"]["documents"] == len(doomed)
    assert sorted(h["pending_deletion"]["keys"]) == sorted(f"src/requests/{m}" for m in doomed)[:20]
    assert h["chunks_embedded"] == 0
    packet = svc.client.retrieve("Session.request method: send a prepared request, merge environment settings",
                                 kb="default", limit=10)
    labelled = [e for e in packet.evidence if e.pending_deletion]
    assert labelled and all(e.key in {f"src/requests/{m}" for m in doomed} for e in labelled)
    assert all(not e.pending_deletion for e in packet.evidence if e.key not in {f"src/requests/{m}" for m in doomed})
    assert "PENDING_DELETION" in packet.rendered
    assert not any(e.key == "src/requests/api.py" for e in packet.evidence)  # the old name is gone at once


@dataclasses.dataclass(frozen=True)
class _Renamed(ObjectRef):
    moved_from: str | None = None


class _HintingFolder(FolderConnector):
    """A folder whose listing says what was renamed, as a git connector's ``git diff -M`` would."""

    hints: ClassVar[dict[str, str]] = {}

    def list(self):  # type: ignore[override]
        for ref in super().list():
            fields = {f.name: getattr(ref, f.name) for f in dataclasses.fields(ObjectRef) if f.name != "moved_from"}
            yield _Renamed(**fields, moved_from=self.hints.get(ref.key))


def test_a_rename_the_connector_names_is_a_move_even_with_an_edit(svc: Services, tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(4):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nThe rotation window for service {i} is {i + 2} hours.\n\n"
                                       f"## Owners\n\nTeam {i} owns the rotation and its pager.\n\n"
                                       f"## History\n\nThe window was set in release {i}.{i + 1}.\n")
    svc.registry.add_source("notes", kind="folder", location=str(root), owner="t", kb="default")
    hinting = _HintingFolder(root, max_bytes=10_000_000)
    ctx = dataclasses.replace(svc.pipeline, connector_for=lambda _source: hinting)
    runner = SimpleNamespace(pipeline=ctx, registry=svc.registry, builder=svc.builder, metrics=svc.metrics,
                             settings=svc.settings)
    assert sync_inline(runner, "notes").run.status == "succeeded"  # type: ignore[arg-type]

    (root / "renamed").mkdir()
    for i in range(3):  # three of four renamed (75 %: held, were they deletions), each with an edit
        text = (root / f"n{i}.md").read_text() + "Edited on the way.\n"
        (root / f"n{i}.md").unlink()
        (root / "renamed" / f"n{i}.md").write_text(text)
    _HintingFolder.hints = {f"renamed/n{i}.md": f"n{i}.md" for i in range(3)}
    report = sync_inline(runner, "notes")  # type: ignore[arg-type]
    assert report.run.status == "succeeded", report.run.held_reason
    assert len(report.as_dict()["moves"]) == 3
    # The renamed documents are processed as new keys: only the edited section of each is embedded.
    assert report.run.summary["chunks_embedded"] == 3 and report.run.summary["chunks_reused"] >= 3
    docs = svc.registry.documents_for_source("notes")
    assert all(docs[f"n{i}.md"].state == "deleted" for i in range(3))
