"""Run the document line (:class:`workers.steps.DocumentLine`) in a pool of processes, so parsing uses every core.

An in-process sync parses and chunks in Python, under one GIL: threads
overlap it with the model and the registry, never with another parse.
:class:`LinePool` sends a document's bytes to one of ``processes`` worker
processes, which runs the line's steps (parse, the transforms, chunk) and
sends back the parse and the chunks (:class:`workers.steps.Drafted`); or
computes a document's shape hash there (:meth:`LinePool.shape`), the parse a
release's unchanged page costs.

Processes start by ``forkserver`` (the sync already runs threads, and a fork
copies their locks in whatever state they are), with the line's modules
preloaded in the server, so a worker forks ready to parse.  The line must
pickle: :func:`portable` says whether it does (a chunker that counts tokens
with a loaded model's own tokenizer does not; such a sync parses in threads).

A worker that dies (a native parser's segfault, ``os._exit``, the OOM killer)
breaks the whole pool: every document in it raises :class:`PoolBroken`, and
the next call gets a fresh pool.  Which document killed it is not known from
that, so nothing is charged here; :meth:`LinePool.draft_alone` runs one
document in a process of its own, whose death is that document's
(:func:`workers.pipeline.begin_attempt` then counts it).

A worker imports the parsers afresh: one registered at run time in the
sync's process only (a plugin registered by code, a test) would not be
there.  Each document carries the sync's :func:`fingerprint` (the parser
registry and the chunker's version); a worker whose own differs raises
:class:`PoolMismatch` and the document is parsed in the sync's process.

When the last open pool of the process closes, the forkserver is stopped:
it holds its preloaded modules (about 30 MB of its own) through the rest of
the sync, the build included, where the process tree peaks
(``bench/results/throughput.md``).  The next pool starts it again (the
preload, under a second).

What it does not do: bound a worker's memory or time (the parsers' own
limits apply inside it), touch the registry, the source or the model, or
keep a pool or its forkserver between syncs.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from freshindex.core.errors import DocumentError
from freshindex.core.ids import content_hash
from freshindex.workers.chunking import Chunker
from freshindex.workers.parsing import Parsers
from freshindex.workers.steps import DocumentLine, Drafted, Raw

#: Seconds a new pool's first worker may take to start and answer (:meth:`LinePool.works`).
START_TIMEOUT_S = 60.0

#: Imported once in the forkserver, so every worker starts with the line's code loaded.
PRELOAD = ["freshindex.workers.steps", "freshindex.workers.parsing", "freshindex.workers.chunking"]


class PoolBroken(Exception):
    """A worker process died while the document was in the pool (not necessarily because of it)."""


class PoolMismatch(Exception):
    """A worker reads with other parsers or another chunker version than this process: parse here."""


def _ref(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}" if fn is not None else ""


def fingerprint() -> str:
    """What a worker must share with this process to parse as it would: every registered parser (name,
    version, functions, names it reads) and the chunker's version.  A parser registered at run time in this
    process only (a plugin, a test), or a version patched here, differs in a worker: it then parses here."""
    from freshindex.workers import chunking
    from freshindex.workers.parsing import registry

    parts = [chunking.CHUNKER_VERSION, *(repr((s.name, s.version, _ref(s.parse), _ref(s.shape), s.extensions,
                                               s.media_types, s.bare, s.options)) for s in registry.specs())]
    return content_hash("\n".join(parts).encode())


#: Pools open in this process (:func:`_opened`, :func:`_closed`): the forkserver is stopped when none is.
_OPEN = [0]
_OPEN_LOCK = threading.Lock()


def _opened() -> None:
    with _OPEN_LOCK:
        _OPEN[0] += 1


def _closed(start_method: str) -> None:
    """One pool fewer; with none left, stop the forkserver (its next use starts it again)."""
    from multiprocessing import forkserver

    with _OPEN_LOCK:
        _OPEN[0] -= 1
        if _OPEN[0] or start_method != "forkserver":
            return
        stop = getattr(forkserver._forkserver, "_stop", None)  # CPython's own, 3.8 on
        if stop is not None:
            try:
                stop()
            except OSError:  # already gone
                pass


_WORKER_PRINT: list[str] = []  # a worker's own fingerprint, computed once (nothing registers parsers in it)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def portable(line: DocumentLine) -> bool:
    """Whether ``line`` can run in another process: made of this project's parsers and chunker (a stand-in
    of another type, a test's double whose calls its caller watches, is run in this process) and pickles."""
    if not isinstance(line.parsers, Parsers) or not isinstance(line.chunker, Chunker):
        return False
    try:
        pickle.dumps(line)
    except Exception:
        return False
    return True


