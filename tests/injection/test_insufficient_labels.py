"""``freshindex_insufficient_evidence_total{source}``: built-in values no source id can take, a cap that holds
across threads (review finding 7)."""

from __future__ import annotations

import threading

import pytest

from freshindex.core.errors import ConfigError
from freshindex.core.ids import validate_source_id
from freshindex.health import metrics as metrics_module
from freshindex.health.metrics import MAX_SOURCE_LABELS, NO_SOURCE_LABEL, OTHER_SOURCES_LABEL, Metrics


def _series(m: Metrics) -> list[str]:
    return [line for line in m.render().decode().splitlines()
            if line.startswith("freshindex_insufficient_evidence_total{")]


def test_the_built_in_values_cannot_be_source_ids() -> None:
    for label in (NO_SOURCE_LABEL, OTHER_SOURCES_LABEL):
        with pytest.raises(ConfigError):
            validate_source_id(label)


def test_sources_named_none_and_other_keep_their_own_series() -> None:
    m = Metrics()
    m.count_insufficient("kb", None, None)
    m.count_insufficient("kb", "none", None)
    m.count_insufficient("kb", "other", None)
    m.count_insufficient("kb", "other", None)
    assert m.value("freshindex_insufficient_evidence_total", source=NO_SOURCE_LABEL) == 1.0
    assert m.value("freshindex_insufficient_evidence_total", source="none") == 1.0
    assert m.value("freshindex_insufficient_evidence_total", source="other") == 2.0
    assert m.value("freshindex_insufficient_evidence_total", source=OTHER_SOURCES_LABEL) == 0.0


class _RacySet(set):  # type: ignore[type-arg]
    """A label set whose size check waits for a second thread: the window a check-then-add leaves open."""

    def __init__(self, items: set[str], barrier: threading.Barrier) -> None:
        super().__init__(items)
        self._barrier = barrier

    def __len__(self) -> int:
        n = super().__len__()
        try:
            self._barrier.wait(timeout=1.0)  # under a lock the other thread never arrives: go on alone
        except threading.BrokenBarrierError:
            pass
        return n


def test_the_cap_holds_when_two_threads_add_the_last_label_at_once() -> None:
    m = Metrics()
    for i in range(MAX_SOURCE_LABELS - 1):
        m.count_insufficient("kb", f"s{i}", None)
    barrier = threading.Barrier(2)
    m._insufficient_sources = _RacySet(set(m._insufficient_sources), barrier)
    threads = [threading.Thread(target=m.count_insufficient, args=("kb", name, None)) for name in ("late-a", "late-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set.__len__(m._insufficient_sources) == MAX_SOURCE_LABELS
    assert len(_series(m)) == MAX_SOURCE_LABELS + 1  # the first sources and one overflow series
    assert m.value("freshindex_insufficient_evidence_total", source=OTHER_SOURCES_LABEL) == 1.0
    assert metrics_module.MAX_SOURCE_LABELS == MAX_SOURCE_LABELS
