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

The asyncio twin, :class:`~injection.async_http.AsyncFreshIndexClient`,
shares everything here but sending: the request shapes, the error of each
status and the retry policy (tenacity) are defined once, in
:class:`_ClientBase`.

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
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, TypedDict, Unpack
from urllib.parse import quote

import httpx
import tenacity

from freshindex.core.clock import as_utc
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
        #: True when asking again cannot help even though the kind is retryable (a read timeout).
        self.final = False


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


@dataclass(frozen=True)
class RetrySettings:
    """When a client asks again: ``retries`` attempts after the first, on connection errors, 503 and 429 only.

    The waits grow from ``backoff`` seconds, doubling, up to ``backoff_max``; a server's ``Retry-After``
    that asks for longer is waited, up to ``retry_after_max`` (a longer one is raised at once).
    """

    retries: int = 2
    backoff: float = 0.2
    backoff_max: float = 2.0
    retry_after_max: float = 10.0


class LegacyRetryArguments(TypedDict, total=False):
    """The clients' keyword arguments before :class:`RetrySettings` (deprecated: pass ``retry=`` instead)."""

    retries: int
    backoff: float
    backoff_max: float
    retry_after_max: float


def retry_settings(retry: RetrySettings, legacy: Mapping[str, Any], client: str) -> RetrySettings:
    """``retry`` with the deprecated keyword arguments ``legacy`` applied over it (warned once per call)."""
    if not legacy:
        return retry
    unknown = sorted(set(legacy) - {f.name for f in fields(RetrySettings)})
    if unknown:
        raise TypeError(f"{client}() got unexpected keyword arguments: {', '.join(unknown)}")
    warnings.warn(f"{client}'s keyword arguments {', '.join(legacy)} are deprecated and go in the next release: "
                  f"pass retry=RetrySettings({', '.join(f'{k}=...' for k in legacy)})",
                  DeprecationWarning, stacklevel=3)
    return replace(retry, **legacy)


