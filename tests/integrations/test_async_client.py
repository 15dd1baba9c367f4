"""``AsyncFreshIndexClient``: the sync client's errors and retries (one policy, shown on both), and a real serve."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable

import httpx
import pytest

from freshindex.injection.async_http import AsyncFreshIndexClient
from freshindex.injection.http import (
    FreshIndexClient,
    NotFound,
    RateLimited,
    RetrySettings,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from freshindex.injection.types import ContextPacket
from tests.integrations.conftest import ANSWERABLE, UNANSWERABLE, KbServer

PACKET = ContextPacket("q", "default", "default-v3", (), True, "insufficient evidence", "<context/>").as_dict()


def _ask(kind: str, answers: list[Callable[[], httpx.Response] | type[Exception]], **kw) -> tuple[object, list[float], int]:
    """Ask ``retrieve`` through the sync or the async client over a mock transport answering ``answers`` in turn.

    Returns (the packet or the error raised, the waits slept, the number of requests).
    """
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        answer = answers[min(len(calls), len(answers)) - 1]
        if isinstance(answer, type):
            raise answer("boom", request=request)
        return answer()

    slept: list[float] = []
    transport = httpx.MockTransport(handler)
    if kind == "sync":
        client = FreshIndexClient("http://fi.test", token="t", http=httpx.Client(transport=transport),
                                  sleep=slept.append, **kw)
        run: Callable[[], object] = lambda: client.retrieve("q", kb="default")  # noqa: E731
    else:
        async def record(delay: float) -> None:
            slept.append(delay)

        async def go() -> object:
            async with httpx.AsyncClient(transport=transport) as http:
                return await AsyncFreshIndexClient("http://fi.test", token="t", http=http, sleep=record,
                                                   **kw).retrieve("q", kb="default")

        run = lambda: asyncio.run(go())  # noqa: E731
    try:
        return run(), slept, len(calls)
    except Exception as exc:
        return exc, slept, len(calls)


# Factories: one httpx.Response object is not reusable across a sync and an async transport.
def BUSY() -> httpx.Response:
    return httpx.Response(503, json={"error": "StoreBusyError", "detail": "busy"})


def LIMITED() -> httpx.Response:
    return httpx.Response(429, json={"error": "rate_limited", "detail": "slow"}, headers={"Retry-After": "3"})


def OK() -> httpx.Response:
    return httpx.Response(200, json=PACKET)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_both_clients_retry_503_and_429_alike(kind: str) -> None:
    got, slept, calls = _ask(kind, [BUSY, BUSY, OK], retry=RetrySettings(retries=2, backoff=0.1))
    assert isinstance(got, ContextPacket) and slept == [0.1, 0.2] and calls == 3
    got, slept, calls = _ask(kind, [LIMITED, OK], retry=RetrySettings(retries=2, backoff=0.1))
    assert isinstance(got, ContextPacket) and slept == [3.0] and calls == 2  # the server's Retry-After


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_both_clients_still_take_the_old_retry_keywords_with_a_deprecation_warning(kind: str) -> None:
    # Given the keyword arguments of the release before RetrySettings
    with pytest.warns(DeprecationWarning, match=r"pass retry=RetrySettings\(retries=\.\.\., backoff=\.\.\.\)") as heard:
        got, slept, calls = _ask(kind, [BUSY, BUSY, OK], retries=2, backoff=0.1)
    # Then they still set the retries, and the warning points at the caller's line
    assert isinstance(got, ContextPacket) and slept == [0.1, 0.2] and calls == 3
    assert [w.filename for w in heard if w.category is DeprecationWarning] == [__file__]
    # and over a RetrySettings given as well, the old keyword wins for its own field only
    with pytest.warns(DeprecationWarning, match="keyword arguments retries are deprecated"):
        got, slept, calls = _ask(kind, [BUSY, BUSY, OK], retry=RetrySettings(retries=1, backoff=0.3), retries=2)
    assert isinstance(got, ContextPacket) and slept == [0.3, 0.6] and calls == 3


@pytest.mark.parametrize("client", [FreshIndexClient, AsyncFreshIndexClient])
def test_a_misspelt_keyword_is_still_a_type_error(client: type) -> None:
    with pytest.raises(TypeError, match="retrys"):
        client("http://fi.test", retrys=2)


def test_retry_settings_alone_warn_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, slept, calls = _ask("sync", [BUSY, OK], retry=RetrySettings(retries=1, backoff=0.1))
    assert isinstance(got, ContextPacket) and slept == [0.1] and calls == 2


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_both_clients_raise_alike(kind: str) -> None:
    got, slept, calls = _ask(kind, [lambda: httpx.Response(413, json={"error": "too_large", "detail": "over"})])
    assert isinstance(got, TooLarge) and got.status == 413 and (slept, calls) == ([], 1)
    got, slept, calls = _ask(kind, [lambda: httpx.Response(429, json={"detail": "slow"}, headers={"Retry-After": "120"})],
                             retry=RetrySettings(retry_after_max=10.0))
    assert isinstance(got, RateLimited) and got.retry_after == 120.0 and (slept, calls) == ([], 1)
    got, slept, calls = _ask(kind, [BUSY], retry=RetrySettings(retries=3, backoff=1.0, backoff_max=2.5))
    assert isinstance(got, Unavailable) and got.error == "StoreBusyError" and slept == [1.0, 2.0, 2.5]
    got, slept, calls = _ask(kind, [httpx.ConnectError], retry=RetrySettings(retries=1, backoff=0.05))
    assert isinstance(got, Unavailable) and isinstance(got.__cause__, httpx.ConnectError) and calls == 2
    got, slept, calls = _ask(kind, [httpx.ReadTimeout], retry=RetrySettings(retries=3))
    assert isinstance(got, Unavailable) and "no answer within" in str(got) and (slept, calls) == ([], 1)


def _supported_by(text: str) -> str:
    """A sentence citing [1] that the source's own words support."""
    words = " ".join(text.replace("`", " ").split()[:12])
    return f"{words} [1]."


