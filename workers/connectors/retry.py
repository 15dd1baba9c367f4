"""Retrying a document fetch through a source outage.

One place decides how often a fetch is tried again: :func:`fetch_with_retry`,
called by :func:`workers.pipeline.process_document` for every connector (and
by the planner's move check), in the inline runner and in Celery workers alike.  A fetch that still fails
after ``retries`` further attempts becomes a :class:`DocumentError` with the
transient reason :data:`FETCH_FAILED`: the document is recorded as failed
(its previous chunks keep serving), the run goes on with the next document,
and the next sync tries it again.

Why not leave it to Celery's task retry: the fetch is the only step that
talks to the source, and the inline runner has no task shell.  Because the
error is converted here, the Celery shell's retry never sees a fetch
failure; it still retries the other retryable errors (registry, embedder).
Below this helper, botocore retries one HTTP call a few times on its own
(milliseconds apart); this loop waits longer, for outages of seconds.

Not guaranteed: the delays are a bound on waiting, not on wall time (a
hanging connection is bounded by the client's own timeouts), and a source
down for longer than the whole backoff fails every document of the run.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from freshindex.core.errors import DocumentError, RetryableError

log = logging.getLogger("freshindex.connectors")

#: Reason code of a document whose fetch failed through every retry; it lives
#: with the other reasons (:attr:`DocumentError.FETCH_FAILED`) and is
#: transient (:attr:`DocumentError.TRANSIENT`): the next sync fetches it again.
FETCH_FAILED = DocumentError.FETCH_FAILED


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed fetch is retried: ``retries`` more attempts, exponential backoff, full jitter."""

    retries: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 10.0

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based).

        Full jitter (a uniform draw up to the capped exponential delay) keeps
        many workers that lost the same source from retrying in step.
        """
        cap = min(self.backoff_max_s, self.backoff_s * (2 ** (attempt - 1)))
        return cap * rand()


def fetch_with_retry(
    fetch: Callable[[str], bytes],
    key: str,
    policy: RetryPolicy,
    *,
    source_id: str = "",
    on_retry: Callable[[int, Exception], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """``fetch(key)``, retrying :class:`RetryableError` as ``policy`` says.

    A :class:`DocumentError` (the document itself is bad, gone or unreadable)
    is not retried.  After the last retry the error becomes
    ``DocumentError(FETCH_FAILED, ...)`` naming the number of attempts and
    the last cause.
    """
    attempt = 0
    while True:
        try:
            return fetch(key)
        except RetryableError as exc:
            attempt += 1
            if attempt > policy.retries:
                log.warning(
                    "fetch failed",
                    extra={"event": "fetch_failed", "source": source_id, "key": key, "attempts": attempt,
                           "error": str(exc)},
                )
                raise DocumentError(DocumentError.FETCH_FAILED, f"{attempt} attempts, last: {exc}") from exc
            wait = policy.delay(attempt)
            if on_retry is not None:
                on_retry(attempt, exc)
            log.info(
                "fetch retry",
                extra={"event": "fetch_retry", "source": source_id, "key": key, "attempt": attempt,
                       "wait_s": round(wait, 3), "error": str(exc)},
            )
            sleep(wait)
