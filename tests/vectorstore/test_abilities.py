"""Optional store abilities are declared protocols (``vectorstore.base``), asked with ``isinstance``.

Each adapter has exactly the abilities it documents, a store without one is
served by the fallback its caller documents, and a method set to None (the
Qdrant client store without ``renames``) counts as absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from freshindex.injection.calibration import Calibration, calibrate
from freshindex.injection.refusal import RefusalPolicy
from freshindex.vectorstore import LexicalStats, ReaderTracking, Renames, VectorStore, open_store


@pytest.fixture(params=["edge", "local", "local-renames"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    kind = str(request.param)
    s = open_store(kind.split("-")[0], path=tmp_path / "store", renames=kind.endswith("renames"))
    yield s
    s.close()


EXPECTED = {  # (lexical statistics, renames, knows its readers)
    "edge": (True, True, True),
    "local": (True, False, False),
    "local-renames": (True, True, False),
}


def test_each_adapter_declares_exactly_its_abilities(store: VectorStore, request: pytest.FixtureRequest) -> None:
    kind = request.node.callspec.params["store"]
    assert (isinstance(store, LexicalStats), isinstance(store, Renames),
            isinstance(store, ReaderTracking)) == EXPECTED[kind]


class _Only:
    """A store that forwards only the named methods of another (a minimal third-party adapter)."""

    def __init__(self, inner: Any, *names: str) -> None:
        self._inner, self._names = inner, set(names)

    def __getattr__(self, name: str) -> Any:
        if name not in self._names:
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_wrapper_has_an_ability_only_when_it_forwards_it(tmp_path: Path) -> None:
    inner = open_store("edge", path=tmp_path / "store")
    try:
        bare = _Only(inner, "count")
        assert not isinstance(bare, LexicalStats | Renames | ReaderTracking)
        assert isinstance(_Only(inner, "lexical_idf"), LexicalStats)
        assert isinstance(_Only(inner, "rename_collection", "in_use"), Renames)
    finally:
        inner.close()


def test_calibration_on_a_store_without_lexical_statistics_is_skipped_with_its_reason() -> None:
    # Given a store that counts points but has no lexical statistics
    class Store:
        def count(self, name: str) -> int:
            return 1000

    # When a snapshot of it is calibrated
    rec = calibrate(Store(), None, collection="c", snapshot_id="kb-v1",  # type: ignore[arg-type]  # a bare fake
                    policy=RefusalPolicy(), settings=Calibration(enabled=True, min_chunks=1))
    # Then nothing is asked of the store and the record says why
    assert rec["status"] == "skipped" and rec["bias"] is None
    assert "lexical" in rec["reason"]