def test_async_client_against_a_real_serve(kb_server: KbServer) -> None:
    async def go() -> dict:
        async with AsyncFreshIndexClient(kb_server.url, token=kb_server.key) as client:
            packet, refused, health = await asyncio.gather(
                client.retrieve(ANSWERABLE, kb="default", limit=3), client.retrieve(UNANSWERABLE, kb="default"),
                client.health("default"))
            good = await client.check_citations(_supported_by(packet.evidence[0].text), packet)
            bad = await client.check_citations("It was all in [7].", packet)
            errors = {}
            for name, call in (("unknown_kb", client.retrieve("x", kb="nothing-here")),
                               ("wrong_key", AsyncFreshIndexClient(kb_server.url, token="fik_x_y").retrieve(
                                   "x", kb="default"))):
                try:
                    await call
                except (NotFound, Unauthorized) as exc:
                    errors[name] = exc.status
            return {"packet": packet, "refused": refused, "health": health, "good": good, "bad": bad,
                    "errors": errors}

    got = asyncio.run(go())
    with FreshIndexClient(kb_server.url, token=kb_server.key) as sync:
        assert got["packet"].citations == sync.retrieve(ANSWERABLE, kb="default", limit=3).citations
    # The hashing embedder ties the page's deployment and migration sections (first dense vs first lexical).
    assert got["packet"].citations[0].startswith("[1] guides/release.md#")
    assert any("guides/release.md#database-migration" in c for c in got["packet"].citations[:2])
    assert got["refused"].insufficient and got["refused"].evidence == ()
    assert got["health"]["active_snapshot"] == "default-v1"
    assert got["good"]["ok"] is True and got["bad"]["ok"] is False and got["bad"]["missing"] == [7]
    assert got["errors"] == {"unknown_kb": 404, "wrong_key": 401}
