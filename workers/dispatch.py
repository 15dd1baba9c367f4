"""Fair dispatch: a run's documents go to the parse queue one batch at a time.

A sync enqueues at most ``broker.dispatch_batch`` document tasks, then a
``dispatch_documents`` continuation on the same (FIFO) parse queue, behind
them; when a worker takes it, that batch has left the queue, and it enqueues
the next batch and continuation from the plan the registry holds
(``planned_keys``).  So the documents of a small source synced during a huge
one wait behind at most one batch per busy source, not behind the whole huge
source, with no queue per source to manage (docs/architecture.md, "Fair
dispatch").  The rule is here; the task shells (:mod:`workers.tasks`) only
say how a document task and a continuation are sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from freshindex.core.enums import RunStatus

#: A planned document as the run stores it: key, etag, size, media type (the listing's
#: :attr:`core.types.ObjectRef.media_type`, None for most keys; it picks the parser of a bare key).
Planned = tuple[str, str | None, int, str | None]

#: Sends one document task: key, etag, size, media type.
SendDocument = Callable[[str, str | None, int, str | None], object]


class DispatchCursor(Protocol):
    def advance_dispatch(self, run_id: int, start: int, end: int, *, worked: bool = True) -> bool: ...


def planned_documents(run: Any) -> list[Planned] | None:
    """The documents a running run planned; None once the run is closed (finished, or
    adopted by a later run that re-planned its unprocessed documents) or has no plan."""
    summary = run.summary or {}
    planned = summary.get("planned_keys")
    if run.status != RunStatus.RUNNING or planned is None:
        return None
    media = summary.get("planned_media") or {}  # absent in a plan an older planner recorded
    return [(k, e, int(z), media.get(k)) for k, e, z in planned]


def send_batch(cursor: DispatchCursor, batch: int, run_id: int, documents: Sequence[Planned], start: int, *,
               send_document: SendDocument,
               send_continuation: Callable[[int], object], worked: bool = True) -> int:
    """Send ``documents[start:]`` up to one ``batch`` (0: all), and the continuation behind it if
    more remain; returns how many document tasks were sent.

    ``worked``: sent by a parse-queue worker (a continuation), evidence for
    the reaper that the parse workers are alive; the planner's is not.
    """
    size = batch or len(documents)
    end = start + size
    # Batched: advance the run's dispatch cursor first (it renews the lease, so the
    # continuation has a full lease to reach the head of the queue, and of two
    # copies of one continuation only the first sends); the reaper resumes from it.
    if (start > 0 or end < len(documents)) and \
            not cursor.advance_dispatch(run_id, start, min(end, len(documents)), worked=worked):
        return 0
    sent = documents[start:end]
    for key, etag, doc_size, media_type in sent:
        send_document(key, etag, doc_size, media_type)
    if end < len(documents):
        send_continuation(end)
    return len(sent)


__all__ = ["DispatchCursor", "Planned", "SendDocument", "planned_documents", "send_batch"]
