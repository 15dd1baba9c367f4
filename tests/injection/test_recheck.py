"""The query path's recheck gives a typed verdict per hit, and the client drops by its reason."""

from __future__ import annotations

from dataclasses import dataclass

from freshindex.injection.client import RecheckReason, RecheckVerdict, recheck_hits


@dataclass(frozen=True)
class Status:
    id: str
    state: str
    tombstoned: bool


def test_each_hit_gets_a_verdict() -> None:
    statuses = {"a": Status("a", "live", False), "b": Status("b", "live", True)}
    verdicts = recheck_hits(lambda ids: statuses, ["a", "b", "c"])
    assert {k: v.reason for k, v in verdicts.items()} == {
        "a": RecheckReason.SERVABLE, "b": RecheckReason.TOMBSTONED, "c": RecheckReason.ORPHAN,
    }
    assert verdicts["a"].servable and not verdicts["b"].servable and not verdicts["c"].servable
    # The reasons are the ContextPacket.dropped keys (and metric labels) they always were.
    assert RecheckVerdict.of("x", None).reason == "orphan" and RecheckReason.TOMBSTONED == "tombstoned"