class _ClientBase:
    """What the sync and the async client share: configuration, request shapes, answers, errors, retries.

    Only sending differs between them (``httpx.Client`` or ``httpx.AsyncClient``, ``time.sleep`` or
    ``asyncio.sleep``); everything a request becomes, and when it is asked again, is decided here once.
    """

    def __init__(self, base_url: str, *, token: str | None, timeout: float, retry: RetrySettings) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.retry = retry
        self.retries, self.backoff, self.backoff_max = max(0, retry.retries), retry.backoff, retry.backoff_max
        self.retry_after_max = retry.retry_after_max

    def __repr__(self) -> str:  # never the token
        return f"{type(self).__name__}({self.base_url!r}, token={'set' if self._token else None})"

    # -- requests and answers ---------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": f"freshindex-client/{__version__}"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    @staticmethod
    def _query_body(question: str, kb: str, limit: int, principal: Any, groups: Iterable[str]) -> dict[str, Any]:
        if hasattr(principal, "id") and hasattr(principal, "groups"):
            groups = [*principal.groups, *groups]
            principal = principal.id
        return {"question": question, "kb": kb, "limit": limit, "principal": str(principal),
                "groups": sorted(set(groups))}

    def _packet_of(self, data: Any) -> ContextPacket:
        try:
            return ContextPacket.from_dict(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # AttributeError: a shape not foreseen
            raise BadResponse(f"POST /v1/query answered something that is not a context packet: {exc!r}",
                              status=200, detail=repr(exc), url=self.base_url + "/v1/query") from exc

    @staticmethod
    def _check_body(answer: str, packet: ContextPacket | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        # A packet, or its evidence as JSON (each with at least ``n`` and ``text``: what an MCP caller holds).
        evidence = ([e.as_dict() for e in packet.evidence] if isinstance(packet, ContextPacket)
                    else [dict(e) for e in packet])
        return {"answer": answer, "packet": {"evidence": evidence}}

    def _report_of(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict) or "ok" not in data:
            raise BadResponse("POST /v1/citations/check answered something that is not a citation report",
                              status=200, url=self.base_url + "/v1/citations/check")
        return data

    @staticmethod
    def _health_path(kb: str) -> str:
        return f"/v1/kbs/{quote(kb, safe='')}/health"

    @staticmethod
    def _health_of(kb: str, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise BadResponse(f"GET health of {kb!r} answered {type(data).__name__}, not an object", status=200)
        return data

    @staticmethod
    def _answer(method: str, url: str, response: httpx.Response) -> Any:
        """The JSON of a 2xx answer, or the error for any other (raised)."""
        if response.is_success:
            try:
                return response.json()
            except ValueError as exc:
                raise BadResponse(f"{method} {url} answered {response.status_code} without JSON "
                                  f"({response.headers.get('content-type', 'no content type')})",
                                  status=response.status_code, url=url) from exc
        raise _error_of(method, url, response)

    def _transport_error(self, method: str, url: str, exc: httpx.HTTPError) -> ClientError:
        """The error for a request that got no answer; only one that never reached the application is retried."""
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.RemoteProtocolError):
            # The request never reached the application (or the connection dropped before
            # an answer): the query reads only, so asking again is safe.
            return Unavailable(f"{method} {url}: cannot reach freshindex: {exc}", detail=str(exc), url=url)
        if isinstance(exc, httpx.TimeoutException):
            failure = Unavailable(f"{method} {url}: no answer within {self.timeout}s", detail=str(exc), url=url)
            failure.final = True  # a slow server is not helped by a second copy of the question
            return failure
        return ClientError(f"{method} {url}: {exc}", detail=str(exc), url=url)

    # -- the retry policy (tenacity), one for both clients ------------------------------

    def _retry_policy(self, url: str) -> dict[str, Any]:
        """Keyword arguments for ``tenacity.Retrying`` and ``tenacity.AsyncRetrying`` (add ``sleep``).

        Retried: :class:`Unavailable` (not a read timeout) and :class:`RateLimited`, ``retries`` times after
        the first attempt; the wait is the exponential backoff capped at ``backoff_max``, or the server's
        ``Retry-After`` when longer; a ``Retry-After`` over ``retry_after_max`` is raised at once.
        """

        def retryable(exc: BaseException) -> bool:
            return isinstance(exc, Unavailable | RateLimited) and not getattr(exc, "final", False)

        def failure(state: tenacity.RetryCallState) -> ClientError:
            exc = state.outcome.exception() if state.outcome is not None else None
            assert isinstance(exc, ClientError)
            return exc

        def stop(state: tenacity.RetryCallState) -> bool:
            exc = failure(state)
            if state.attempt_number > self.retries or (exc.retry_after or 0) > self.retry_after_max:
                log.warning("freshindex unavailable", extra={"event": "client_gave_up", "url": url,
                                                             "status": exc.status, "attempts": state.attempt_number})
                return True
            return False

        def wait(state: tenacity.RetryCallState) -> float:
            backoff = min(self.backoff_max, self.backoff * 2 ** (state.attempt_number - 1))
            return max(backoff, failure(state).retry_after or 0)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            delay = state.upcoming_sleep
            log.info("freshindex unavailable, retrying", extra={"event": "client_retry", "url": url,
                                                                "status": failure(state).status,
                                                                "attempt": state.attempt_number, "delay_s": delay})

        return {"retry": tenacity.retry_if_exception(retryable), "stop": stop, "wait": wait,
                "before_sleep": before_sleep, "reraise": True}


class FreshIndexClient(_ClientBase):
    """Ask a freshindex service for context packets and knowledge-base health.

    ``http`` is an ``httpx.Client`` to use instead of the one this client
    would make (tests pass one over ``httpx.MockTransport``; applications may
    share a pool); a client passed in is not closed by :meth:`close`.
    ``timeout`` is seconds per request (connect, read, write, pool); ``retry``
    (:class:`RetrySettings`) says when a request is asked again.  The
    keyword arguments ``retries``, ``backoff``, ``backoff_max`` and
    ``retry_after_max`` still work for one release, with a ``DeprecationWarning``.
    Thread safety is httpx's: one instance may be shared by threads.
    The asyncio twin is :class:`freshindex.injection.async_http.AsyncFreshIndexClient`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        http: httpx.Client | None = None,
        retry: RetrySettings = RetrySettings(),
        sleep: Callable[[float], None] = time.sleep,
        **legacy: Unpack[LegacyRetryArguments],
    ) -> None:
        super().__init__(base_url, token=token, timeout=timeout,
                         retry=retry_settings(retry, legacy, "FreshIndexClient"))
        self._sleep = sleep
        self._own = http is None
        self._http = http if http is not None else httpx.Client(timeout=timeout)

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
        body = self._query_body(question, kb, limit, principal, groups)
        return self._packet_of(self._call("POST", "/v1/query", json=body))

    def check_citations(self, answer: str, packet: ContextPacket | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The invalid citations of ``answer`` written from ``packet`` (``POST /v1/citations/check``).

        ``packet`` is the :class:`ContextPacket`, or its evidence as JSON objects (``n`` and ``text`` each).

        Returns the report as the server sends it (``ok``, ``cited``,
        ``missing``, ``unsupported``, ...); the server counts what failed.
        Raises :class:`BadRequest` when the server refuses the input.
        """
        return self._report_of(self._call("POST", "/v1/citations/check", json=self._check_body(answer, packet)))

    def health(self, kb: str) -> dict[str, Any]:
        """Freshness signals of ``kb`` (``GET /v1/kbs/KB/health``): active snapshot, last sync, backlogs."""
        return self._health_of(kb, self._call("GET", self._health_path(kb)))

    # -- transport ----------------------------------------------------------------

    def _call(self, method: str, path: str, *, json: Any = None) -> Any:
        url = self.base_url + path
        for attempt in tenacity.Retrying(sleep=self._sleep, **self._retry_policy(url)):
            with attempt:
                try:
                    response = self._http.request(method, url, json=json, headers=self._headers(),
                                                  timeout=self.timeout)
                except httpx.HTTPError as exc:
                    raise self._transport_error(method, url, exc) from exc
                return self._answer(method, url, response)
        raise AssertionError("unreachable: tenacity re-raises the last failure")  # pragma: no cover


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
    return max(0.0, min(86_400.0, (as_utc(when) - dt.datetime.now(dt.UTC)).total_seconds()))


__all__ = ["BadRequest", "BadResponse", "ClientError", "FreshIndexClient", "NotFound", "RateLimited", "RetrySettings",
           "ServerError", "TooLarge", "Unauthorized", "Unavailable"]
