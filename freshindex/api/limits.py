"""Limits on what one request, one process and one caller may cost the HTTP API.

* :class:`RequestLimits`, one ASGI middleware around the whole app, in front of
  every route and of authentication: a body declared (Content-Length) over
  its route's cap is answered 413 before a byte of it is read; a body sent
  without a length (chunked) is counted as it streams and cut with a 413 at
  the cap, so no route ever holds more than its cap in memory.  It also
  bounds the requests served at once (``api.max_in_flight``): one more is
  answered 503 with ``Retry-After``.
* :class:`RateLimits`: requests per credential (the key id, or the principal
  for JWT and gateway callers), or per TCP peer address for a caller who did
  not authenticate; past the burst, 429 with ``Retry-After``.  It uses the
  ``limits`` library's moving window in process memory.

What this does not guarantee: limits shared across replicas (each process
counts its own requests), nor protection against slow clients that hold a
connection open without sending (uvicorn's own timeouts and the number of
connections bound those).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Why a request was refused by a limit: the ``reason`` label of ``freshindex_api_limited_total``.
LIMITED_REASONS = ("too_large", "busy", "rate_credential", "rate_peer")


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a body passes its cap.

    A Starlette ``HTTPException``, so FastAPI's body parser re-raises it
    unchanged (it turns other errors into a 400) and the app's handler answers
    it; :class:`RequestLimits` answers it itself when it escapes.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"body over {limit} bytes")
        self.limit = limit


def too_large_body(limit: int) -> dict[str, str]:
    return {"error": "too_large", "detail": f"body over {limit} bytes"}


async def _answer(send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    raw = json.dumps(body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    head += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": raw})


class RequestLimits:
    """Body caps per route and a bound on requests in flight, before anything else runs.

    ``cap_for(path)`` is the body cap of a route in bytes; ``exempt`` paths
    (probes, metrics) are never refused as busy; ``on_limited(reason, path)``
    is called once per refusal (a reason from :data:`LIMITED_REASONS`).
    """

    def __init__(self, app: ASGIApp, *, cap_for: Callable[[str], int], max_in_flight: int = 0,
                 exempt: frozenset[str] = frozenset(), on_limited: Callable[[str, str], None] | None = None) -> None:
        self.app, self._cap_for, self._max_in_flight, self._exempt = app, cap_for, max_in_flight, exempt
        self._on_limited = on_limited or (lambda reason, path: None)
        self.in_flight = 0  # touched only on the event loop's thread

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        cap = self._cap_for(path)
        if _declared_length(scope) > cap:  # refused unread: the client's bytes are never taken in
            self._on_limited("too_large", path)
            await _answer(send, 413, too_large_body(cap))
            return
        gated = self._max_in_flight > 0 and path not in self._exempt
        if gated and self.in_flight >= self._max_in_flight:
            self._on_limited("busy", path)
            await _answer(send, 503, {"error": "busy", "detail": "too many requests in flight; retry shortly"},
                          {"Retry-After": "1"})
            return
        self.in_flight += gated
        try:
            await self._capped(scope, receive, send, cap, path)
        finally:
            self.in_flight -= gated

    async def _capped(self, scope: Scope, receive: Receive, send: Send, cap: int, path: str) -> None:
        received, started, cut = 0, False, False

        async def capped_receive() -> Message:
            nonlocal received, cut
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    if not cut:
                        cut = True
                        self._on_limited("too_large", path)
                    raise BodyTooLarge(cap)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, capped_receive, tracking_send)
        except BodyTooLarge:
            if started:
                raise
            await _answer(send, 413, too_large_body(cap))


def _declared_length(scope: Scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:  # uvicorn refuses these first; count it as unbounded if one gets here
                return 1 << 62
    return 0


class RateLimited(Exception):
    """A caller over its rate: answer 429 with ``Retry-After: retry_after`` (whole seconds)."""

    def __init__(self, reason: str, retry_after: int) -> None:
        assert reason in LIMITED_REASONS, reason
        super().__init__(reason)
        self.reason, self.retry_after = reason, retry_after


class RateLimits:
    """A moving window of ``burst`` requests over ``ceil(burst / per_s)`` seconds, per key, in memory.

    The window is whole seconds (the ``limits`` library's granularity), so
    the sustained rate is ``burst / window`` and at most ``per_s``.
    ``clock`` must be the clock the storage reads (``time.time``; tests
    replace both): it only turns the window's reset time into ``Retry-After``.
    """

    def __init__(self, burst: int, per_s: float, *, clock: Callable[[], float] = time.time) -> None:
        from limits import RateLimitItemPerSecond
        from limits.storage import MemoryStorage
        from limits.strategies import MovingWindowRateLimiter

        self.window_s = max(1, math.ceil(burst / per_s))
        self._item = RateLimitItemPerSecond(burst, self.window_s)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._clock = clock

    def hit(self, key: str, reason: str) -> None:
        """Count one request of ``key``; raise :class:`RateLimited` when it is over the burst."""
        if self._limiter.hit(self._item, key):
            return
        reset = self._limiter.get_window_stats(self._item, key).reset_time
        raise RateLimited(reason, max(1, math.ceil(reset - self._clock())))


__all__ = ["LIMITED_REASONS", "BodyTooLarge", "RateLimited", "RateLimits", "RequestLimits", "too_large_body"]
