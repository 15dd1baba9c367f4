"""Every snapshot test runs under both build strategies (``snapshots.strategy``).

The environment variable reaches the builder of the test's own process and
of the processes it starts (``tests/snapshots/procs.py``); settings given as
arguments are merged over it, so a test that sets other snapshot settings
keeps the strategy.

A test marked :data:`ONE_STRATEGY` runs under the default strategy only.  It
is for tests whose every build is a first (or ``--full``) one, or that build
nothing: such a build is ``full`` whichever strategy is set
(``Builder.build``), and the strategy is read nowhere else except in a
reconcile that finds a failed blue/green side (which only a later build
leaves), so the second run would repeat the first exactly.
"""

from __future__ import annotations

import pytest

STRATEGIES = ["copy", "bluegreen"]

#: Runs a test under the default strategy only (see the module doc): overrides the fixture's parameters.
ONE_STRATEGY = pytest.mark.parametrize("build_strategy", ["bluegreen"], indirect=True)


@pytest.fixture(autouse=True, params=STRATEGIES)
def build_strategy(request: pytest.FixtureRequest, _clean_env: None, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FRESHINDEX_SNAPSHOTS__STRATEGY", request.param)
    monkeypatch.setenv("FRESHINDEX_SNAPSHOTS__READER_GRACE", "0.2")
    return request.param
