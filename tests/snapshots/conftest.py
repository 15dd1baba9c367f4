"""Every snapshot test runs under both build strategies (``snapshots.strategy``).

The environment variable reaches the builder of the test's own process and
of the processes it starts (``tests/snapshots/procs.py``); settings given as
arguments are merged over it, so a test that sets other snapshot settings
keeps the strategy.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, params=["copy", "bluegreen"])
def build_strategy(request: pytest.FixtureRequest, _clean_env: None, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FRESHINDEX_SNAPSHOTS__STRATEGY", request.param)
    monkeypatch.setenv("FRESHINDEX_SNAPSHOTS__READER_GRACE", "0.2")
    return request.param
