"""Small builders the contract suites share (a source, a staged document)."""

from __future__ import annotations

from freshindex.core.enums import DocumentOutcomeKind
from freshindex.core.ids import chunk_point_id, document_id, sha256_hex
from freshindex.core.types import ChunkDraft
from freshindex.registry import DocumentOutcome, Registry, SourceInfo


def draft(doc: str, n: int, text: str) -> ChunkDraft:
    h = sha256_hex(text)
    return ChunkDraft(id=chunk_point_id(doc, ("S", str(n)), h), ordinal=n, text=text, content_hash=h,
                      kind="paragraph", heading_path=("S",), anchor="s")


def add_source(reg: Registry, source_id: str, kb: str) -> SourceInfo:
    return reg.add_source(source_id, kind="folder", location="/kb", owner="team", kb=kb)


def stage(reg: Registry, run: int, cs: int, source: SourceInfo, key: str, texts: list[str]) -> tuple[str, set[str]]:
    """Stage ``texts`` as the new version of document ``key``; returns (document id, chunk ids)."""
    doc = document_id(source.id, key)
    drafts = [draft(doc, i, t) for i, t in enumerate(texts)]
    new = {d.id for d in drafts}
    old = reg.live_chunk_ids(doc)
    reg.stage_document(
        run, cs, source=source, document_id=doc, key=key, etag="e", size=1, content_hash=sha256_hex(*texts),
        title=key, parser="text", parser_version="v", chunks=drafts, added_ids=new - old, removed_ids=old - new,
        outcome=DocumentOutcome(document_id=doc, key=key, outcome=DocumentOutcomeKind.ADDED, chunks_added=len(new - old)),
    )
    return doc, new
