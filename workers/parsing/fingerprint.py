"""A hash of what a parse extracted, for cheap change detection.

Two releases of a generated page usually differ only in their furniture
(version string in the navigation bar, build date, previous/next titles).
The parser drops that furniture, so the hash of its output, taken here,
is the same for both: the pipeline then skips chunking, diffing and staging
the page (a parse is all the release cost).

The hash covers everything the chunker reads: the title, every block's
kind, normalised text, heading path, page and meta (anchors, section
numbers, links), and the document meta.  So equal hashes mean equal chunks
under the same pipeline version; it does not cover the pipeline version
itself (the caller compares that separately).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from freshindex.core.types import Block

_WS = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def content_fingerprint(title: str, blocks: tuple[Block, ...] | list[Block], meta: dict[str, Any] | None = None) -> str:
    h = hashlib.sha256()

    def put(value: Any) -> None:
        h.update(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode())
        h.update(b"\x1e")

    put(["title", _norm(title)])
    put(["meta", {k: v for k, v in (meta or {}).items() if k != "content_hash"}])
    for b in blocks:
        put([str(b.kind), _norm(b.text), list(b.heading_path), b.page, b.meta])
    return h.hexdigest()
