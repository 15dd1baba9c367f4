"""The inline sync's embedding: the new chunks of many documents in one model call (:class:`EmbedBatches`).

A release update changes a few chunks in each of many documents (the
PostgreSQL manual's 15.18 -> 15.20: 285 chunks over 81 pages).  Embedded
per document, each page's chunks went to the model as a call of their own
(median one text): 12.7 s in the model where the same chunks in one call
take 8.0 s, whose runs (:func:`models.onnx.plan_batches`) spread over the
cores.  A full build does not show it as much: a new page brings all its
chunks (median 6) to one call.  So the inline loop
(:func:`workers.runner.sync_inline`) no longer embeds a changed document
itself: once its diff is taken and the vector cache asked
(:func:`core.vector_cache.look_up`), a document whose new chunks the cache
lacks is deferred here, and its chunks go to the model with other
documents' once :attr:`EmbedBatches.size` texts (the embedder's batch
size) wait, or at the end of the loop.  The model runs in a thread of its
own (onnxruntime releases the GIL; a remote model's requests wait on the
network) while the loop goes on with the next documents; at most one call
is in flight.  When it is back, in the loop's thread, the vectors are
written to the cache in one transaction and then each document of the
call is staged (:func:`workers.pipeline._stage`), as it would have been
after embedding its own chunks.

What holds:

* a document is staged only after its vectors are in the cache; one whose
  call failed or was never made (the process died, Ctrl-C, the run
  refused) is not staged: its record keeps the old content hash, so the
  next sync processes it again;
* each hash is embedded once: the cache is asked when the document is
  deferred and again when its call is sent (a call in flight may have
  embedded it), and a hash several documents of one call share is sent
  once (the first document counts it embedded, the others reused);
* a :class:`core.errors.DocumentError` of the call (a text a remote model
  refuses) is not charged to every document of it: each is embedded again
  alone and the error recorded against the one that raises it;
* any other failure (the model server away past its retries, a
  :class:`core.errors.ConfigError`) ends the sync as the document's own
  embedding did.

Attempts (the poison-pill counter, :func:`workers.pipeline.begin_attempt`):
a deferred document's attempt is closed without an outcome (crashes kept)
when it is deferred, and ended with one once it is staged or its failure
recorded.  A process that dies inside the model's call is therefore
charged to no deferred document (they are processed again by the next
sync); the documents in flight in the loop and the threads working ahead
at that moment are charged, as for any death.

Not here: the distributed path (each Celery task stages its own document;
the embed stage embeds one document's chunks), and what the loop writes
for unchanged documents (:mod:`workers.batch`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from freshindex.core.enums import DocumentOutcomeKind
from freshindex.core.errors import DocumentError, RetryableError
from freshindex.core.vector_cache import EmbedResult, Lookup, embed_texts, vectors_for
from freshindex.registry import DocumentOutcome

if TYPE_CHECKING:
    import numpy as np

    from freshindex.acl.model import DocumentAcl
    from freshindex.registry import DocumentRecord
    from freshindex.workers.pipeline import PipelineContext, _Change, _Job

log = logging.getLogger("freshindex.pipeline")


@dataclass
class Deferred:
    """A changed document waiting for its vectors: what :func:`workers.pipeline._stage` takes, and what the
    cache (and the threads working ahead) did not hold of its new chunks (``change.lookup``)."""

    job: _Job
    known: DocumentRecord | None
    acl: DocumentAcl | None
    change: _Change

    @property
    def lookup(self) -> Lookup:
        assert self.change.lookup is not None
        return self.change.lookup


@dataclass
class _Call:
    """One model call for the documents in ``items``: the hashes sent, and what came back."""

    items: list[Deferred]
    hashes: list[str]
    cached: dict[str, np.ndarray]  # found in the cache when the call was sent
    done: threading.Event = field(default_factory=threading.Event)
    vectors: np.ndarray | None = None
    seconds: float = 0.0
    error: BaseException | None = None


class EmbedBatches:
    """The deferred documents of one inline run and their model calls (see the module's docstring).

    Used by the loop's thread only; the model call runs in one thread of its own."""

    def __init__(self, size: int, *, stage: Callable[[PipelineContext, Deferred, EmbedResult], None],
                 fail: Callable[[PipelineContext, Deferred, DocumentError], None]) -> None:
        """``stage``: stage a document whose vectors are cached (:func:`workers.pipeline._stage`); ``fail``:
        record a document's error (:func:`workers.pipeline._record_document_error`)."""
        self.size = max(1, size)
        self._stage_one, self._fail_one = stage, fail
        self._filling: list[Deferred] = []
        self._texts = 0  # hashes the filling documents wait for
        self._flight: _Call | None = None
        self._held: set[str] = set()  # documents deferred and neither staged nor failed yet
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None

    def holds(self, doc_id: str) -> bool:
        """``doc_id`` is deferred: its attempt is closed now, and ended when it is staged."""
        return doc_id in self._held

    def waiting(self, digest: str) -> bool:
        """A deferred document has this content (a twin of it decided now must find it staged first)."""
        calls = self._filling + (self._flight.items if self._flight is not None else [])
        return any(d.change.digest == digest for d in calls)

    def defer(self, ctx: PipelineContext, item: Deferred) -> DocumentOutcome:
        """Hold ``item`` for a model call with other documents; send the call once :attr:`size` texts wait.
        The outcome returned is the one the document will have when staged (its counts then)."""
        # Its parse's blocks are not needed to stage it: only its title, parser and meta are kept meanwhile.
        change = item.change
        item.change = dataclasses.replace(change, parsed=dataclasses.replace(change.parsed, blocks=()))
        self._filling.append(item)
        self._held.add(item.job.doc_id)
        self._texts += len(item.lookup.todo)
        if self._texts >= self.size:
            self._send(ctx)
        kind = DocumentOutcomeKind.MODIFIED if item.known is not None and item.known.version else DocumentOutcomeKind.ADDED
        return DocumentOutcome(document_id=item.job.doc_id, key=item.job.key, outcome=kind)

    def stage_ready(self, ctx: PipelineContext) -> None:
        """Stage the documents of the call in flight if it is back (not waited for)."""
        if self._flight is not None and self._flight.done.is_set():
            self._land(ctx)

    def flush(self, ctx: PipelineContext) -> None:
        """Send what waits and stage every deferred document (waiting for the model)."""
        if self._filling:
            self._send(ctx)
        if self._flight is not None:
            self._land(ctx)

    def close(self) -> None:
        """Drop what is deferred (not staged: processed again by the next sync) and let the model's thread
        go once its call is back (not waited for: a remote model may be sitting out a Retry-After)."""
        self._filling, self._texts, self._flight = [], 0, None
        self._held.clear()
        if self._worker is not None:
            self._jobs.put(None)
            self._worker = None

    def _send(self, ctx: PipelineContext) -> None:
        if self._flight is not None:  # one call in flight at most: its documents are staged first
            self._land(ctx)
        items, self._filling, self._texts = self._filling, [], 0
        texts: dict[str, str] = {}
        for d in items:
            for h in d.lookup.todo:
                texts.setdefault(h, d.lookup.texts[h])
        embedder = ctx.embedder
        # A call that was in flight when these documents were deferred may have embedded some of their chunks.
        cached = {h: v for h, v in ctx.registry.cached_vectors(embedder.model_id, list(texts)).items()
                  if v.shape == (embedder.dimension,)}
        call = _Call(items, [h for h in texts if h not in cached], cached)
        self._flight = call
        if not call.hashes:
            call.done.set()
            return
        batch = ctx.batch

        def work() -> None:
            try:
                # The held touches' attempts are closed first: a death in the model is not theirs (workers/batch.py).
                with batch.working() if batch is not None else contextlib.nullcontext():
                    call.vectors, call.seconds = embed_texts(embedder, [texts[h] for h in call.hashes])
            except BaseException as exc:  # met in the loop, where the documents' outcomes are decided
                call.error = exc
            finally:
                call.done.set()

        if self._worker is None:
            self._worker = threading.Thread(target=self._serve, name="freshindex-embed-batch", daemon=True)
            self._worker.start()
        self._jobs.put(work)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    def _land(self, ctx: PipelineContext) -> None:
        """Wait for the call in flight; cache its vectors, then stage each of its documents."""
        call, self._flight = self._flight, None
        assert call is not None
        call.done.wait()
        if isinstance(call.error, DocumentError):
            self._one_by_one(ctx, call.items)
            return
        if call.error is not None:
            raise call.error
        computed = dict(zip(call.hashes, call.vectors, strict=True)) if call.vectors is not None else {}
        given = {h: v for d in call.items for h, v in d.lookup.given.items()}
        if computed or given:
            ctx.registry.cache_vectors(ctx.embedder.model_id, {**given, **computed})
        claimed: set[str] = set()
        staged: list[Deferred] = []
        for d in call.items:
            mine = [h for h in d.lookup.todo if h in computed and h not in claimed]
            claimed.update(mine)
            embedded = len(d.lookup.given) + len(mine)
            share = call.seconds * len(mine) / len(call.hashes) if call.hashes else 0.0
            vectors = {**d.lookup.found, **{h: v for h, v in given.items() if h in d.lookup.texts},
                       **{h: v for h, v in {**call.cached, **computed}.items() if h in d.lookup.texts}}
            result = EmbedResult(vectors=vectors, embedded=embedded, reused=len(d.lookup.texts) - embedded,
                                 seconds=d.change.result.seconds + share)
            staged.append(self._stage(ctx, d, result))
        self._ended(ctx, staged)

    def _one_by_one(self, ctx: PipelineContext, items: list[Deferred]) -> None:
        """A call refused as a document's error: each document embedded alone, the error recorded against the
        one that raises it (the others staged)."""
        done: list[Deferred] = []
        for d in items:
            if ctx.batch is not None:  # embedded in this process: a death here is this document's
                ctx.batch.settle()
            try:
                result = vectors_for(d.lookup.texts, ctx.embedder, ctx.registry, ahead=d.lookup.given)
            except DocumentError as exc:
                self._fail_one(ctx, d, exc)
                self._held.discard(d.job.doc_id)
                done.append(d)
                continue
            done.append(self._stage(ctx, d, dataclasses.replace(result, seconds=result.seconds
                                                                + d.change.result.seconds)))
        self._ended(ctx, done)

    def _stage(self, ctx: PipelineContext, d: Deferred, result: EmbedResult) -> Deferred:
        self._stage_one(ctx, d, result)
        self._held.discard(d.job.doc_id)
        return d

    def _ended(self, ctx: PipelineContext, done: list[Deferred]) -> None:
        """Their outcomes are recorded: the crash counts start again (as :func:`workers.pipeline.process_document`
        does for a document it staged itself), in one transaction."""
        if not done:
            return
        try:
            ctx.registry.end_document_attempts([d.job.doc_id for d in done], outcome=True, run_id=done[0].job.run_id)
        except Exception as exc:  # best effort: their attempts were closed when they were deferred
            log.warning("could not end the attempts of %d staged documents: %s", len(done), exc,
                        exc_info=not isinstance(exc, RetryableError))


__all__ = ["Deferred", "EmbedBatches"]
