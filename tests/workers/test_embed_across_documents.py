"""The inline sync embeds the changed chunks of many documents together (workers/embed_batch.py).

Given a folder whose pages each change one section between two syncs, then
the update sends those chunks to the model in calls of the embedder's batch
size, not one call per page, each chunk once, with the vectors a call per
page gives; a call that fails stages none of its documents, and the next
sync embeds and stages them; a text the model refuses fails its own page
only.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from freshindex.core.errors import DocumentError
from freshindex.core.ids import document_id
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

PAGES = 10


class Watched:
    """The sync's embedder, counting the texts of each call; ``fail`` makes the next calls raise it."""

    def __init__(self, real: Any) -> None:
        self.real, self.model_id, self.dimension = real, real.model_id, real.dimension
        self.calls: list[list[str]] = []
        self.fail: BaseException | None = None
        self.refuse = ""  # a call holding a text with this in it is refused, as a remote model refuses one

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self.fail is not None:
            raise self.fail
        if self.refuse and any(self.refuse in t for t in texts):
            raise DocumentError(DocumentError.EMBED_REJECTED, "the model refused a text")
        return self.real.embed(texts)


def _write(root: Path, edited: bool) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for n in range(PAGES):
        rollback = f"Restore backup {n} instead of rolling back." if edited else f"Run `migrate down {n}` first."
        (root / f"page{n}.md").write_text(
            f"# Page {n}\n\n## Setup\n\nInstall the agent {n} on every host and restart it.\n\n"
            f"## Rollback\n\n{rollback}\n\n## Support\n\nAsk the team on channel {n}.\n")


def _service(tmp_path: Path, root: Path, batch_size: int = 4) -> tuple[Services, Watched]:
    svc = Services(load_settings(data_dir=tmp_path / "d", embedding={"provider": "hashing", "batch_size": batch_size},
                                 context={"refusal_calibration": False}))
    svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="kb")
    watched = Watched(svc.embedder)
    svc.pipeline = dataclasses.replace(svc.pipeline, embedder=watched)  # type: ignore[misc]
    return svc, watched


def _hashes(svc: Services) -> dict[str, str | None]:
    out = {}
    for n in range(PAGES):
        record = svc.registry.get_document(document_id("docs", f"page{n}.md"))
        out[f"page{n}.md"] = record.content_hash if record is not None else None
    return out


def _live_texts(svc: Services) -> list[str]:
    return sorted(r.text for r in svc.registry.chunk_rows(sorted(svc.registry.live_chunk_ids_for_kb("kb"))))


def test_an_update_embeds_the_changed_chunks_of_many_pages_in_full_batches(tmp_path: Path) -> None:
    root = tmp_path / "src"
    _write(root, edited=False)
    svc, watched = _service(tmp_path, root)
    try:
        assert sync_inline(svc, "docs").build_status == "built"
        _write(root, edited=True)  # one section changed in each of the ten pages
        watched.calls.clear()
        report = sync_inline(svc, "docs")
        # Then the ten changed chunks went to the model in calls of the batch size (4), not ten calls of one
        assert report.build_status == "built" and report.run.summary["chunks_embedded"] == PAGES
        assert [len(c) for c in watched.calls] == [4, 4, 2], watched.calls
        sent = [t for call in watched.calls for t in call]
        assert len(sent) == len(set(sent)) == PAGES and all("Restore backup" in t for t in sent)
        # And every page is staged with its own counts and the vectors one call per page gives
        assert report.run.summary["documents"].get("modified") == PAGES
        rows = svc.registry.chunk_rows(sorted(svc.registry.live_chunk_ids_for_kb("kb")))
        changed = [r for r in rows if "Restore backup" in r.text]
        assert len(changed) == PAGES
        cached = svc.registry.cached_vectors(svc.embedder.model_id, [r.content_hash for r in changed])
        alone = {r.content_hash: svc.embedder.embed([t for t in sent if r.text in t])[0] for r in changed}
        assert all(np.allclose(cached[h], v) for h, v in alone.items())
        # And nothing already in the vector cache is sent again: the same edit elsewhere embeds nothing
        watched.calls.clear()
        (root / "copy.md").write_text((root / "page3.md").read_text())
        again = sync_inline(svc, "docs")
        assert watched.calls == [] and again.run.summary["chunks_embedded"] == 0
    finally:
        svc.close()


@pytest.mark.parametrize("failure", [RuntimeError("the model died"), KeyboardInterrupt()])
def test_a_failed_call_stages_none_of_its_pages_and_the_next_sync_embeds_them(tmp_path: Path,
                                                                               failure: BaseException) -> None:
    root = tmp_path / "src"
    _write(root, edited=False)
    svc, watched = _service(tmp_path, root)
    try:
        sync_inline(svc, "docs")
        before, texts_before = _hashes(svc), _live_texts(svc)
        _write(root, edited=True)
        watched.fail = failure
        # When the model fails on the update's first call
        with pytest.raises(type(failure)):
            sync_inline(svc, "docs")
        # Then no page is recorded with its new content, none has chunks staged without vectors, no attempt is
        # left open (no crash is counted against them), and the run failed
        assert _hashes(svc) == before
        assert _live_texts(svc) == texts_before
        run = svc.registry.sync_runs("docs", limit=1)[0]
        assert run.status == "failed"
        assert all(svc.registry.document_crashes(document_id("docs", k)) == 0 for k in before)
        # And the next sync embeds and stages every page
        watched.fail = None
        watched.calls.clear()
        report = sync_inline(svc, "docs")
        assert report.build_status == "built" and report.run.summary["chunks_embedded"] == PAGES
        assert report.errors == ()
        assert all(before[k] != h for k, h in _hashes(svc).items())
        assert sum("Restore backup" in t for t in _live_texts(svc)) == PAGES
    finally:
        svc.close()


def test_a_text_the_model_refuses_fails_its_own_page_only(tmp_path: Path) -> None:
    root = tmp_path / "src"
    _write(root, edited=False)
    svc, watched = _service(tmp_path, root)
    try:
        sync_inline(svc, "docs")
        _write(root, edited=True)
        watched.refuse = "Restore backup 5 "
        report = sync_inline(svc, "docs")
        # Then the call holding page 5's text was embedded again one page at a time: page 5 failed, the rest staged
        assert [(e.key, e.reason) for e in report.errors] == [("page5.md", DocumentError.EMBED_REJECTED)]
        assert report.run.summary["chunks_embedded"] == PAGES - 1
        live = _live_texts(svc)
        assert sum("Restore backup" in t for t in live) == PAGES - 1 and not any("backup 5 " in t for t in live)
        # And the next sync tries page 5 again
        watched.refuse = ""
        again = sync_inline(svc, "docs")
        assert again.errors == () and again.run.summary["chunks_embedded"] == 1
    finally:
        svc.close()
