"""Retry helpers used by the billing service's HTTP clients."""

import random
import time


class RetryError(Exception):
    """Raised when every attempt failed; carries the last exception."""

    def __init__(self, attempts, last):
        super().__init__(f"gave up after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last


def backoff_delay(attempt, base=0.5, cap=30.0):
    """Exponential backoff with full jitter: a random delay in [0, min(cap, base * 2**attempt)]."""
    return random.uniform(0, min(cap, base * 2 ** attempt))


def retry(call, attempts=5, retry_on=(ConnectionError, TimeoutError)):
    """Call ``call()`` until it succeeds, sleeping with backoff between attempts.

    Only the exception types in ``retry_on`` are retried; anything else
    propagates at once.
    """
    last = None
    for attempt in range(attempts):
        try:
            return call()
        except retry_on as exc:
            last = exc
            time.sleep(backoff_delay(attempt))
    raise RetryError(attempts, last)
