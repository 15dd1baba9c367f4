"""The thin client: a context packet from a running ``freshindex serve`` over HTTP.

An application that only needs evidence for its prompts installs the base
package (``pip install freshindex``: httpx, no PyMuPDF, SQLAlchemy, Celery,
vector store or model) and asks the service::

    from freshindex.injection.http import FreshIndexClient
    client = FreshIndexClient("http://127.0.0.1:8080", token="...")
    packet = client.retrieve("How do I rotate the signing key?", kb="default")

It returns the same :class:`~injection.types.ContextPacket` as the
in-process :class:`~injection.client.InjectionClient`, rebuilt from the JSON
of ``POST /v1/query``.

Errors are one tree under :class:`ClientError` (itself a
:class:`core.errors.FreshIndexError`): :class:`Unauthorized` (401/403),
:class:`NotFound` (404: unknown knowledge base), :class:`BadRequest`
(400/422), :class:`TooLarge` (413, a :class:`BadRequest`),
:class:`RateLimited` (429) and :class:`Unavailable` (503, connection
refused, timeouts; both :class:`~core.errors.RetryableError`, with the
server's ``Retry-After`` in ``retry_after``), :class:`ServerError` (other 5xx) and
:class:`BadResponse` (a body that is not a packet). Each carries the HTTP
status (``None`` when no response came) and the server's message.

What it does not guarantee: retries are few and short (``retries``
attempts after the first, on connection errors, 503 and 429 only, with
exponential backoff capped at ``backoff_max``, or the server's
``Retry-After`` when it asks for longer, up to ``retry_after_max``: a
longer wait is raised at once for the caller to schedule); a read timeout is not
retried, because a server that is slow to answer is not helped by a second
copy of the question. Identity comes from the bearer credential (an API key
or a JWT), never from the body: ``groups`` can only narrow what the
credential grants, and a ``principal`` other than the credential's is 403.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

import httpx

from freshindex.core.errors import FreshIndexError, NotFoundError, PermanentError, RetryableError
from freshindex.injection.types import ContextPacket

log = logging.getLogger("freshindex.client")

__version__ = "0.1.0"


class ClientError(FreshIndexError):
    """Root of every error the HTTP client raises.

    ``status`` is the HTTP status (``None`` when no response arrived),
    ``detail`` the server's message (or the transport error), ``error`` the
    server's error type name when it sent one, ``retry_after`` the seconds
    its ``Retry-After`` header asked for (``None`` when it sent none).
    """

    def __init__(self, message: str, *, status: int | None = None, detail: str = "", error: str | None = None,
                 url: str = "", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.detail, self.error, self.url = status, detail, error, url
        self.retry_after = retry_after


class Unauthorized(ClientError, PermanentError):
    """401/403: the bearer token is missing or wrong."""


class NotFound(ClientError, NotFoundError):
    """404: the knowledge base (or route) is unknown to the server."""


class BadRequest(ClientError, PermanentError):
    """400/422: the server rejected the request (an empty question, a limit out of range)."""


class TooLarge(BadRequest):
    """413: the request body is over the server's cap for the route (a question is a few KB)."""


class RateLimited(ClientError, RetryableError):
    """429: this credential (or address) is over its request rate; ``retry_after`` says when to come back."""


class Unavailable(ClientError, RetryableError):
    """503, connection refused or reset, or a timeout: the service could not answer now."""


class ServerError(ClientError):
    """Any other non-2xx answer (a 500 is a server bug: not retried)."""


class BadResponse(ClientError):
    """A 2xx answer whose body is not what the endpoint sends (a proxy page, another service)."""


_BY_STATUS: dict[int, type[ClientError]] = {
    400: BadRequest, 401: Unauthorized, 403: Unauthorized, 404: NotFound, 413: TooLarge, 422: BadRequest,
    429: RateLimited, 503: Unavailable,
}


