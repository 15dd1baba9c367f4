"""The thin client for asyncio: :class:`AsyncFreshIndexClient` over ``httpx.AsyncClient``.

The same endpoints, answers, errors and retries as
:class:`~injection.http.FreshIndexClient` (one definition of each in
:mod:`injection.http`: the request shapes, the error of each status, the
tenacity retry policy); only sending and sleeping are awaited::

    from freshindex.injection.async_http import AsyncFreshIndexClient
    async with AsyncFreshIndexClient("http://127.0.0.1:8080", token="...") as client:
        packet = await client.retrieve("How do I rotate the signing key?", kb="default")

What it does not guarantee: anything the sync client does not (see
:mod:`injection.http`); a retry's wait holds the calling task, not the event
loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Unpack

import httpx
import tenacity

from freshindex.injection.http import LegacyRetryArguments, RetrySettings, _ClientBase, retry_settings
from freshindex.injection.types import ContextPacket


class AsyncFreshIndexClient(_ClientBase):
    """Ask a freshindex service for context packets from asyncio code.

    ``http`` is an ``httpx.AsyncClient`` to use instead of the one this
    client would make (not closed by :meth:`aclose`); ``sleep`` is awaited
    between retries (tests pass one that records). Every other argument is
    the sync client's (``retry``: a :class:`~injection.http.RetrySettings`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        http: httpx.AsyncClient | None = None,
        retry: RetrySettings = RetrySettings(),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        **legacy: Unpack[LegacyRetryArguments],
    ) -> None:
        super().__init__(base_url, token=token, timeout=timeout,
                         retry=retry_settings(retry, legacy, "AsyncFreshIndexClient"))
        self._sleep = sleep
        self._own = http is None
        self._http = http if http is not None else httpx.AsyncClient(timeout=timeout)

    async def __aenter__(self) -> AsyncFreshIndexClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    async def retrieve(self, question: str, *, kb: str, limit: int = 5, principal: Any = "anonymous",
                       groups: Iterable[str] = ()) -> ContextPacket:
        """A cited context packet (``POST /v1/query``); see :meth:`FreshIndexClient.retrieve`."""
        body = self._query_body(question, kb, limit, principal, groups)
        return self._packet_of(await self._call("POST", "/v1/query", json=body))

    async def check_citations(self, answer: str,
                              packet: ContextPacket | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The citation report of ``answer`` (``POST /v1/citations/check``); see the sync client."""
        return self._report_of(await self._call("POST", "/v1/citations/check",
                                                json=self._check_body(answer, packet)))

    async def health(self, kb: str) -> dict[str, Any]:
        """Freshness signals of ``kb`` (``GET /v1/kbs/KB/health``)."""
        return self._health_of(kb, await self._call("GET", self._health_path(kb)))

    async def _call(self, method: str, path: str, *, json: Any = None) -> Any:
        url = self.base_url + path
        async for attempt in tenacity.AsyncRetrying(sleep=self._sleep, **self._retry_policy(url)):
            with attempt:
                try:
                    response = await self._http.request(method, url, json=json, headers=self._headers(),
                                                        timeout=self.timeout)
                except httpx.HTTPError as exc:
                    raise self._transport_error(method, url, exc) from exc
                return self._answer(method, url, response)
        raise AssertionError("unreachable: tenacity re-raises the last failure")  # pragma: no cover


__all__ = ["AsyncFreshIndexClient"]
