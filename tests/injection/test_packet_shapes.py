"""A packet body of the wrong shape is a TypeError/KeyError/ValueError (HTTP client: BadResponse), never an
AttributeError (review finding 8)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshindex.injection.http import BadResponse, FreshIndexClient, RetrySettings
from freshindex.injection.types import ContextPacket, Evidence, NextAction, SearchReport

GOOD_SEARCH: dict[str, Any] = {"kb": "kb", "snapshot_id": None, "sources": [], "candidates": 0, "accepted": 0,
                               "rejected": {}, "next_actions": [{"action": "ask_owner", "reason": "not_found"}]}
GOOD_PACKET: dict[str, Any] = {"question": "q", "kb": "kb", "snapshot_id": None, "insufficient_evidence": True,
                               "reason": "r", "evidence": [], "dropped": {}, "search": GOOD_SEARCH, "context": "c"}

BAD_SEARCHES = [{"rejected": [1]}, {"rejected": "low_score"}, {"next_actions": "ab"}, {"next_actions": [1]},
                {"next_actions": [["ask_owner"]]}, {"sources": 7}, {"next_actions": {"a": 1}}]


@pytest.mark.parametrize("change", BAD_SEARCHES)
def test_a_search_report_of_the_wrong_shape_is_a_type_error(change: dict[str, Any]) -> None:
    with pytest.raises((TypeError, KeyError, ValueError)):
        SearchReport.from_dict({**GOOD_SEARCH, **change})


def test_packet_parts_of_the_wrong_shape_are_type_errors() -> None:
    with pytest.raises(TypeError):
        ContextPacket.from_dict({**GOOD_PACKET, "dropped": ["low_score"]})
    with pytest.raises(TypeError):
        ContextPacket.from_dict({**GOOD_PACKET, "evidence": ["not evidence"]})
    with pytest.raises(TypeError):
        NextAction.from_dict("ask_owner")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Evidence.from_dict([1, 2])  # type: ignore[arg-type]
    assert ContextPacket.from_dict(GOOD_PACKET).search == SearchReport.from_dict(GOOD_SEARCH)
    assert SearchReport.from_dict({**GOOD_SEARCH, "rejected": [], "next_actions": None}).next_actions == ()


def _client(body: Any) -> FreshIndexClient:
    transport = httpx.MockTransport(lambda _request: httpx.Response(200, json=body))
    return FreshIndexClient("http://freshindex.test", http=httpx.Client(transport=transport),
                            retry=RetrySettings(retries=0))


@pytest.mark.parametrize("change", BAD_SEARCHES)
def test_the_thin_client_answers_bad_response_for_a_malformed_report(change: dict[str, Any]) -> None:
    with _client({**GOOD_PACKET, "search": {**GOOD_SEARCH, **change}}) as client, pytest.raises(BadResponse):
        client.retrieve("q", kb="kb")


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                     max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional={k: _JSON for k in GOOD_SEARCH}))
def test_any_json_search_report_parses_or_raises_a_declared_error(change: dict[str, Any]) -> None:
    try:
        packet = ContextPacket.from_dict({**GOOD_PACKET, "search": {**GOOD_SEARCH, **change}})
    except (KeyError, TypeError, ValueError):
        return  # a declared error: the thin client turns these into BadResponse
    # Parsed: what comes out is a report of the declared shape, whatever went in
    assert isinstance(packet.search, SearchReport)
    assert isinstance(packet.search.next_actions, tuple)