def _quiet_on_ctrl_c() -> None:
    # Ctrl-C reaches the whole process group: the sync stops the pool itself (ParseAhead.abandon).
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _draft(line: DocumentLine, doc_id: str, raw: Raw, parent: str) -> tuple[Any, Any, tuple[str, str] | None]:
    """In a worker: the line's steps on one document; a DocumentError as its (reason, detail), which pickle."""
    if not _WORKER_PRINT:
        _WORKER_PRINT.append(fingerprint())
    if _WORKER_PRINT[0] != parent:
        raise PoolMismatch("this worker's parsers or chunker version differ from the sync's")
    out = line.draft(doc_id, raw)
    error = (out.error.reason, out.error.detail) if out.error is not None else None
    return out.parsed, out.chunks, error


def _shape(parsers: Parsers, raw: Raw, parent: str) -> str | None:
    """In a worker: the shape hash of ``raw`` (:meth:`Parsers.shape`)."""
    if not _WORKER_PRINT:
        _WORKER_PRINT.append(fingerprint())
    if _WORKER_PRINT[0] != parent:
        raise PoolMismatch("this worker's parsers or chunker version differ from the sync's")
    return parsers.shape(raw.data, raw.key, raw.media_type)


def _drafted(result: tuple[Any, Any, tuple[str, str] | None]) -> Drafted:
    parsed, chunks, error = result
    return Drafted(parsed=parsed, chunks=chunks, error=DocumentError(*error) if error is not None else None)


class LinePool:
    """``processes`` worker processes running the document line; thread-safe."""

    def __init__(self, processes: int, *, start_method: str = "forkserver") -> None:
        self.processes = processes
        self._mp = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            self._mp.set_forkserver_preload(PRELOAD)
        self._start_method = start_method
        self._lock = threading.Lock()
        self._generation = 0
        self._closed = False
        self._executor = self._new(processes)
        _opened()

    def _new(self, workers: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=workers, mp_context=self._mp, initializer=_quiet_on_ctrl_c)

    def works(self, timeout: float = START_TIMEOUT_S) -> bool:
        """Whether a worker starts within ``timeout`` seconds and reads as this process does
        (:func:`fingerprint`): asked once before any document goes in, so a pool that cannot start (a script
        run without the ``if __name__ == "__main__":`` guard runs itself again in every worker) is given up
        before it could charge a document."""
        with self._lock:
            executor = self._executor
        try:
            return bool(executor.submit(fingerprint).result(timeout=timeout) == fingerprint())
        except Exception:
            return False

    def draft(self, line: DocumentLine, doc_id: str, raw: Raw) -> Drafted:
        """The line's steps on ``raw`` in the shared pool; :class:`PoolBroken` if a worker died meanwhile,
        :class:`PoolMismatch` if the workers would not parse as this process does (:func:`fingerprint`)."""
        with self._lock:
            if self._closed:
                raise PoolBroken("the pool is closed")
            executor, generation = self._executor, self._generation
        try:
            return _drafted(executor.submit(_draft, line, doc_id, raw, fingerprint()).result())
        except BrokenProcessPool as exc:
            self._renew(generation)
            raise PoolBroken(str(exc)) from exc

    def shape(self, parsers: Parsers, raw: Raw) -> str | None:
        """:meth:`Parsers.shape` of ``raw`` in the shared pool (the parse it costs, off this process's GIL);
        :class:`PoolBroken` and :class:`PoolMismatch` as :meth:`draft`."""
        with self._lock:
            if self._closed:
                raise PoolBroken("the pool is closed")
            executor, generation = self._executor, self._generation
        try:
            return executor.submit(_shape, parsers, raw, fingerprint()).result()
        except BrokenProcessPool as exc:
            self._renew(generation)
            raise PoolBroken(str(exc)) from exc

    def draft_alone(self, line: DocumentLine, doc_id: str, raw: Raw) -> Drafted:
        """The line's steps on ``raw`` in a process of its own: :class:`PoolBroken` means this document killed it."""
        executor = self._new(1)
        try:
            return _drafted(executor.submit(_draft, line, doc_id, raw, fingerprint()).result())
        except BrokenProcessPool as exc:
            raise PoolBroken(str(exc)) from exc
        finally:
            executor.shutdown(wait=True)

    def _renew(self, generation: int) -> None:
        """Replace the broken executor once (the first of its documents to see it break does)."""
        with self._lock:
            if self._closed or generation != self._generation:
                return
            broken, self._executor = self._executor, self._new(self.processes)
            self._generation += 1
        broken.shutdown(wait=False, cancel_futures=True)

    def close(self, *, wait: bool = True) -> None:
        """Stop the workers; with ``wait`` False, kill them without waiting for the documents in them."""
        with self._lock:
            first, self._closed = not self._closed, True
            executor = self._executor
        if not wait:
            # shutdown(wait=False) lets a worker run on; one stuck (or parsing for nobody) is ended here.
            for process in list((getattr(executor, "_processes", None) or {}).values()):
                process.kill()
        executor.shutdown(wait=wait, cancel_futures=not wait)
        if first:
            _closed(self._start_method)


__all__ = ["LinePool", "PoolBroken", "PoolMismatch", "fingerprint", "portable", "usable_cores"]
