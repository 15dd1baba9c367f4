"""The embed stage records the version of the parser that read a document, on success and on failure.

A key without an extension a parser reads (``pages/ferry``) is read by its
listing's media type in the parse stage; the embed stage gets no media type,
only the parser's name in its payload.  When embedding fails (the model
refuses the text), the failure must record that parser's version: a version
guessed from the key (plain text) differs from what the planner expects, and
a failed document whose version differs is tried again at every sync.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.core.enums import DocumentOutcomeKind
from freshindex.core.errors import DocumentError
from freshindex.core.ids import document_id
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import embed_stage, pipeline
from freshindex.workers.handoff import Stage, StageHandoff
from tests.e2e import typed_source

KEY, MEDIA = "pages/ferry", "text/html; charset=utf-8"


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    typed_source.install()
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    services.registry.add_source("typed", kind=typed_source.KIND, location="typed://x", owner="t", kb="default")
    try:
        yield services
    finally:
        services.close()
        typed_source.uninstall()


def test_an_embed_failure_records_the_version_of_the_parser_that_read_the_document(
        svc: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    run, cs = svc.registry.start_sync_run("typed", "test")
    size = len(typed_source.LISTED[KEY][1])
    # Given a bare key parsed by its media type and handed on to the embed stage
    with pytest.raises(StageHandoff) as handed:
        pipeline.process_document(svc.pipeline, pipeline.DocumentTask(run, cs, "typed", KEY, "e1", size, MEDIA),
                                  Stage.PARSE)
    assert handed.value.stage is Stage.EMBED
    payload = json.loads(json.dumps(handed.value.payload))

    # When the embedding model refuses its text
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise DocumentError(DocumentError.EMBED_REJECTED, "the model refused the text")

    monkeypatch.setattr(pipeline, "_diff_and_embed", refuse)
    outcome = embed_stage.embed_document(svc.pipeline, run, cs, "typed", KEY, "e1", size, payload)
    # Then the failure records the HTML parser's version, the one the planner compares for this listing
    assert outcome.outcome == DocumentOutcomeKind.FAILED
    expected = pipeline.document_version(svc.pipeline.parsers, KEY, MEDIA)
    assert expected != pipeline.document_version(svc.pipeline.parsers, KEY)  # the key alone names plain text
    assert svc.registry.get_document(document_id("typed", KEY)).parser_version == expected
