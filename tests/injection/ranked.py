"""A small folder indexed through the real pipeline (hashing embedder), and the keys the client ranks first."""

from __future__ import annotations

import uuid
from pathlib import Path

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline


def first_keys(tmp_path: Path, files: dict[str, str], question: str, *, limit: int = 2,
               **context: object) -> list[str]:
    """``files`` (path -> text) synced as one folder source with ``context`` settings (no dense floor, no
    refusal), then the keys of the evidence ``question`` gets, best first."""
    root = tmp_path / "repo"
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    svc = Services(load_settings(data_dir=tmp_path / f"data-{uuid.uuid4().hex}", embedding={"provider": "hashing"},
                                 context={"min_score": 0.0, "refusal": False, **context}))
    try:
        svc.registry.add_source("repo", kind="folder", location=str(root), owner="t", kb="default")
        assert sync_inline(svc, "repo").build_status == "built"
        return [e.key for e in svc.client.retrieve(question, kb="default", limit=limit).evidence]
    finally:
        svc.close()
