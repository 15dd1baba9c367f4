"""The embed stage: embed the chunks another stage handed on, then stage the document.

Runs on the embed queue (``embed_document``, :mod:`workers.handoff`) inside
the same fence and crash accounting as a whole document
(:func:`workers.pipeline.process_document` with ``work``): a closed run
gets ``stale`` and nothing written; the diff against the document's live
chunks is taken again here, so what staging writes matches the registry now;
the outcome recorded here is the document's one outcome in the run.
"""

from __future__ import annotations

import time
from typing import Any

from freshindex.core.errors import DocumentError
from freshindex.core.ids import document_id
from freshindex.core.types import ParsedDocument
from freshindex.registry import DocumentOutcome
from freshindex.workers import pipeline
from freshindex.workers.handoff import EmbedPayload, Stage


def embed_document(ctx: pipeline.PipelineContext, run_id: int, changeset_id: int, source_id: str, key: str,
                   etag: str | None, size: int, payload: dict[str, Any]) -> DocumentOutcome:
    """Embed the handed chunks new to the vector cache and stage the document in the run's changeset."""
    handed = EmbedPayload.from_json(payload)

    def work() -> DocumentOutcome:
        job = pipeline._Job(run_id, changeset_id, source_id, key, etag, size, time.perf_counter() - handed.seconds,
                            ctx.registry.get_source(source_id), document_id(source_id, key),
                            raw_digest=handed.raw_digest, stage=Stage.EMBED)
        parsed = ParsedDocument(title=handed.title, blocks=(), parser=handed.parser, parser_version="",
                                meta={"shape_hash": handed.shape_hash} if handed.shape_hash else {})
        # The version of the parser that read it (by name), not one guessed from the key: a key read by
        # its listing's media type records that parser's version, on success and on failure alike.
        job.version = pipeline._parsed_version(ctx, job, parsed)
        try:
            change = pipeline._diff_and_embed(ctx, job, handed.digest, parsed, handed.chunks, handed.size,
                                              handed.provenance)
        except DocumentError as exc:  # e.g. a text the model refuses: this document fails, the run goes on
            return pipeline._record_document_error(ctx, job, exc)
        return pipeline._stage(ctx, job, ctx.registry.get_document(job.doc_id), handed.acl, change)

    return pipeline.process_document(ctx, pipeline.DocumentTask(run_id, changeset_id, source_id, key, etag, size),
                                     stage=Stage.EMBED, work=work)


__all__ = ["embed_document"]
