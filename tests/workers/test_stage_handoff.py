"""Stage routing in one process (workers/handoff.py): what each stage hands on, and that the stages stage
exactly what one whole-document call stages.  The separate worker processes are in
tests/e2e/test_stage_queues.py."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.fixtures.scans import scanned_pdf
from freshindex.core.enums import DocumentOutcomeKind
from freshindex.core.ids import document_id
from freshindex.registry import DocumentOutcome
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import embed_stage, pipeline
from freshindex.workers.handoff import Stage, StageHandoff
from tests.conftest import EXAMPLES

KEYS = ["guides/release.md", "code/retry.py", "scans/claim.pdf"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    for key in KEYS[:2]:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(EXAMPLES / "kb" / key, root / key)
    (root / "scans").mkdir()
    (root / "scans" / "claim.pdf").write_bytes(scanned_pdf())
    return root


def _services(tmp_path: Path, name: str, folder: Path) -> Services:
    svc = Services(load_settings(data_dir=tmp_path / name, embedding={"provider": "hashing"}))
    svc.registry.add_source("docs", kind="folder", location=str(folder), owner="t", kb="default")
    return svc


@pytest.fixture
def staged(tmp_path: Path, folder: Path) -> Iterator[Services]:
    svc = _services(tmp_path, "staged", folder)
    yield svc
    svc.close()


@pytest.fixture
def whole(tmp_path: Path, folder: Path) -> Iterator[Services]:
    svc = _services(tmp_path, "whole", folder)
    yield svc
    svc.close()


def _through_stages(svc: Services, run: int, cs: int, key: str, size: int) -> tuple[DocumentOutcome, list[Stage]]:
    """Run the document's stages as the workers would, each payload through JSON as the broker carries it."""
    stage, payload, hops = Stage.PARSE, None, []
    while True:
        try:
            if stage is Stage.EMBED:
                return embed_stage.embed_document(svc.pipeline, run, cs, "docs", key, "e1", size, payload), hops
            return pipeline.process_document(svc.pipeline, pipeline.DocumentTask(run, cs, "docs", key, "e1", size), stage), hops
        except StageHandoff as handoff:
            hops.append(handoff.stage)
            stage, payload = handoff.stage, json.loads(json.dumps(handoff.payload))


def _chunks(svc: Services, key: str) -> list[dict[str, Any]]:
    rows = svc.registry.chunk_rows(sorted(svc.registry.live_chunk_ids(document_id("docs", key))))
    return [{"id": r.id, "hash": r.content_hash, "text": r.text, "meta": json.loads(json.dumps(r.meta)),
             "heading_path": r.heading_path, "page": r.page, "title": r.title} for r in rows]


def test_the_stages_hand_on_ocr_and_embedding_and_stage_what_one_call_stages(
    staged: Services, whole: Services, folder: Path
) -> None:
    # Given the same three documents (text, code, a scanned PDF) in two registries
    run, cs = staged.registry.start_sync_run("docs", "test")
    wrun, wcs = whole.registry.start_sync_run("docs", "test")
    for key in KEYS:
        size = (folder / key).stat().st_size
        # When one goes through the stages and the other is processed whole (stage queues off)
        outcome, hops = _through_stages(staged, run, cs, key, size)
        alone = pipeline.process_document(whole.pipeline, pipeline.DocumentTask(wrun, wcs, "docs", key, "e1", size))
        # Then only the scanned PDF went to OCR, every document to embedding, and both were added
        assert hops == ([Stage.OCR, Stage.EMBED] if key.endswith(".pdf") else [Stage.EMBED]), key
        assert outcome.outcome == alone.outcome == DocumentOutcomeKind.ADDED
        assert (outcome.chunks_embedded, outcome.chunks_added) == (alone.chunks_embedded, alone.chunks_added) != (0, 0)
        # with the same chunks, texts, metadata and provenance in the registry
        assert _chunks(staged, key) == _chunks(whole, key)
        assert staged.registry.get_document(document_id("docs", key)).content_hash == \
            whole.registry.get_document(document_id("docs", key)).content_hash
        # and the version of the parser that read it (the embed stage has only its name: workers/versions.py)
        assert staged.registry.get_document(document_id("docs", key)).parser_version == \
            whole.registry.get_document(document_id("docs", key)).parser_version == \
            pipeline.document_version(whole.pipeline.parsers, key)
    # and the OCR'd page was counted by the stage that read it
    assert staged.metrics.value("freshindex_ocr_pages_total", source="docs") == 1
    # When the run is synced again with nothing changed, the parse stage decides alone: nothing is handed on
    run2, cs2 = staged.registry.start_sync_run("docs", "test")
    again = [_through_stages(staged, run2, cs2, key, (folder / key).stat().st_size) for key in KEYS[:2]]
    assert [(o.outcome, hops) for o, hops in again] == [(DocumentOutcomeKind.UNCHANGED, [])] * 2


def test_chunks_over_the_payload_limit_are_embedded_where_they_were_chunked(staged: Services, folder: Path) -> None:
    # Given a hand-off limit smaller than any document's chunks
    staged.pipeline.stage_payload_max_bytes = 10
    run, cs = staged.registry.start_sync_run("docs", "test")
    # When a text document goes through the parse stage
    outcome, hops = _through_stages(staged, run, cs, KEYS[0], (folder / KEYS[0]).stat().st_size)
    # Then the parse stage embedded and staged it itself
    assert hops == [] and outcome.outcome == DocumentOutcomeKind.ADDED and outcome.chunks_embedded > 0


def test_an_embed_stage_of_a_closed_run_is_fenced_off_and_stages_nothing(staged: Services, folder: Path) -> None:
    # Given a document handed on to the embed stage
    run, cs = staged.registry.start_sync_run("docs", "test")
    key, size = KEYS[0], (folder / KEYS[0]).stat().st_size
    with pytest.raises(StageHandoff) as handed:
        pipeline.process_document(staged.pipeline, pipeline.DocumentTask(run, cs, "docs", key, "e1", size), Stage.PARSE)
    # When the run is closed before the embed task runs (a later run adopted it, or the reaper closed it)
    staged.registry.finish_sync_run(run, error="closed for the test")
    outcome = embed_stage.embed_document(staged.pipeline, run, cs, "docs", key, "e1", size, handed.value.payload)
    # Then it is stale, counted, and nothing of the document is in the registry
    assert outcome.outcome == DocumentOutcomeKind.STALE
    assert staged.metrics.value("freshindex_stale_tasks_total", task="process_document") == 1
    assert staged.registry.live_chunk_ids(document_id("docs", key)) == set()
    assert staged.registry.get_document(document_id("docs", key)) is None