class FreshIndexClient:
    """Ask a freshindex service for context packets and knowledge-base health.

    ``http`` is an ``httpx.Client`` to use instead of the one this client
    would make (tests pass one over ``httpx.MockTransport``; applications may
    share a pool); a client passed in is not closed by :meth:`close`.
    ``timeout`` is seconds per request (connect, read, write, pool).
    Thread safety is httpx's: one instance may be shared by threads.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        http: httpx.Client | None = None,
        retries: int = 2,
        backoff: float = 0.2,
        backoff_max: float = 2.0,
        retry_after_max: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.retries, self.backoff, self.backoff_max = max(0, retries), backoff, backoff_max
        self.retry_after_max = retry_after_max
        self._sleep = sleep
        self._own = http is None
        self._http = http if http is not None else httpx.Client(timeout=timeout)

    def __repr__(self) -> str:  # never the token
        return f"FreshIndexClient({self.base_url!r}, token={'set' if self._token else None})"

    def __enter__(self) -> FreshIndexClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self._http.close()

    # -- endpoints ----------------------------------------------------------------

    def retrieve(self, question: str, *, kb: str, limit: int = 5, principal: Any = "anonymous",
                 groups: Iterable[str] = ()) -> ContextPacket:
        """A cited context packet for ``question`` from knowledge base ``kb`` (``POST /v1/query``).

        ``principal`` is a principal id, or an object with ``id`` and
        ``groups`` (an :class:`acl.Principal`), whose groups are added to
        ``groups``. Raises :class:`NotFound` for an unknown knowledge base; a
        known one without a snapshot yet answers an *insufficient evidence*
        packet, not an error.
        """
        if hasattr(principal, "id") and hasattr(principal, "groups"):
            groups = [*principal.groups, *groups]
            principal = principal.id
        body = {"question": question, "kb": kb, "limit": limit, "principal": str(principal),
                "groups": sorted(set(groups))}
        data = self._call("POST", "/v1/query", json=body)
        try:
            return ContextPacket.from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # AttributeError: a shape not foreseen
            raise BadResponse(f"POST /v1/query answered something that is not a context packet: {exc!r}",
                              status=200, detail=repr(exc), url=self.base_url + "/v1/query") from exc

    def check_citations(self, answer: str, packet: ContextPacket) -> dict[str, Any]:
        """The invalid citations of ``answer`` written from ``packet`` (``POST /v1/citations/check``).

        Returns the report as the server sends it (``ok``, ``cited``,
        ``missing``, ``unsupported``, ...); the server counts what failed.
        Raises :class:`BadRequest` when the server refuses the input.
        """
        body = {"answer": answer, "packet": {"evidence": [e.as_dict() for e in packet.evidence]}}
        data = self._call("POST", "/v1/citations/check", json=body)
        if not isinstance(data, dict) or "ok" not in data:
            raise BadResponse("POST /v1/citations/check answered something that is not a citation report",
                              status=200, url=self.base_url + "/v1/citations/check")
        return data

    def health(self, kb: str) -> dict[str, Any]:
        """Freshness signals of ``kb`` (``GET /v1/kbs/KB/health``): active snapshot, last sync, backlogs."""
        data = self._call("GET", f"/v1/kbs/{quote(kb, safe='')}/health")
        if not isinstance(data, dict):
            raise BadResponse(f"GET health of {kb!r} answered {type(data).__name__}, not an object", status=200)
        return data

    # -- transport ----------------------------------------------------------------

    def _call(self, method: str, path: str, *, json: Any = None) -> Any:
        url = self.base_url + path
        headers = {"Accept": "application/json", "User-Agent": f"freshindex-client/{__version__}"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        attempt = 0
        while True:
            try:
                response = self._http.request(method, url, json=json, headers=headers, timeout=self.timeout)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError) as exc:
                # The request never reached the application (or the connection dropped before
                # an answer): the query reads only, so asking again is safe.
                failure: ClientError = Unavailable(f"{method} {url}: cannot reach freshindex: {exc}",
                                                   detail=str(exc), url=url)
                failure.__cause__ = exc
            except httpx.TimeoutException as exc:
                raise Unavailable(f"{method} {url}: no answer within {self.timeout}s", detail=str(exc),
                                  url=url) from exc
            except httpx.HTTPError as exc:
                raise ClientError(f"{method} {url}: {exc}", detail=str(exc), url=url) from exc
            else:
                if response.is_success:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise BadResponse(f"{method} {url} answered {response.status_code} without JSON "
                                          f"({response.headers.get('content-type', 'no content type')})",
                                          status=response.status_code, url=url) from exc
                failure = _error_of(method, url, response)
                if response.status_code not in (429, 503):
                    raise failure
            if attempt >= self.retries or (failure.retry_after or 0) > self.retry_after_max:
                log.warning("freshindex unavailable", extra={"event": "client_gave_up", "url": url,
                                                             "status": failure.status, "attempts": attempt + 1})
                raise failure
            delay = max(min(self.backoff_max, self.backoff * 2**attempt), failure.retry_after or 0)
            log.info("freshindex unavailable, retrying", extra={"event": "client_retry", "url": url,
                                                                "status": failure.status, "attempt": attempt + 1,
                                                                "delay_s": delay})
            attempt += 1
            self._sleep(delay)


def _error_of(method: str, url: str, response: httpx.Response) -> ClientError:
    """The error for a non-2xx answer, with the server's message.

    freshindex answers ``{"error": TYPE, "detail": MESSAGE}`` for its own
    errors and ``{"detail": ...}`` (a string, or FastAPI's list of field
    errors) otherwise; anything else (a proxy's HTML page) is shown cut short.
    """
    error: str | None = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "detail" in body:
        error = body.get("error") if isinstance(body.get("error"), str) else None
        raw = body["detail"]
        if isinstance(raw, list):  # FastAPI validation: [{"loc": [...], "msg": ...}, ...]
            detail = "; ".join(
                f"{'.'.join(str(p) for p in item.get('loc', ()) if p != 'body')}: {item.get('msg')}"
                if isinstance(item, dict) else str(item) for item in raw
            )
        else:
            detail = str(raw)
    else:
        detail = response.text[:200].strip() or response.reason_phrase
    kind = _BY_STATUS.get(response.status_code, ServerError)
    return kind(f"{method} {url} -> {response.status_code}: {detail}", status=response.status_code, detail=detail,
                error=error, url=url, retry_after=_retry_after(response.headers.get("Retry-After")))


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(min(int(value[:9]), 86_400))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, min(86_400.0, (when - dt.datetime.now(dt.UTC)).total_seconds()))


__all__ = ["BadRequest", "BadResponse", "ClientError", "FreshIndexClient", "NotFound", "RateLimited", "ServerError",
           "TooLarge", "Unauthorized", "Unavailable"]
