"""Stage routing: which part of a document's work runs where, and what one stage hands the next.

With ``broker.stage_queues`` a document is worked on by up to three tasks on
their own queues (names: :mod:`workers.names`):

* ``process_document`` (parse queue, :attr:`Stage.PARSE`): fetch and parse.
  A PDF with a page that needs OCR is handed on, as it is (its key), to
  ``ocr_document``: nothing of the parse is kept, the OCR worker fetches and
  reads it again (a text page costs milliseconds, a scanned one seconds);
* ``ocr_document`` (ocr queue, :attr:`Stage.OCR`): the same work with OCR;
* either of them chunks and diffs against the registry; chunks new to the
  vector cache go on to ``embed_document`` (embed queue) with the chunks in
  the message (:class:`EmbedPayload`, at most ``broker.stage_payload_max_bytes``
  of JSON, otherwise the chunking worker embeds them itself).  That task
  embeds, stages the document in the run's changeset and records its outcome,
  which is what lets the run finish (:func:`workers.embed_stage.embed_document`).

Without it (:attr:`Stage.ALL`: the inline runner, and a parse worker when
stage queues are off) one call does every stage, as before.  A hand-off is
the exception :class:`StageHandoff`, raised by the pipeline and turned into
the next task by the Celery shell; the document keeps no outcome until the
last stage records one, so the run's accounting (one outcome per planned
document) is unchanged.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from freshindex.acl.model import DocumentAcl
from freshindex.core.types import ChunkDraft


class Stage(StrEnum):
    ALL = "all"  # every stage in one call (stage queues off, the inline runner)
    PARSE = "parse"  # fetch and parse; OCR and new embeddings are handed on
    OCR = "ocr"  # fetch and parse with OCR; new embeddings are handed on
    EMBED = "embed"  # embed the handed chunks and stage the document


class StageHandoff(Exception):
    """The document's next stage runs elsewhere: the task shell sends it (``payload`` for the embed stage)."""

    def __init__(self, stage: Stage, payload: dict[str, Any] | None = None) -> None:
        super().__init__(f"handed on to the {stage} stage")
        self.stage, self.payload = stage, payload


@dataclass(frozen=True)
class EmbedPayload:
    """What the embed stage needs to stage a chunked document: no bytes, no parse tree.

    The diff against the document's live chunks is taken again by the embed
    stage, inside its own staging, so a change recorded meanwhile is seen.
    """

    digest: str  # the content hash recorded for the document
    raw_digest: str  # the fetched bytes' hash
    size: int  # bytes fetched
    title: str
    parser: str
    acl: DocumentAcl | None
    provenance: dict[str, Any]  # keyword arguments of Registry.record_provenance
    chunks: list[ChunkDraft]
    seconds: float  # spent by the earlier stages
    shape_hash: str | None = None  # the parser's (ParsedDocument.meta["shape_hash"]), stored with the document

    def to_json(self) -> dict[str, Any]:
        prov = {k: v.isoformat() if isinstance(v, dt.datetime) else v for k, v in self.provenance.items()}
        return {"digest": self.digest, "raw_digest": self.raw_digest, "size": self.size, "title": self.title,
                "parser": self.parser, "acl": None if self.acl is None else {
                    "tokens": list(self.acl.tokens), "tenant": self.acl.tenant,
                    "sensitivity": str(self.acl.sensitivity), "origin": self.acl.origin},
                "provenance": prov, "chunks": [asdict(c) for c in self.chunks], "seconds": self.seconds,
                "shape_hash": self.shape_hash}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EmbedPayload:
        prov = dict(data["provenance"])
        for name in ("valid_from", "valid_until"):
            if isinstance(prov.get(name), str):
                prov[name] = dt.datetime.fromisoformat(prov[name])
        acl = data["acl"]
        chunks = [ChunkDraft(**{**c, "heading_path": tuple(c["heading_path"])}) for c in data["chunks"]]
        return cls(digest=data["digest"], raw_digest=data["raw_digest"], size=int(data["size"]),
                   title=data["title"], parser=data["parser"],
                   acl=None if acl is None else DocumentAcl(tuple(acl["tokens"]), acl["tenant"], acl["sensitivity"],
                                                            acl["origin"]),
                   provenance=prov, chunks=chunks, seconds=float(data["seconds"]),
                   shape_hash=data.get("shape_hash"))


__all__ = ["EmbedPayload", "Stage", "StageHandoff"]
