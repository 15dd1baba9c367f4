"""A lexical tokenizer change rebuilds the collection in full (the builder
writes the sparse vectors from stored text) and re-embeds nothing unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.vectorstore import lexical
from freshindex.workers.pipeline import PIPELINE_VERSION
from freshindex.workers.runner import sync_inline


def _write(root: Path, name: str, text: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text, encoding="utf-8")


def test_a_new_lexical_version_makes_the_next_build_full_without_re_embedding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRESHINDEX_EMBEDDING__PROVIDER", "hashing")
    docs = tmp_path / "docs"
    _write(docs, "a.md", "# Pools\n\nThe connection pool keeps sessions open between requests.\n")
    svc = Services(load_settings(data_dir=tmp_path / "data"))
    try:
        assert svc.builder.pipeline_version == f"{PIPELINE_VERSION}.l{lexical.LEXICAL_VERSION}"
        svc.registry.add_source("s1", kind="folder", location=str(docs), owner="team", kb="kb")
        assert sync_inline(svc, "s1").snapshot.strategy == "full"
        _write(docs, "b.md", "# Workers\n\nA worker process takes tasks from the broker.\n")
        assert sync_inline(svc, "s1").snapshot.strategy != "full"  # same tokenizer: built from the change
    finally:
        svc.close()

    monkeypatch.setattr(lexical, "LEXICAL_VERSION", lexical.LEXICAL_VERSION + "-next")
    _write(docs, "c.md", "# Brokers\n\nThe broker holds queued messages until a worker acks them.\n")
    svc = Services(load_settings(data_dir=tmp_path / "data"))
    try:
        third = sync_inline(svc, "s1")
        assert third.snapshot.strategy == "full"  # the active version's sparse vectors are of the old tokenizer
        assert third.run.summary["chunks_embedded"] == 1  # only c.md: a.md and b.md were not re-embedded
        assert svc.registry.get_snapshot(third.snapshot.id).parser_version.endswith("-next")
    finally:
        svc.close()
