"""A build's sparse (BM25) vectors, computed one batch ahead in a worker process.

A full build writes every chunk, and each point's lexical vector
(:func:`vectorstore.lexical.document_vector`: tokenize, count, weigh) is pure
Python under the build's GIL: a third of the write of a 14k-chunk manual.  The
engine's write itself holds the GIL too (making its points converts every
payload value), so threads overlap nothing; a process does.  The builder hands
:meth:`SparseAhead.submit` the lexical texts of its next batch before it makes
the points of the current one, and :meth:`Pending.vectors` gives them back when
that batch's turn comes: the same vectors, computed by the same function, only
on another core.

A build smaller than :data:`MIN_POINTS` (an update's few hundred points), or a
process with one usable core or that may start none (a daemonic one), computes them in place: a worker's start (a
fresh interpreter importing the lexical module, a fraction of a second) would
cost more than it saves.  Workers start by ``spawn`` and end with the build,
so nothing is left running beside the next one (a worker dies with a build
killed by SIGKILL too, on Linux); one that cannot start, dies, does not answer
within :data:`ANSWER_TIMEOUT_S` (it is stopped) or runs another
:data:`vectorstore.lexical.LEXICAL_VERSION` is given up and the vectors are
computed in place: the pool can make a build slower, never different.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor

from freshindex.vectorstore import lexical

log = logging.getLogger("freshindex.build")

#: What the worker sends back per batch (:func:`vectorstore.lexical.document_vectors`).
Pairs = list[tuple[tuple[int, ...], tuple[float, ...]]]

#: Builds writing fewer points compute their sparse vectors in place.
MIN_POINTS = 2000

#: Seconds a batch's answer may take (the first one includes the worker's start) before the worker is given up
#: and stopped: a script without an ``if __name__ == "__main__":`` guard runs itself again in a spawned worker.
ANSWER_TIMEOUT_S = 60.0


def _worker_init() -> None:
    """In the worker: Ctrl-C is the build's to handle, and the worker dies with the build's process (Linux's
    ``PR_SET_PDEATHSIG``), so a build killed with SIGKILL leaves no worker behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class Pending:
    """One batch's sparse vectors: in flight in the worker, or computed on demand here."""

    def __init__(self, owner: SparseAhead, texts: Sequence[str], future: Future[Pairs | None] | None) -> None:
        self._owner, self._texts, self._future = owner, texts, future

    def vectors(self) -> list[lexical.SparseVector]:
        """The :func:`vectorstore.lexical.document_vector` of each text, in order."""
        pairs = self._owner.collect(self._future) if self._future is not None else None
        if pairs is None or len(pairs) != len(self._texts):
            return [lexical.document_vector(t) for t in self._texts]
        return [lexical.SparseVector(indices, values) for indices, values in pairs]


class SparseAhead:
    """Computes batches of sparse vectors in one worker process (or in place, see the module docstring)."""

    def __init__(self, points: int, *, processes: int | None = None) -> None:
        """``points``: how many the build writes; ``processes``: workers (None: one when the build is large
        enough and a second core is there; 0: always in place)."""
        if processes is None:
            # A daemonic process (a prefork worker's child) may not start processes of its own.
            alone = usable_cores() < 2 or multiprocessing.current_process().daemon
            processes = 1 if points >= MIN_POINTS and not alone else 0
        self._executor: ProcessPoolExecutor | None = None
        if processes > 0:
            try:
                self._executor = ProcessPoolExecutor(max_workers=processes, initializer=_worker_init,
                                                     mp_context=multiprocessing.get_context("spawn"))
            except (OSError, ValueError) as exc:
                log.warning("sparse vectors computed in the build's process: no worker (%s)", exc)

    @property
    def parallel(self) -> bool:
        """Whether batches still go to a worker."""
        return self._executor is not None

    def submit(self, texts: Sequence[str]) -> Pending:
        """Start on ``texts`` (in the worker when there is one); :meth:`Pending.vectors` gives the vectors."""
        texts = list(texts)
        future: Future[Pairs | None] | None = None
        if self._executor is not None and texts:
            try:
                future = self._executor.submit(lexical.document_vectors, texts, lexical.LEXICAL_VERSION)
            except Exception as exc:  # a broken or shut pool: in place from now on
                self._give_up(exc)
        return Pending(self, texts, future)

    def collect(self, future: Future[Pairs | None]) -> Pairs | None:
        """A worker's answer; None (and no worker from now on) when it failed or ran another lexical version."""
        try:
            pairs = future.result(timeout=ANSWER_TIMEOUT_S)
        except Exception as exc:  # its failure, or no answer in time
            self._give_up(exc)
            return None
        if not isinstance(pairs, list):
            self._give_up(RuntimeError("the worker runs another lexical version"))
            return None
        return pairs

    def _give_up(self, exc: BaseException) -> None:
        if self._executor is not None:
            log.warning("sparse vectors computed in the build's process from now on: the worker failed (%s)", exc)
            executor, self._executor = self._executor, None
            processes = list((getattr(executor, "_processes", None) or {}).values())
            executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:  # one still busy (a script run again in it) is stopped, not awaited
                with contextlib.suppress(Exception):
                    process.terminate()

    def close(self) -> None:
        if self._executor is not None:
            executor, self._executor = self._executor, None
            executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> SparseAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["MIN_POINTS", "Pending", "SparseAhead", "usable_cores"]
