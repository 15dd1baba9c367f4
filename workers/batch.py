"""The inline loop's registry work on its run, a batch of documents at a time (:class:`RunBatch`).

An inline sync (:func:`workers.runner.sync_inline`) of a release finds most
documents unchanged: each used to cost five transactions of its own on top
of its fetch (the run's refusal, the source, the document's record, the
touch, the end of its attempt), about 20 ms a page on SQLite.  On that path
:class:`RunBatch`:

* asks the run's refusal (and reads the source) at the first document, then
  at most once per :attr:`RunBatch.check_s` seconds or
  :attr:`RunBatch.size` documents: it is advisory (it spares a stale run's
  fetches and embedding); every write is still fenced in its own
  transaction;
* reads the records of the next :attr:`RunBatch.size` planned documents in
  one transaction (:meth:`registry.touches.TouchStore.documents`); the
  threads working ahead read them there too;
* holds the touches of unchanged documents and writes them, with the end of
  their attempts, in one fenced transaction per batch
  (:meth:`registry.touches.TouchStore.touch_documents`): when
  :attr:`RunBatch.size` are held or the oldest was held
  :attr:`RunBatch.check_s` seconds, and before the run is finished;
* holds the staging of changed documents too (:meth:`RunBatch.stage`) and
  writes them the same way, each as ``stage_document`` writes it, before
  the touches (:meth:`registry.touches.TouchStore.stage_documents`, which
  reads the batch's document and chunk rows a statement at a time and ends
  their attempts).  Staged and ended one document at a time, the full build
  of a 1,167-page manual spent 18.5 s in those registry calls; in batches
  8.4 s, 3.4 of them closing the held documents' attempts before the next
  document's work in this process (below).  A batch also holds at most
  :data:`STAGED_CHUNKS` staged chunks; a document whose content a held one
  has writes the batch before it looks for its twin
  (:meth:`RunBatch.canonical_twin`);
* holds the vectors the loop embeds (or a thread working ahead embedded) for
  the vector cache and writes them when the batch is written, before its
  stagings (:meth:`RunBatch.vector_cache`): one transaction a batch rather
  than one a changed document.  The loop reads the cache only for the
  hashes neither the batch nor the thread that prepared the document (which
  hands on what it read, ``workers.ahead.Prepared.looked``) knows;
* closes the attempts of the held documents before another document can
  kill the process on them: in the transaction that opens the next
  document's attempt (``closing=`` of
  :meth:`Registry.begin_document_attempt` and ``begin_attempt_ahead``, which
  every parsed document takes anyway), and before a document is parsed, chunked or
  embedded in this process (:meth:`RunBatch.settle` in the loop,
  :meth:`RunBatch.working` in the threads working ahead; a touch held while
  a thread works closes its own attempt).  A process that dies in that
  work leaves open only the attempts of the documents in flight in it.
  Work that cannot kill this process closes none: a parse in the pool's
  processes, an embedding by the hashing stand-in or a remote model
  (``core.types.may_kill_the_process``).  Closing them there cost the full
  build of a 1,167-page manual a transaction per changed page.

What it does not do: open attempts (each document's
attempt is still opened before its fetch, so a parser that kills the process
is charged to its document; with a pool of processes, whose processes hash
the shapes, before its parse: a touch found first opens none,
``workers.ahead.Prepared.attempt_deferred``); serve the distributed path, where each Celery
task writes its own document.  What it costs: a process killed with touches
or stagings held loses them (the next sync plans those documents again: their
etags were not recorded; their vectors are in the cache, so nothing is
embedded again, except the vectors the batch held); an unchanged document costs no transaction of its own
beyond its attempt's opening (none with a pool), except one held while a document is parsed in
this process (a changed one: its attempt closed then, in a transaction of
its own or shared with the others held).  Not covered: a page whose shape
hash (the HTML parser, run in a thread working ahead when there is no pool
of processes) kills the process may charge the page the loop held just
before it one crash; the next sync works the page that killed it in the
loop, after the held attempts are closed, so the neighbour is not charged
again and the limit (``sync.document_crash_retries``, keep it above one)
is reached only by a document a process dies on again and again.  A
process killed outside any document's work (an operator, a node lost)
charges the held documents whose attempts were not yet closed one crash
each, as it does the document being worked on.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from freshindex.acl.resolution import AclResolver, SourceAcl
from freshindex.core.errors import RetryableError
from freshindex.core.ids import document_id
from freshindex.registry.records import DocumentRecord, DocumentTouch, SourceInfo, StagedDocument

log = logging.getLogger("freshindex.pipeline")

#: Staged chunks a batch holds at most before it is written (a batch of long documents is written sooner).
STAGED_CHUNKS = 2048
#: Vectors the loop remembers having written (their model and hash only, the most recent first kept): more than
#: the documents a thread works ahead hold.
RECENT_VECTORS = 16_384
#: The knowledge base's content hashes are read once a run (8 bytes each) when it holds at most this many
#: documents per document the run plans; else each twin lookup asks the registry.
TWIN_SNAPSHOT_PER_DOCUMENT = 20


class BatchRegistry(Protocol):
    """What :class:`RunBatch` asks of the registry."""

    def run_refusal(self, run_id: int, changeset_id: int | None = None) -> str | None: ...
    def get_source(self, source_id: str) -> SourceInfo: ...
    def get_document(self, document_id: str) -> DocumentRecord | None: ...
    def documents(self, document_ids: Sequence[str]) -> dict[str, DocumentRecord]: ...
    def touch_documents(self, run_id: int, changeset_id: int | None, source_id: str,
                        touches: Sequence[DocumentTouch]) -> list[str]: ...
    def end_document_attempts(self, document_ids: Sequence[str], *, outcome: bool,
                              run_id: int | None = None) -> None: ...
    def stage_document(self, run_id: int, changeset_id: int, staged: StagedDocument) -> None: ...
    def stage_documents(self, run_id: int, changeset_id: int, staged: Sequence[StagedDocument]) -> None: ...
    def canonical_twin(self, document_id: str, kb: str, content_hash: str, *, acl: Any,
                       parser_version: str | None = None) -> str | None: ...
    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...
    def cache_vectors(self, model_id: str, vectors: dict[str, np.ndarray]) -> None: ...
    def kb_content_prefixes(self, kb: str, *, limit: int) -> np.ndarray | None: ...


class _LoopCache:
    """The vector cache as the loop sees it for one document (:meth:`RunBatch.vector_cache`)."""

    def __init__(self, batch: RunBatch, looked: Mapping[str, np.ndarray | None]) -> None:
        self.batch, self.looked = batch, looked

    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return self.batch.cached_vectors(model_id, hashes, looked=self.looked)

    def cache_vectors(self, model_id: str, vectors: dict[str, np.ndarray]) -> None:
        self.batch.hold_vectors(model_id, vectors)


class RunBatch:
    """One inline run's batched registry work: its refusal, source and document records read in batches, the
    touches of its unchanged documents written in batches.  Used by the loop's thread and the threads
    working ahead (:meth:`document`)."""

    def __init__(self, registry: BatchRegistry, run_id: int, changeset_id: int, source_id: str,
                 keys: Sequence[str], *, size: int = 64, check_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry, self.run_id, self.changeset_id, self.source_id = registry, run_id, changeset_id, source_id
        self.size, self.check_s, self.clock = max(1, size), check_s, clock
        self._ids = [document_id(source_id, k) for k in keys]
        self._position = {d: i for i, d in enumerate(self._ids)}
        self._windows: dict[int, dict[str, DocumentRecord | None]] = {}
        self._lock = threading.Lock()
        self._source: SourceInfo | None = None
        self._checked_at: float | None = None
        self._since_check = 0
        self._why: str | None = None
        self._touches: list[DocumentTouch] = []
        self._staged: list[StagedDocument] = []
        self._staged_chunks = 0
        self._written: list[Callable[[], None]] = []
        self._held_ids: set[str] = set()
        self._held_since: float | None = None
        self._counted: dict[str, Callable[[str], None]] = {}
        # The attempts bookkeeping, shared with the threads working ahead: held documents whose attempts are still
        # open, and how many threads are working on a document in this process right now (:meth:`working`).
        self._attempts = threading.Lock()
        self._open_held: set[str] = set()
        self._working = 0
        #: The location listed and the ACL sidecars its complete listing saw (None: unknown, every candidate is
        #: read); the runner sets it from its plan.
        self.sidecars: tuple[str, frozenset[str]] | None = None
        self._acl: tuple[object, SourceAcl, str, AclResolver] | None = None
        self._vectors: dict[str, dict[str, np.ndarray]] = {}  # held for the vector cache: model id -> hash -> vector
        self._vectors_lock = threading.Lock()  # the threads working ahead read them too
        # (model, hash) of the vectors the batches wrote lately: a thread that found none for one before that (it
        # works a few documents ahead) gets it asked again rather than embedded again.
        self._cached: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()
        self._repeated = {d for d, n in collections.Counter(self._ids).items() if n > 1}  # planned twice (a bug)
        # The twin lookup's shortcut: the knowledge base's content hashes (64-bit prefixes, sorted) when the run
        # began looking, and every content this run staged or touched since (:meth:`canonical_twin`).
        self._kb_hashes: tuple[str, np.ndarray | None] | None = None
        self._run_hashes: set[str] = set()

    # -- reads -------------------------------------------------------------------------------

    def refusal(self) -> str | None:
        """Why the run takes no more writes (None: it does), asked of the registry at the first document and
        then at most every :attr:`check_s` seconds or :attr:`size` documents; the source is read again then."""
        now = self.clock()
        self._since_check += 1
        if (self._checked_at is None or self._why is not None or now - self._checked_at >= self.check_s
                or self._since_check >= self.size):
            self._why = self.registry.run_refusal(self.run_id, self.changeset_id)
            self._source = None
            self._checked_at, self._since_check = now, 0
        return self._why

    def acl_resolver(self, connector: object, source_acl: SourceAcl, location: str,
                     make: Callable[[frozenset[str] | None], AclResolver]) -> AclResolver:
        """The run's ACL resolver for ``connector``, ``source_acl`` and the source's ``location`` (made again when
        one changes): its sidecars are read and parsed once a run, not once a document; at the location listed,
        only those the listing saw.  A sidecar added or edited during the run counts from the next sync (the
        planner re-resolves every listed document's ACL then).  Used by the loop's thread only."""
        if (self._acl is None or self._acl[0] != connector or self._acl[1] != source_acl
                or self._acl[2] != location):
            keys = self.sidecars[1] if self.sidecars is not None and self.sidecars[0] == location else None
            self._acl = (connector, source_acl, location, make(keys))
        return self._acl[3]

    def source(self) -> SourceInfo:
        """The run's source, as read at the last refusal check."""
        if self._source is None:
            self._source = self.registry.get_source(self.source_id)
        return self._source

    def document(self, doc_id: str) -> DocumentRecord | None:
        """The registry's record of ``doc_id``: for a planned document, from one read of its window of
        :attr:`size` planned documents (the windows behind the previous one are dropped)."""
        position = self._position.get(doc_id)
        if position is None:
            return self.registry.get_document(doc_id)
        window = position // self.size
        with self._lock:
            records = self._windows.get(window)
            if records is None:
                ids = self._ids[window * self.size : (window + 1) * self.size]
                found = self.registry.documents(ids)
                records = self._windows[window] = {d: found.get(d) for d in ids}
                for old in [w for w in self._windows if w < window - 1]:
                    del self._windows[old]
            return records[doc_id]

    # -- touches -----------------------------------------------------------------------------

    def touch(self, touch: DocumentTouch, *, counted: Callable[[str], None] | None = None,
              attempt: bool = True) -> None:
        """Hold ``touch`` until the batch is written (:meth:`flush_if_due`, :meth:`flush`).

        ``counted``: called once the batch is written, with ``unchanged`` when the touch was, ``skipped``
        when its record moved since the decision (not touched); never when the batch is not written.

        Its document's attempt stays open until the next attempt is opened (:meth:`closing`) or a document is
        worked on in this process (:meth:`settle`, :meth:`working`), which close it first; while a thread
        works on one, it is closed now.  ``attempt=False``: none was opened (a touch found by a thread working
        ahead with a pool, ``workers.ahead.Prepared.attempt_deferred``), none to close."""
        self._hold(touch.document_id)
        self._touches.append(touch)
        if touch.content_hash:
            self._run_hashes.add(touch.content_hash)
        if counted is not None:
            self._counted[touch.document_id] = counted
        if attempt:
            self._hold_attempt(touch.document_id)

    def _hold(self, doc_id: str) -> None:
        if not self.held:
            self._held_since = self.clock()
        self._held_ids.add(doc_id)

    def _hold_attempt(self, doc_id: str) -> None:
        """The held document's attempt stays open until closed (:meth:`closing`, :meth:`settle`); closed now
        while a thread works on a document in this process."""
        with self._attempts:
            now = self._working > 0
            if not now:
                self._open_held.add(doc_id)
        if now:
            self._release([doc_id])

    def stage(self, staged: StagedDocument, *, written: Callable[[], None] | None = None) -> None:
        """Hold a changed document's staging until the batch is written (:meth:`flush`): the batch's staged
        documents in one fenced transaction (:meth:`Registry.stage_documents`), their attempts ended in it.

        ``written``: called once it is written; never when it is not.  Its attempt (open: the loop opened it
        before the parse) is held as a touch's is (:meth:`touch`).  A later document with the same content
        writes the batch first (:meth:`canonical_twin`): the twin lookup reads what is staged."""
        if self.holds(staged.document_id):  # a key listed twice: one staging a batch, each as it was written
            self.flush()
        self._hold(staged.document_id)
        self._staged.append(staged)
        if staged.content_hash:
            self._run_hashes.add(staged.content_hash)
        self._staged_chunks += len(staged.chunks)
        if written is not None:
            self._written.append(written)
        self._hold_attempt(staged.document_id)

    def canonical_twin(self, document_id: str, kb: str, content_hash: str, *, acl: Any,
                       parser_version: str | None = None) -> str | None:
        """The registry's :meth:`canonical_twin`, as if every held document were written: the batch is written
        first when a held document has that content (a twin staged or re-tagged in this batch is found), and
        again when the twin found is a held document (its held staging may change its content, its held touch
        its permissions: the answer is asked again of what they wrote).

        Content that no canonical document of ``kb`` held when the run first looked, and that the run has not
        staged or touched since, has no twin: answered without a query.  A twin another process stages in the
        meantime (another source of the knowledge base) is missed, as it is when two documents are processed at
        the same time; the sweep's ``merge_twins`` converges the two copies."""
        if self._no_twin(kb, content_hash):
            return None
        if any(d.content_hash == content_hash for d in self._staged) or any(
                t.content_hash == content_hash for t in self._touches):
            self.flush()
        twin = self.registry.canonical_twin(document_id, kb, content_hash, acl=acl, parser_version=parser_version)
        if twin is not None and self.holds(twin):
            self.flush()
            twin = self.registry.canonical_twin(document_id, kb, content_hash, acl=acl, parser_version=parser_version)
        return twin

    def vector_cache(self, looked: Mapping[str, np.ndarray | None] | None = None) -> _LoopCache:
        """The vector cache for the loop's diff of one document (``core.vector_cache.vectors_for``): a hash
        is served by the vectors held, else by ``looked`` (what the thread that prepared the document read
        of the cache: None there means the cache had none), else read; what is written is held."""
        return _LoopCache(self, looked or {})

    def cached_vectors(self, model_id: str, hashes: Sequence[str], *,
                       looked: Mapping[str, np.ndarray | None] | None = None) -> dict[str, np.ndarray]:
        """The registry's ``cached_vectors`` as if the held vectors were written (thread-safe)."""
        found: dict[str, np.ndarray] = {}
        ask: list[str] = []
        with self._vectors_lock:
            held = self._vectors.get(model_id, {})
            for h in hashes:
                if (v := held.get(h)) is not None:
                    found[h] = v
                elif looked is not None and h in looked and (looked[h] is not None
                                                               or (model_id, h) not in self._cached):
                    if (c := looked[h]) is not None:
                        found[h] = c
                else:  # unknown, or the thread found none but this run has written one since: asked
                    ask.append(h)
        if ask:
            found.update(self.registry.cached_vectors(model_id, ask))
        return found

    def hold_vectors(self, model_id: str, vectors: dict[str, np.ndarray]) -> None:
        """Vectors for the cache, written with the batch (before its stagings)."""
        with self._vectors_lock:
            self._vectors.setdefault(model_id, {}).update(vectors)

    def _no_twin(self, kb: str, content_hash: str) -> bool:
        """No canonical document of ``kb`` can hold ``content_hash`` (see :meth:`canonical_twin`)."""
        if content_hash in self._run_hashes:
            return False
        if self._kb_hashes is None or self._kb_hashes[0] != kb:
            limit = TWIN_SNAPSHOT_PER_DOCUMENT * max(1, len(self._ids))
            self._kb_hashes = (kb, self.registry.kb_content_prefixes(kb, limit=limit))
        known = self._kb_hashes[1]
        if known is None or len(content_hash) < 16:
            return False
        try:
            prefix = np.uint64(int(content_hash[:16], 16))
        except ValueError:
            return False
        at = int(np.searchsorted(known, prefix))
        return not (at < len(known) and known[at] == prefix)

    def unknown(self, doc_id: str, known: DocumentRecord | None) -> bool:
        """No chunk of ``doc_id`` can exist: the run read no record of it (a chunk needs its document's row) and
        plans it once (a key listed twice, which no connector should list, may have been staged by its first)."""
        return known is None and doc_id not in self._repeated

    def holds(self, doc_id: str) -> bool:
        """A touch or staging of ``doc_id`` is held: its attempt ends when the batch is written, not now."""
        return doc_id in self._held_ids

    @property
    def held(self) -> int:
        return len(self._touches) + len(self._staged)

    def flush_if_due(self) -> None:
        """:meth:`flush` when :attr:`size` documents (or :data:`STAGED_CHUNKS` staged chunks) are held or the
        oldest was held :attr:`check_s` seconds."""
        if self.held and (self.held >= self.size or self._staged_chunks >= STAGED_CHUNKS
                          or self.clock() - (self._held_since or 0.0) >= self.check_s):
            self.flush()

    def flush(self) -> None:
        """Write the held touches in one fenced transaction, their attempts ended in it.

        On failure (the run refused: :class:`core.errors.StaleTaskError`; the
        registry away) nothing of the batch is written, the attempts of its
        documents are closed without an outcome (best effort, as the loop does
        for a document whose work raised) and the error propagates.
        """
        touches, self._touches, self._held_since = self._touches, [], None
        counted, self._held_ids, self._counted = self._counted, set(), {}
        staged, written, self._staged, self._written, self._staged_chunks = self._staged, self._written, [], [], 0
        with self._vectors_lock:
            vectors, self._vectors = self._vectors, {}
            for m, held in vectors.items():
                self._cached.update(dict.fromkeys((m, h) for h in held))
            while len(self._cached) > RECENT_VECTORS:
                self._cached.popitem(last=False)
        if not touches and not staged and not vectors:
            return
        ids = [d.document_id for d in staged] + [t.document_id for t in touches]
        self.closed(ids)  # ended or closed below, whatever happens
        try:
            for model_id, held in vectors.items():  # before the stagings that use them
                self.registry.cache_vectors(model_id, held)
            if staged:
                self.registry.stage_documents(self.run_id, self.changeset_id, staged)
            for done in written:
                _quietly(done)
            moved = self.registry.touch_documents(self.run_id, self.changeset_id, self.source_id, touches) if touches else []
        except BaseException:
            self._release(ids)
            raise
        for t in touches:
            if (count := counted.get(t.document_id)) is not None:
                count("skipped" if t.document_id in moved else "unchanged")
        if moved:
            log.warning("documents not touched: their records moved since they were found unchanged; the next "
                        "sync processes them again", extra={"event": "touch_moved", "run": self.run_id,
                                                              "documents": moved})

    def release(self) -> None:
        """The loop stops early: write what is held if the registry takes it, else close those attempts."""
        try:
            self.flush()
        except Exception as exc:  # already released by flush; the loop's own error is the one that matters
            # The registry away (a full disk, an outage) is one line; anything else keeps its traceback.
            log.warning("documents held by an aborted run were not written: %s", exc,
                        exc_info=not isinstance(exc, RetryableError))

    def drop(self) -> None:
        """The run no longer takes writes: close the held documents' attempts without an outcome, write nothing."""
        held = [t.document_id for t in self._touches] + [d.document_id for d in self._staged]
        self._touches, self._held_since, self._held_ids, self._counted = [], None, set(), {}
        self._staged, self._written, self._staged_chunks = [], [], 0
        with self._vectors_lock:
            self._vectors = {}
        if held:
            self.closed(held)
            self._release(held)

    # -- attempts ----------------------------------------------------------------------------

    def closing(self) -> list[str]:
        """The held documents whose attempts are still open: the next attempt opened closes them in its own
        transaction (``closing=`` of :meth:`Registry.begin_document_attempt` and ``begin_attempt_ahead``), then
        says so (:meth:`closed`).  No transaction of their own, and none of them is charged a crash by a
        process that dies on a document opened after that."""
        with self._attempts:
            return sorted(self._open_held)

    def closed(self, doc_ids: Sequence[str]) -> None:
        """The attempts of ``doc_ids`` are closed (or ended) in the registry."""
        with self._attempts:
            self._open_held.difference_update(doc_ids)

    def settle(self) -> None:
        """Close the attempts still open of the held documents (one transaction, none when there are none):
        called before a document is parsed, chunked or embedded in this process, so a parser that kills it
        is charged to that document and the documents actually in flight only."""
        doc_ids = self.closing()
        if doc_ids and self._release(doc_ids):
            self.closed(doc_ids)

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """A thread working ahead parses, chunks or embeds a document in this process inside this: the held
        documents' attempts are closed first (:meth:`settle`), and a touch held meanwhile closes its own."""
        with self._attempts:
            self._working += 1
        try:
            self.settle()
            yield
        finally:
            with self._attempts:
                self._working -= 1

    def _release(self, doc_ids: list[str]) -> bool:
        """Close the attempts of ``doc_ids``, crashes kept (best effort: False when the registry is away)."""
        try:
            self.registry.end_document_attempts(doc_ids, outcome=False, run_id=self.run_id)
        except Exception as exc:  # an attempt left open costs a crash counted on the next sync
            log.warning("could not end the attempts of %d held touches: %s", len(doc_ids), exc,
                        exc_info=not isinstance(exc, RetryableError))
            return False
        return True


def _quietly(done: Callable[[], None]) -> None:
    """A written staging's metrics: an observer that raises costs its own count, not the batch's touches."""
    try:
        done()
    except Exception:
        log.exception("counting a written staging failed")


def stage_held_or_now(registry: BatchRegistry, batch: RunBatch | None, run_id: int, changeset_id: int,
                      staged: StagedDocument, written: Callable[[], None]) -> None:
    """Stage a changed document: held by ``batch`` (the inline loop's) until it is written, else now in a
    transaction of its own (a Celery task); ``written`` is called once it is written."""
    if batch is not None:
        batch.stage(staged, written=written)
        return
    registry.stage_document(run_id, changeset_id, staged)
    written()


__all__ = ["BatchRegistry", "RunBatch", "stage_held_or_now"]
