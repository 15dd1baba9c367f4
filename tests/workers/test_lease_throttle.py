"""The per-process lease throttle: one run's heartbeats from many tasks of one process collapse."""

from __future__ import annotations

import time

from freshindex.workers.task_base import ThrottledLease


class Ledger:
    def __init__(self) -> None:
        self.beats: list[tuple[int, str | None]] = []

    def heartbeat_run(self, run_id: int, worker: str | None = None) -> None:
        self.beats.append((run_id, worker))


def test_beats_of_one_run_within_the_period_reach_the_registry_once() -> None:
    ledger = Ledger()
    lease = ThrottledLease(ledger, every=60.0)
    for _ in range(5):  # entry and exit beats of consecutive short tasks
        lease.heartbeat_run(7, "w")
    lease.heartbeat_run(8, "w")  # another run is renewed on its own schedule

    assert ledger.beats == [(7, "w"), (8, "w")]


def test_a_beat_after_the_period_is_written() -> None:
    ledger = Ledger()
    lease = ThrottledLease(ledger, every=0.05)
    lease.heartbeat_run(7)
    time.sleep(0.06)
    lease.heartbeat_run(7)

    assert ledger.beats == [(7, None), (7, None)]
