"""Work on the next documents in threads while the sync loop processes this one (:class:`ParseAhead`).

An in-process sync (:func:`workers.runner.sync_inline`) hands each next
document to a thread that fetches, parses and chunks it, and, with
``embed=True``, embeds the chunks the document did not have and the vector
cache lacks.  :func:`workers.pipeline._process_document` takes that work
when the bytes it decides on hash the same, and does the work itself
otherwise (a fetch the thread could not make, retries, failures recorded as
before).  Outcomes are the same either way (tests/workers/test_parse_ahead.py).

Why: onnxruntime releases the GIL while it embeds and parsing is mostly
Python, so on a machine with cores to spare parsing document n+1 overlaps
embedding document n.  With a remote model (``embedding.remote``) the
overlap is with the server: without it the server waits while this process
parses and stages, and this process waits while the server embeds.

What the threads touch: the source (a fetch), the parsers and the chunker
(pure functions), and, embedding ahead, the registry (two reads: the
document's live chunk ids and the vector cache) and the model.  Nothing is written: the vectors are handed to the loop, which
caches them with the rest of the document's work (:func:`core.vector_cache.vectors_for`
with ``ahead``).  A failure in a thread prepares nothing and the loop meets
it where it would have.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from freshindex.core.errors import DocumentError
from freshindex.core.ids import content_hash, document_id
from freshindex.core.types import ChunkDraft, ParsedDocument
from freshindex.workers.connectors import check_key
from freshindex.workers.versions import PIPELINE_VERSION

if TYPE_CHECKING:
    import numpy as np

    from freshindex.workers.pipeline import PipelineContext


@dataclass
class Prepared:
    """What a thread prepared for one document."""

    data: bytes | None = None
    digest: str = ""
    parsed: ParsedDocument | None = None
    chunks: list[ChunkDraft] | None = None
    error: BaseException | None = None  # a DocumentError of parsing or chunking, raised where it would have been
    #: The bytes' shape hash, when it equals the indexed one: the parser would read the same (a touch, no parse).
    shape: str | None = None
    #: Embedded ahead (``embed=True``): content hash -> vector, for the chunks new to the document and the cache.
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    embed_seconds: float = 0.0  # wall time of that embedding


class ParseAhead:
    """Fetch, parse and chunk (and with ``embed``, embed) documents in threads, ahead of the loop.

    Bytes whose raw hash is the indexed one, or whose shape hash is (only the
    navigation changed), are not parsed ahead (they cost a touch).  At most :attr:`HELD` documents are held ahead; the oldest is
    dropped first.
    """

    HELD = 2

    def __init__(self, *, embed: bool = False) -> None:
        self.embed = embed
        self._pending: dict[str, tuple[threading.Thread, list[Prepared]]] = {}

    def submit(self, ctx: PipelineContext, source_id: str, key: str) -> None:
        while len(self._pending) >= self.HELD:
            thread, _ = self._pending.pop(next(iter(self._pending)))
            thread.join()
        try:
            source = ctx.registry.get_source(source_id)
            connector = ctx.connector_for(source)
            doc_id = document_id(source_id, key)
            known = ctx.registry.get_document(doc_id)
            parsers = ctx.parsers.for_source(source.options)
        except Exception:  # best effort: the document is then processed without help
            return
        current = known is not None and known.parser_version == PIPELINE_VERSION
        skip = known.content_hash if current and known is not None else None
        indexed_shape = known.shape_hash if current and known is not None else None
        box: list[Prepared] = []

        def work() -> None:
            out = Prepared()
            try:
                check_key(key)
                data = connector.fetch(key)
                if len(data) > ctx.max_file_bytes:
                    return  # failed as too_large by the main path, nothing held
                out.data, out.digest = data, content_hash(data)
                if out.digest == skip:
                    return
                if indexed_shape and parsers.shape(data, key) == indexed_shape:
                    out.shape = indexed_shape  # changed only where the parser does not read (navigation)
                    return
                out.parsed = parsers.parse(data, key)
                out.chunks = ctx.chunker.chunk(doc_id, out.parsed)
                if self.embed and out.chunks:
                    out.vectors, out.embed_seconds = embed_new(ctx, doc_id if known is not None else None, out.chunks)
            except DocumentError as exc:
                out.error = exc
            except Exception:  # a fetch error (retried by the main path) or a bug: nothing prepared
                out = Prepared()
            finally:
                box.append(out)

        thread = threading.Thread(target=work, name="freshindex-parse-ahead", daemon=True)
        self._pending[key] = (thread, box)
        thread.start()

    def take(self, key: str) -> Prepared | None:
        """What was prepared for ``key`` (waiting for it), or None."""
        entry = self._pending.pop(key, None)
        if entry is None:
            return None
        thread, box = entry
        thread.join()
        return box[0] if box else None

    def discard(self) -> None:
        for thread, _ in self._pending.values():
            thread.join()
        self._pending.clear()


def embed_new(ctx: PipelineContext, indexed: str | None,
              chunks: list[ChunkDraft]) -> tuple[dict[str, np.ndarray], float]:
    """Vectors of the chunks that are not among the live ones of document ``indexed`` (None: a new document)
    and whose content the vector cache lacks (what the loop's diff will embed), and the seconds it took;
    nothing on any failure (the loop embeds them itself and meets the failure there)."""
    try:
        live = ctx.registry.live_chunk_ids(indexed) if indexed is not None else set()
        texts = {c.content_hash: c.embed_text for c in chunks if c.id not in live}
        cached = ctx.registry.cached_vectors(ctx.embedder.model_id, list(texts)) if texts else {}
        missing = [h for h in texts if h not in cached]
        if not missing:
            return {}, 0.0
        started = time.perf_counter()
        vectors = ctx.embedder.embed([texts[h] for h in missing])
        seconds = time.perf_counter() - started
    except Exception:
        return {}, 0.0
    if vectors.shape != (len(missing), ctx.embedder.dimension):
        return {}, 0.0  # the loop's own call raises the ConfigError that says so
    return dict(zip(missing, vectors, strict=True)), seconds


__all__ = ["ParseAhead", "Prepared", "embed_new"]
