"""Vectors survive moves, renames and renumbering, through the real pipeline.

Given a folder with a Python package, a TypeScript file and Markdown pages
(one with numbered sections), synced once; when the code moves under
``src/``, a page is renamed and a section is renumbered, then the next syncs
embed 0 chunks: neither the embedded text nor the vector cache key depends
on the file path or on section numbers.  The new path is in the payload.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.conftest import EXAMPLES


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    # A move is a delete plus an add: the deletion guard would hold most of this tree's documents.
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                      sync={"max_deletion_share": 1.0}))
    yield services
    services.close()


MANUAL = """# Operations manual

## 3.1 Preparation

Announce the window in the release channel and freeze merges.

## 3.2 Rollback

Run `migrate down 1` only if the migration has not been committed to the ledger.

### 3.2.1 Verification

Check the ledger balance after the rollback and page the owner on a mismatch.
"""


def _tree(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    shutil.copy(EXAMPLES / "kb/code/retry.py", root / "pkg/retry.py")
    shutil.copy(EXAMPLES / "kb/code/ratelimit.ts", root / "pkg/ratelimit.ts")
    (root / "docs").mkdir()
    (root / "docs/manual.md").write_text(MANUAL)
    (root / "docs/untitled.md").write_text("Keep raw events for 13 months, then delete them.\n")


def test_a_moved_renamed_or_renumbered_file_embeds_nothing(svc: Services, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _tree(root)
    svc.registry.add_source("repo", kind="folder", location=str(root), owner="eng", kb="default")
    first = sync_inline(svc, "repo")
    assert first.run.status == "succeeded", first.errors
    assert first.run.summary["chunks_embedded"] >= 8

    # A release that moves its package under src/ and renames a page (title from its file name).
    (root / "src").mkdir()
    shutil.move(root / "pkg", root / "src/pkg")
    (root / "docs/untitled.md").rename(root / "docs/retention.md")
    moved = sync_inline(svc, "repo")
    assert moved.run.status == "succeeded", moved.errors
    assert moved.run.summary["chunks_embedded"] == 0
    keys = {r.key for r in svc.registry.chunk_rows(sorted(svc.registry.live_chunk_ids_for_kb("default")))}
    assert {"src/pkg/retry.py", "src/pkg/ratelimit.ts", "docs/retention.md"} <= keys  # the path is in the payload
    assert not {"pkg/retry.py", "docs/untitled.md"} & keys

    # Chapter 3 becomes chapter 4.
    (root / "docs/manual.md").write_text(MANUAL.replace("## 3.", "## 4.").replace("### 3.", "### 4."))
    renumbered = sync_inline(svc, "repo")
    assert renumbered.run.summary["documents_changed"] == 1
    assert renumbered.run.summary["chunks_embedded"] == 0
    rows = [r for r in svc.registry.chunk_rows(sorted(svc.registry.live_chunk_ids_for_kb("default")))
            if r.key == "docs/manual.md"]
    rollback = next(r for r in rows if "migrate down 1" in r.text)
    assert rollback.heading_path == ("Operations manual", "Rollback")
    assert rollback.meta["numbered_heading_path"] == ["Operations manual", "4.2 Rollback"]  # citations keep it
