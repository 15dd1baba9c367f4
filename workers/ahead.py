"""Work on the next documents in threads while the sync loop processes this one (:class:`ParseAhead`).

An in-process sync (:func:`workers.runner.sync_inline`) hands each next
document to a thread that fetches it and runs the line's steps on it
(:class:`workers.steps.DocumentLine`: parse, the transforms, chunk), and, with
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
(pure functions), the registry (reads of the document, its live chunk ids
and the vector cache) and the model.  They write one thing: the document's
attempt, the poison-pill counter (:func:`workers.pipeline.begin_attempt`),
opened before the fetch so that a parser that kills the process is
charged to its document; the loop adopts that attempt, and a document a
process died on is never parsed ahead (:meth:`Registry.begin_attempt_ahead`).
With a pool of processes the shape hash is computed in them, so the attempt
is opened after the fetch and the shape hash, before the parse: a touch
found by its bytes or its shape opens none.  Not covered then: a shape
hash whose memory makes the kernel kill the whole container (cgroup v2's
``memory.oom.group``), not only the pool's process, charges no page.
On the inline path the opening also closes the attempts of the touches the
loop holds (:meth:`workers.batch.RunBatch.closing`), and a thread parses,
chunks and embeds inside :meth:`workers.batch.RunBatch.working`, so a death
there is charged to its document, not to them.
The vectors are handed to the loop, which caches them with the rest of the
document's work (:func:`core.vector_cache.vectors_for` with ``ahead``).  A
failure in a thread prepares nothing and the loop meets it where it would
have.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from freshindex.core.errors import DocumentError
from freshindex.core.ids import content_hash, document_id
from freshindex.core.types import ChunkDraft, ParsedDocument, may_kill_the_process
from freshindex.workers.connectors import check_key, for_run
from freshindex.workers.steps import Drafted, Raw
from freshindex.workers.steps.pool import LinePool, PoolBroken, PoolMismatch

if TYPE_CHECKING:
    import numpy as np

    from freshindex.workers.connectors import Connector
    from freshindex.workers.parsing import Parsers
    from freshindex.workers.pipeline import PipelineContext
    from freshindex.workers.steps import DocumentLine


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
    #: The vector cache as the thread read it: content hash -> its cached vector, None where it had none (the
    #: loop does not ask the registry again for these: a cached vector never changes under its key).
    looked: dict[str, np.ndarray | None] = field(default_factory=dict)
    #: The thread opened the document's attempt (the poison-pill counter) before it parsed: the loop adopts it.
    attempt_open: bool = False
    #: Found a touch (its bytes or its shape are the indexed ones) with no attempt opened: with a pool, nothing
    #: done so far ran a parser in this process, so nothing could have killed it; the loop opens the attempt
    #: itself only if it goes on to parse (``workers.pipeline._decide``).
    attempt_deferred: bool = False


#: A document handed ahead: its done event, the box its thread fills, its id, and the listing's size of it.
_Pending = tuple[threading.Event, list[Prepared], str, int]


class ParseAhead:
    """Fetch, parse and chunk (and with ``embed``, embed) documents in threads, ahead of the loop.

    Bytes whose raw hash is the indexed one, or whose shape hash is (only the
    navigation changed), are not parsed ahead (they cost a touch).  At most :attr:`held` documents are held ahead; the oldest is
    dropped first.

    With ``pool`` (:class:`workers.steps.pool.LinePool`), the line's steps
    run in its processes: the loop then keeps :attr:`depth` documents ahead,
    :attr:`PER_PROCESS` per process, so every core parses.  A document whose process died
    comes back unparsed (the loop parses it again: alone, and charged, if it
    kills a process by itself).  :meth:`discard` and :meth:`abandon` close
    the pool.

    When the loop stops early (Ctrl-C, an error), :meth:`abandon` lets the
    threads go without waiting for them (one may be waiting out a remote
    model's ``Retry-After``) and closes the attempts they opened.
    """

    HELD = 2  #: held ahead when working in threads only (:attr:`held`)
    #: Documents kept submitted ahead per process of the pool: with one, each process idled while its result
    #: crossed back and the next document was fetched and sent (PostgreSQL 15's manual, hashing embedder, 2 cores:
    #: the full build 9 % and the release update 10-12 % faster with 3-6 than with 1).
    PER_PROCESS = 4
    MAX_DEPTH = 16  #: at most this many ahead on many cores, or one per process (each holds its bytes, parse, chunks)
    #: With a pool, a document found unchanged ahead (its bytes or its shape hash are the indexed ones: a touch,
    #: which the loop takes in about a millisecond) makes room for one more in flight, up to :attr:`TOUCH_LEAD`
    #: times :attr:`depth` in flight (threads) and :attr:`MAX_LEAD` documents ahead in all, while the pending
    #: documents' bytes (the listing's sizes of those in flight) stay under :attr:`MAX_LEAD_BYTES`; a document
    #: in flight may still turn out changed and be held parsed, so that byte bound is what bounds the memory of
    #: the extra lead.  A full build (no touches) keeps :attr:`depth`.  Why: on a
    #: release's update the loop ran through the touches faster than 8 documents ahead could be shaped, and then
    #: waited out each changed page's whole parse and embedding (PostgreSQL 15's manual, 15.18 -> 15.20, 2 cores:
    #: the loop waited 8 s of a 12 s update with the model, 3.5 of 7 s with the hashing embedder; docs/benchmarks.md).
    TOUCH_LEAD = 4
    MAX_LEAD = 256
    MAX_LEAD_BYTES = 64 << 20

    def __init__(self, *, embed: bool = False, pool: LinePool | None = None) -> None:
        self.embed = embed
        self.pool = pool
        #: Documents the loop keeps submitted ahead of the one it processes: :attr:`PER_PROCESS` per process of the pool.
        self.depth = (max(pool.processes, min(pool.processes * self.PER_PROCESS, self.MAX_DEPTH)) if pool is not None
                      else self.HELD - 1)
        #: Working-ahead threads (:meth:`wants` hands no more documents ahead than there are threads).
        self.threads = self.depth * (self.TOUCH_LEAD if pool is not None else 1) + 1
        self.held = self.MAX_LEAD + 1 if pool is not None else self.threads
        #: Threads embedding at once: processes + 1 with a pool, else :attr:`HELD` (an in-process model's runs
        #: each take their own memory; more at once on the same cores would only raise the peak).
        self._embedding = threading.BoundedSemaphore(pool.processes + 1 if pool is not None else self.HELD)
        self._pending: dict[str, _Pending] = {}
        #: The threads that work ahead, started once and fed :attr:`_jobs`: a thread started per document cost
        #: the loop about 3 ms each (it waits for the new thread to take the GIL), 3 s of a release's update.
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._sources: dict[str, tuple[Connector, DocumentLine]] = {}  # read once a run: the loop's own reads decide
        self._ctx: PipelineContext | None = None
        self._lock = threading.Lock()
        self._opened: set[str] = set()  # documents whose attempt a thread opened and nobody has taken or closed
        self._run_id: int | None = None  # the run whose attempts the threads open (one run per ParseAhead)
        self._abandoned = False

    def submit(self, ctx: PipelineContext, source_id: str, key: str, *, run_id: int | None = None,
               etag: str | None = None, media_type: str | None = None, size: int = 0) -> None:
        """Start on ``key`` (read by its extension, else ``media_type``); with ``run_id``, inside the document's
        own attempt (the poison-pill counter, :func:`workers.pipeline.begin_attempt`), which the loop adopts or
        :meth:`discard` closes.  With a pool the attempt is opened after the fetch and the shape hash, only for a
        document to be parsed: a touch found before that opens none (:attr:`Prepared.attempt_deferred`)."""
        self._ctx = ctx
        self._run_id = run_id if run_id is not None else self._run_id
        while len(self._pending) >= self.held:
            self._drop(self._pending.pop(next(iter(self._pending))))
        try:
            if source_id not in self._sources:
                source = ctx.registry.get_source(source_id)
                self._sources[source_id] = (ctx.connector_for(source), ctx.line.for_source(source.options))
            connector, line = self._sources[source_id]
        except Exception:  # best effort: the document is then processed without help
            return
        doc_id = document_id(source_id, key)
        box: list[Prepared] = []
        done = threading.Event()

        # With a pool the shape is hashed in its processes: up to the parse, nothing here runs a parser in this
        # process, so the attempt is opened only for a document that will be parsed.  A release's touches (most
        # of its pages) then cost no attempt transaction each, and a process killed meanwhile charges them none.
        defer = run_id is not None and self.pool is not None

        def work() -> None:
            out = Prepared()
            try:
                if run_id is not None and not defer:
                    # A document some process died on is parsed only in the loop's own attempt.
                    if not self._open_attempt(ctx, doc_id, etag, run_id):
                        return
                    out.attempt_open = True
                # Read with its window of planned documents on the inline path (workers/batch.py).
                known = ctx.batch.document(doc_id) if ctx.batch is not None else ctx.registry.get_document(doc_id)
                # Indexed by the line that reads it now (its version): else parsed again (the loop decides).
                version = line.version_for(key, media_type)
                indexed = known if known is not None and known.parser_version == version else None
                check_key(key)
                data = for_run(connector, run_id).fetch(key)  # at the revision the run planned
                if len(data) > ctx.max_file_bytes:
                    return  # failed as too_large by the main path, nothing held
                out.data, out.digest = data, content_hash(data)
                if indexed is not None and out.digest == indexed.content_hash:
                    out.attempt_deferred = defer
                    return
                if (indexed is not None and indexed.shape_hash
                        and self._shape(line, Raw(data, key, media_type), pooled=defer) == indexed.shape_hash):
                    out.shape = indexed.shape_hash  # changed only where the parser does not read (navigation)
                    out.attempt_deferred = defer
                    return
                if defer and run_id is not None:  # to be parsed: in its attempt (refused: the loop's own, bytes kept)
                    if not self._open_attempt(ctx, doc_id, etag, run_id):
                        return
                    out.attempt_open = True
                drafted = self._draft(ctx, line, doc_id, Raw(data, key, media_type))  # the line's steps: parse .. chunk
                if drafted is None:
                    return  # its process died: the loop parses it again, alone (workers/pipeline.py)
                out.parsed, out.chunks, out.error = drafted.parsed, drafted.chunks, drafted.error
                if self.embed and out.chunks:
                    # A slot first, then working(): a thread waiting for one is not working on its document here.
                    # An embedder that cannot kill this process (hashing, remote) needs no attempt closed first.
                    held = ctx.batch if may_kill_the_process(ctx.embedder) else None
                    with self._embedding, held.working() if held is not None else contextlib.nullcontext():
                        out.vectors, out.embed_seconds = embed_new(ctx, doc_id if known is not None else None,
                                                                   out.chunks, looked=out.looked)
            except DocumentError as exc:
                out.error = exc
            except Exception:  # a fetch error (retried by the main path) or a bug: nothing prepared
                out = Prepared(attempt_open=out.attempt_open)
            finally:
                box.append(out)
                done.set()

        self._pending[key] = (done, box, doc_id, size)  # the listing's size: what one in flight may come back holding
        while len(self._workers) < self.threads:
            worker = threading.Thread(target=self._serve, name="freshindex-parse-ahead", daemon=True)
            worker.start()
            self._workers.append(worker)
        self._jobs.put(work)

    def wants(self, lead: int) -> bool:
        """Whether the loop should hand one more document ahead, ``lead`` documents past the one it is on: fewer
        than :attr:`depth` ahead; or, with a pool, fewer in flight or holding a parse than :attr:`depth` plus the
        touches waiting for the loop, fewer holding a parse than :attr:`depth` when it is handed, a thread free for
        it, within :attr:`MAX_LEAD` documents and :attr:`MAX_LEAD_BYTES` of the pending documents' bytes."""
        if lead < self.depth:
            return True
        if self.pool is None or lead >= self.MAX_LEAD:
            return False
        flying = parsed = touches = held = 0
        for done, box, _doc, size in self._pending.values():  # only the loop's thread changes _pending
            ready = box[0] if done.is_set() and box else None
            if ready is None:
                flying += 1  # in flight, or queued for a thread: it may come back holding its size and more
                held += size
            elif ready.attempt_deferred:
                touches += 1  # found unchanged (bytes or shape): the loop takes it in about a millisecond
                held += len(ready.data or b"")
            else:
                parsed += 1  # its parse, chunks or attempt, or a failure the loop retries: the loop's work
                held += len(ready.data or b"")
        return flying + parsed < self.depth + touches and flying < self.threads and parsed < self.depth \
            and held < self.MAX_LEAD_BYTES

    def _serve(self) -> None:
        """A working-ahead thread: the documents handed to it, one after another, until told to stop (None)."""
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except BaseException:  # a job keeps its own failure in its box; the thread serves on
                pass

    def _stop_workers(self) -> None:
        """Let each working-ahead thread end once the document it is on is done (not waited for)."""
        for _ in self._workers:
            self._jobs.put(None)
        self._workers = []

    def _shape(self, line: DocumentLine, raw: Raw, *, pooled: bool = False) -> str | None:
        """:func:`shape_hash` with this pool; ``pooled``: None rather than a hash made here (no attempt is open)."""
        return shape_hash(self.pool, line.parsers, raw, here_on_mismatch=not pooled)

    def _draft(self, ctx: PipelineContext, line: DocumentLine, doc_id: str, raw: Raw) -> Drafted | None:
        """The line's steps on ``raw``: in the pool (None when a process of it died), or in this thread, the held
        documents' attempts closed first (``RunBatch.working``): a death in here is this document's only."""
        if self.pool is not None:
            try:
                return self.pool.draft(line, doc_id, raw)
            except PoolBroken:
                return None
            except PoolMismatch:  # the workers would not parse as this process does: here, then
                pass
        with ctx.batch.working() if ctx.batch is not None else contextlib.nullcontext():
            return line.draft(doc_id, raw)

    def take(self, key: str) -> Prepared | None:
        """What was prepared for ``key`` (waiting for it), or None.  The loop owns an attempt it opened."""
        entry = self._pending.pop(key, None)
        if entry is None:
            return None
        return self._join(entry)  # its attempt, if a thread opened one, is the loop's now

    def abandon(self) -> None:
        """The loop stops early: close the attempts the threads opened, without waiting for the threads.

        A thread still at work finishes on its own (it only reads from here
        on) and its result is dropped; one that has not opened its attempt
        yet opens none.  A thread inside its opening transaction right now
        closes the attempt itself once it is back, unless the process exits
        first: that document then counts one crash on the next sync, as when
        the process is killed.
        """
        with self._lock:
            self._abandoned = True
            # Every attempt not adopted: also one whose take() or drop was interrupted in its join.
            opened = list(self._opened)
            self._opened.clear()
            self._pending.clear()
        for doc_id in opened:
            self._close(doc_id)
        self._stop_workers()
        if self.pool is not None:
            self.pool.close(wait=False)

    def _open_attempt(self, ctx: PipelineContext, doc_id: str, etag: str | None, run_id: int) -> bool:
        with self._lock:
            if self._abandoned:
                return False
        # The held touches' attempts still open are closed in the same transaction (workers/batch.py).
        closing = ctx.batch.closing() if ctx.batch is not None else []
        opened = ctx.registry.begin_attempt_ahead(doc_id, etag=etag, run_id=run_id, closing=closing)
        if ctx.batch is not None:
            ctx.batch.closed(closing)
        if not opened:
            return False
        with self._lock:
            if not self._abandoned:
                self._opened.add(doc_id)
                return True
        self._close(doc_id)  # abandoned while it was being opened
        return False

    def discard(self) -> None:
        """Wait for every thread; close the attempts of the documents the loop did not take."""
        try:
            while self._pending:
                self._drop(self._pending.pop(next(iter(self._pending))))
        finally:  # a Ctrl-C or a registry error while closing still stops the threads fed by the queue
            self._stop_workers()
            if self.pool is not None:
                self.pool.close()

    def _join(self, entry: _Pending) -> Prepared | None:
        """Wait for an entry's work; its attempt is then no longer :meth:`abandon`'s to close."""
        done, box, doc_id, _size = entry
        done.wait()
        with self._lock:
            self._opened.discard(doc_id)
        return box[0] if box else None

    def _drop(self, entry: _Pending) -> None:
        ready = self._join(entry)
        if ready is not None and ready.attempt_open:
            self._close(entry[2])

    def _close(self, doc_id: str) -> None:
        if self._ctx is None:
            return
        try:  # alive, no outcome: closed, crashes kept (none were counted); this run's only, not a later run's
            self._ctx.registry.end_document_attempt(doc_id, outcome=False, run_id=self._run_id)
        except Exception:  # best effort: an attempt left open costs a crash counted on the next sync
            pass


def shape_hash(pool: LinePool | None, parsers: Parsers, raw: Raw, *, here_on_mismatch: bool = True) -> str | None:
    """The shape hash of ``raw``: in the pool's processes when there is a pool (a parse off this process's GIL, and a
    parser that kills its process does not kill the sync), else here.  None when a process of the pool died (the
    parse then decides, charged as usual); when its processes would not read as this one does, made here, or None
    without ``here_on_mismatch``."""
    if pool is None:
        return parsers.shape(raw.data, raw.key, raw.media_type)
    try:
        return pool.shape(parsers, raw)
    except PoolBroken:
        return None
    except PoolMismatch:
        return parsers.shape(raw.data, raw.key, raw.media_type) if here_on_mismatch else None


def loop_shape(ahead: ParseAhead | None, parsers: Parsers, data: bytes, key: str, media_type: str | None) -> str | None:
    """The shape hash the loop computes itself (:func:`shape_hash`, in the working-ahead pool if there is one)."""
    return shape_hash(ahead.pool if ahead is not None else None, parsers, Raw(data, key, media_type))


def embed_new(ctx: PipelineContext, indexed: str | None, chunks: list[ChunkDraft], *,
              looked: dict[str, np.ndarray | None] | None = None) -> tuple[dict[str, np.ndarray], float]:
    """Vectors of the chunks that are not among the live ones of document ``indexed`` (None: a new document)
    and whose content the vector cache lacks (what the loop's diff will embed), and the seconds it took;
    nothing on any failure (the loop embeds them itself and meets the failure there).  ``looked`` receives
    what the cache held for each hash asked (None: nothing), so that the loop need not ask again."""
    try:
        live = ctx.registry.live_chunk_ids(indexed) if indexed is not None else set()
        texts = {c.content_hash: c.embed_text for c in chunks if c.id not in live}
        # The inline loop's batch holds the vectors it has not written yet: asked first.
        read = ctx.batch.cached_vectors if ctx.batch is not None else ctx.registry.cached_vectors
        cached = read(ctx.embedder.model_id, list(texts)) if texts else {}
        if looked is not None:
            looked.update((h, cached.get(h)) for h in texts)
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


__all__ = ["ParseAhead", "Prepared", "embed_new", "loop_shape", "shape_hash"]
