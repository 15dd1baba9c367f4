"""A bracket shaped as a citation that no source list can hold fails the check and is counted by kind.

``[1-1000000000]`` was read as plain text (five digits and more were not a
citation), so an answer citing it was "ok".  Over the real app
(``POST /v1/citations/check``) with a packet the same service returned, and
on the plain functions.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from freshindex.api.app import create_app
from freshindex.health.metrics import Metrics
from freshindex.injection.citations import (
    MALFORMED_KINDS,
    MAX_DISTINCT_CITED,
    check_answer,
    cited_numbers,
    malformed_citations,
)
from freshindex.services import Services
from tests.api.release_kb import RELEASE, release_kb

QUESTION = "When are releases cut from the main branch?"
SUPPORTED = "Releases are cut every Tuesday from the main branch"
PACKET = {"evidence": [{"n": 1, "chunk_id": "c1", "score": 0.9, "text": RELEASE, "title": "Releases",
                        "key": "release.md", "snapshot_id": "default-v1"}]}


@pytest.fixture
def http(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], Services]]:
    with release_kb(tmp_path) as svc:
        key = svc.registry.create_api_key("bob", ["eng"]).key
        with TestClient(create_app(svc)) as client:
            yield client, {"Authorization": f"Bearer {key}"}, svc


def test_an_absurd_range_over_http_is_invalid_and_counted_by_kind(http: Any) -> None:
    client, auth, svc = http
    # Given a packet the service returned for the question
    packet = client.post("/v1/query", json={"question": QUESTION}, headers=auth).json()
    assert packet["evidence"] and packet["evidence"][0]["n"] == 1
    # When the answer cites an absurd range beside a sound citation
    answer = f"{SUPPORTED} [1-1000000000]. {SUPPORTED} [1]."
    r = client.post("/v1/citations/check", json={"answer": answer, "packet": packet}, headers=auth)
    # Then the report is not ok, names the citation and its kind, and the metric counts it by that kind
    assert r.status_code == 200
    report = r.json()
    assert report["ok"] is False and report["cited"] == [1] and report["missing"] == []
    assert report["malformed"] == [{"kind": "range_too_wide", "citation": "[1-1000000000]"}]
    assert svc.metrics.value("freshindex_invalid_citations_total", kind="range_too_wide") == 1
    text = client.get("/metrics").text
    assert 'freshindex_invalid_citations_total{kind="range_too_wide"} 1.0' in text
    # And each absurd shape has its own kind
    for cite, kind in (("[0]", "zero_number"), ("[9-2]", "reversed_range"), ("[12345]", "number_too_large"),
                       (f"[1-{MAX_DISTINCT_CITED + 1}]", "range_too_wide")):
        out = client.post("/v1/citations/check", json={"answer": f"{SUPPORTED} {cite}.", "packet": packet},
                          headers=auth).json()
        assert out["ok"] is False and out["malformed"] == [{"kind": kind, "citation": cite}], (cite, out)
        assert svc.metrics.value("freshindex_invalid_citations_total", kind=kind) >= 1
    # An honest answer is still ok and counts nothing more
    assert client.post("/v1/citations/check", json={"answer": f"{SUPPORTED} [1].", "packet": packet},
                       headers=auth).json()["ok"] is True


def test_absurd_shapes_are_malformed_and_sound_ones_are_not() -> None:
    assert malformed_citations("see [1-1000000000]") == [("range_too_wide", "1-1000000000")]
    assert malformed_citations("[1000000000-1]") == [("reversed_range", "1000000000-1")]
    assert malformed_citations("[10005-10000] [10000-10005]") == [("reversed_range", "10005-10000"),
                                                                   ("number_too_large", "10000-10005")]
    assert malformed_citations("[0] [0-3] [00]") == [("zero_number", "0"), ("zero_number", "0-3"),
                                                     ("zero_number", "00")]
    assert malformed_citations("[1, 7-3; 2]") == [("reversed_range", "7-3")]
    assert cited_numbers("[1, 7-3; 2]") == [1, 2]  # the sound parts still cite
    # A number of thousands of digits is judged on its digits, never parsed
    assert malformed_citations("[" + "9" * 5000 + "]") == [("number_too_large", "9" * 5000)]
    # Sound citations and bracketed dates are not malformed
    assert malformed_citations("[1] [2-4] [1, 3] [0001] [2024-01-15] [v2]") == []
    assert cited_numbers("[0001]") == [1]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**12), st.integers(0, 10**12))
def test_every_range_is_cited_or_malformed_never_plain_text(a: int, b: int) -> None:
    cite = f"[{a}-{b}]"
    numbers, malformed = cited_numbers(cite), malformed_citations(cite)
    assert bool(numbers) != bool(malformed), (cite, numbers, malformed)
    assert all(kind in MALFORMED_KINDS for kind, _ in malformed)
    report = check_answer(f"{SUPPORTED} {cite}.", PACKET, on_report=Metrics().count_citations)
    if malformed:
        assert not report.ok and report.cited == () and report.invalid_by_kind() == {malformed[0][0]: 1}
