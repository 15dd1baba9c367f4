"""Disk full leaves no disk fuller: a dropped build takes its temporary shard copy with it, and frees its space first.

A builder killed in the middle of cloning the active version leaves
``.fi_<collection>.tmp`` beside the shards; the next build (which reconciles
the abandoned version under the writer lease) drops it. A build that fails on
a full disk drops its new collection before it writes the failure to the
registry, which the same full disk may refuse.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from freshindex.core.errors import RetryableError, StoreError
from freshindex.registry import NewSnapshot
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.vectorstore import edge_space
from freshindex.workers.runner import sync_inline


def _kb(tmp_path: Path) -> Services:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"p{i}.md").write_text(f"# Page {i}\n\nThe release train leaves on day {i}.\n")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    svc.registry.add_source("docs", kind="folder", location=str(src), owner="t", kb="default")
    assert sync_inline(svc, "docs").build_status == "built"
    (src / "p9.md").write_text("# Page 9\n\nA new page to build.\n")
    return svc


def test_the_next_build_sweeps_the_copy_an_abandoned_build_left(tmp_path: Path) -> None:
    svc = _kb(tmp_path)
    try:
        # Given a build that died while copying the active version: its record `building`, its copy half done
        svc.registry.create_snapshot(NewSnapshot(
            snapshot_id="default-v2", kb="default", version=2, parent_id="default-v1", collection="fi_default-v2",
            strategy="incremental", embedding_model="m", parser_version="p", changeset_ids=[], upserts=0, deletes=0))
        collections = svc.settings.vector_path / "collections"
        leftover = collections / ".fi_default-v2.tmp" / "segments"
        leftover.mkdir(parents=True)
        (leftover / "chunk_0.mmap").write_bytes(b"\1" * (1 << 20))
        # When the next build runs
        svc.builder.build("default")
        # Then the abandoned version is failed and its copy is gone with it
        assert svc.registry.get_snapshot("default-v2").status == "failed"
        assert not any(p.name.endswith(".tmp") for p in collections.iterdir())
    finally:
        svc.close()


def test_a_build_that_fails_on_a_full_disk_frees_its_space_even_when_the_registry_cannot_record_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = _kb(tmp_path)
    try:
        # Given a disk that fills once the new version is being written, and a registry that cannot write either
        calls = {"n": 0}

        def filling(root: Path, name: str, shard: Path | None = None, *, incoming: int = 0) -> None:
            calls["n"] += 1
            if calls["n"] > 1:
                raise StoreError(f"no space left to write collection {name!r}")

        monkeypatch.setattr(edge_space, "check_writable", filling)

        def full(*_a: object, **_k: object) -> None:
            raise RetryableError("registry unavailable: database or disk is full")

        monkeypatch.setattr(svc.registry, "fail_snapshot", full)
        before = set(svc.store.list_collections())
        # When the build fails
        with pytest.raises(RetryableError):
            svc.builder.build("default", full=True)
        # Then no new collection is left on the disk, and the last snapshot still serves
        assert set(svc.store.list_collections()) == before
        assert svc.registry.active_snapshot("default").id == "default-v1"
    finally:
        svc.close()
