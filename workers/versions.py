"""The versions a document and a build record, so that a change re-parses and rebuilds deliberately, and no more.

A document records ``"<its parser's version>.<PIPELINE_VERSION>"``
(:func:`document_version`, ``documents.parser_version``): the version of the
parser that read it (:attr:`workers.parsing.ParserSpec.version`, ``none``
when no parser reads it) and the part every document shares, the chunker's.
The planner and the pipeline process a document again when the version it
would be recorded with now differs from the one it recorded: bumping the
Markdown parser re-parses the Markdown documents only; bumping the chunker
re-chunks every document.

The builder compares :data:`PIPELINE_VERSION` (with the lexical version,
``Services``) with the active snapshot's: a chunker change rewrites every
point and builds in full; a parser change reaches the builder as the
changesets of the documents it re-parsed, an incremental build.

What it does not do: notice a parser whose output changed without a new
version (its documents are re-parsed when they change).
"""

from __future__ import annotations

from freshindex.workers.chunking import CHUNKER_VERSION

#: The part of every document's version that no parser owns: a change re-chunks every document deliberately.
PIPELINE_VERSION = CHUNKER_VERSION

#: Recorded in place of a parser's version by a document no parser reads (an unsupported type):
#: a parser registered for it later makes the version differ, so the document is tried again.
NO_PARSER = "none"


def document_version(parser_version: str | None, pipeline_version: str = PIPELINE_VERSION) -> str:
    """The version a document read by a parser of ``parser_version`` (None: no parser) records."""
    return f"{parser_version or NO_PARSER}.{pipeline_version}"


def split_version(version: str | None) -> tuple[str, str]:
    """A recorded version's parser and pipeline parts (a parser's version holds no dot)."""
    parser, _, pipeline = (version or "").partition(".")
    return parser, pipeline


def rechunk_reason(recorded: str | None, now: str) -> str:
    """Why a document whose content did not change was processed again: which part of its version moved."""
    old_parser, old_pipeline = split_version(recorded)
    new_parser, new_pipeline = split_version(now)
    if old_pipeline != new_pipeline:
        return f"pipeline {old_pipeline or recorded} -> {new_pipeline}"
    return f"parser {old_parser} -> {new_parser}"


__all__ = ["NO_PARSER", "PIPELINE_VERSION", "document_version", "rechunk_reason", "split_version"]
