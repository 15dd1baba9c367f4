"""A real release that moves and edits its files is a set of moves, not a mass deletion.

Given a folder source holding the requests 2.31.0 sdist, synced once with
the embedded default (hashing embedder, deletion guard at its defaults);
when the folder becomes the 2.32.3 sdist (the package moved under
``src/``, most modules edited on the way, ``SOURCES.txt`` rewritten), the
sync is not held: every vanished document that a new key mostly holds (by
the rule of :mod:`workers.similarity`, applied here to the two trees' raw
files) is counted as a move, every moved module among them, and only the
rest is deleted.  Embedding stays proportional to change: the run embeds
exactly the chunks whose content the first sync never had, and a moved
module re-embeds only its edited chunks.  Skips (with the reason) when the
package index cannot be reached.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from freshindex.registry.schema import DocumentResult
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from freshindex.workers.similarity import Lines, match_moves, similarity
from tests.sdists import sdist_tree


def _release(version: str) -> Path:
    tree = sdist_tree("requests", version)
    if tree is None:
        pytest.skip(f"the requests {version} sdist is not available: {sdist_tree.last_error}")
    return tree


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                      context={"refusal_calibration": False}))
    try:
        yield services
    finally:
        services.close()


def _files(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def _expected_moves(old: dict[str, Path], new: dict[str, Path], gone: list[str]) -> dict[str, str]:
    """The rule the planner applies, on the raw files of both trees: {new key: old key}."""
    fresh = [k for k in new if k not in old]
    texts: dict[str, Lines] = {}

    def lines(path: Path) -> Lines:
        key = str(path)
        if key not in texts:
            texts[key] = Lines.of([path.read_text("utf-8", "replace")])
        return texts[key]

    found = match_moves({k: new[k].stat().st_size for k in fresh}, {k: old[k].stat().st_size for k in gone},
                        lambda n, o: similarity(lines(old[o]), lines(new[n])), max_comparisons=10_000)
    return {m.new: m.old for m in found}


def _live_hashes(svc: Services) -> dict[str, set[str]]:
    """Content hashes of the live chunks, by document key."""
    out: dict[str, set[str]] = {}
    for row in svc.registry.chunk_rows(svc.registry.live_chunk_ids_for_kb("default")):
        out.setdefault(row.key, set()).add(row.content_hash)
    return out


def _results(svc: Services, run_id: int) -> dict[str, DocumentResult]:
    with svc.registry.session() as s:
        return {r.key: r for r in s.scalars(select(DocumentResult).where(DocumentResult.sync_run_id == run_id))}


def test_requests_2_31_to_2_32_3_as_a_folder_is_moves_not_a_held_deletion(svc: Services, tmp_path: Path) -> None:
    old_tree, new_tree = _release("2.31.0"), _release("2.32.3")
    root = tmp_path / "requests"
    shutil.copytree(old_tree, root)
    svc.registry.add_source("requests", kind="folder", location=str(root), owner="t", kb="default")
    first = sync_inline(svc, "requests")
    assert first.run.status == "succeeded", first.errors
    before = svc.registry.documents_for_source("requests")
    cached = set().union(*_live_hashes(svc).values())

    # The release: the tree is replaced by the next one.
    shutil.rmtree(root)
    shutil.copytree(new_tree, root)
    old, new = _files(old_tree), _files(new_tree)
    active_gone = sorted(k for k, d in before.items() if d.state == "active" and k not in new)
    expected = _expected_moves(old, new, active_gone)
    modules = sorted(k for k in old if k.startswith("requests/") and k.endswith(".py"))
    assert len(modules) == 18 and {f"src/{m}": m for m in modules}.items() <= expected.items()

    report = sync_inline(svc, "requests")
    d = report.as_dict()
    assert report.run.status == "succeeded", d["held_reason"]
    assert d["held_reason"] is None and d["pending_deletion"] is None
    assert {m["to"]: m["from"] for m in d["moves"]} == expected  # every moved module among them
    assert d["documents"]["moved"] == len(expected)
    assert svc.metrics.value("freshindex_documents_moved_total", source="requests") == len(expected)
    # Deleted: what vanished and continues nowhere (SOURCES.txt was rewritten; two empty files were skips).
    vanished = [k for k, doc in before.items() if k not in new and doc.state in ("active", "skipped", "error")]
    assert d["documents"]["deleted"] == len(vanished) - len(expected)
    assert "requests.egg-info/SOURCES.txt" in vanished and "requests.egg-info/SOURCES.txt" not in expected.values()
    after = svc.registry.documents_for_source("requests")
    assert all(after[k].state == "deleted" for k in vanished)
    assert d["documents"]["added"] == sum(1 for k in new if k not in old and after[k].state == "active")

    # One build serves each module once, under its new key only.
    hashes = _live_hashes(svc)
    assert not any(k.startswith("requests/") for k in hashes) and all(f"src/{m}" in hashes for m in modules)
    # Embeds: exactly the chunk contents the first sync never had (the vector cache is model + content hash) ...
    assert d["chunks_embedded"] == len(set().union(*hashes.values()) - cached) > 0
    # ... and a moved module re-embeds only its edited chunks; most of its chunks come from the cache.
    results = _results(svc, report.run.id)
    moved_new = [f"src/{m}" for m in modules]
    assert all(results[k].chunks_embedded == len(hashes[k] - cached) for k in moved_new)
    embedded = sum(results[k].chunks_embedded for k in moved_new)
    reused = sum(results[k].chunks_reused for k in moved_new)
    assert reused > 4 * embedded, (embedded, reused)
