"""The version every indexed document records: its parser set and chunker, so a change re-chunks deliberately."""

from __future__ import annotations

from freshindex.workers.chunking import CHUNKER_VERSION
from freshindex.workers.parsing import PARSER_SET_VERSION

#: Recorded on each document; a change re-chunks documents deliberately.
PIPELINE_VERSION = f"{PARSER_SET_VERSION}.{CHUNKER_VERSION}"

__all__ = ["PIPELINE_VERSION"]
