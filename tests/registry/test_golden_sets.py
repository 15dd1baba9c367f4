"""Golden sets registered per knowledge base: register, replace, list, remove, due after a swap, results kept.

Runs on SQLite and on the local PostgreSQL (the migration 0018 creates the table on both)."""

from __future__ import annotations

import pytest

from freshindex.core.errors import ConfigError, NotFoundError
from freshindex.registry import NewSnapshot, Registry

SET = '{"question": "How do I install it?", "expected": "install.md"}\n'


def _serve(reg: Registry, kb: str, version: int) -> str:
    """A snapshot of ``kb`` recorded as serving (no changeset: the registry side of a swap only)."""
    active = reg.active_snapshot(kb)
    snap = reg.create_snapshot(NewSnapshot(snapshot_id=f"{kb}-v{version}", kb=kb, version=version,
                                           parent_id=active.id if active else None, collection=f"{kb}__v{version}",
                                           strategy="full", embedding_model="m", parser_version="p",
                                           changeset_ids=[], upserts=0, deletes=0))
    reg.mark_verified(snap.id, point_count=0, verification={"ok": True}, seconds=0.1)
    reg.activate_snapshot(snap.id, ops={}, actor="test", reason="build")
    return snap.id


def test_a_set_is_due_once_per_served_snapshot(registry: Registry) -> None:
    # Given a set registered on a kb that serves nothing yet
    info = registry.register_golden_set("docs", "smoke", SET, thresholds={"min_hit": 0.5}, top_k=3)
    assert registry.due_golden_sets() == []
    # When the kb serves v1, the set is due on v1
    _serve(registry, "docs", 1)
    assert [(i.name, sid) for i, sid in registry.due_golden_sets("docs")] == [("smoke", "docs-v1")]
    # And once its result on v1 is kept, it is not
    registry.record_golden_result(info.id, "docs-v1", passed=True, metrics={"hit_ratio": 1.0})
    assert registry.due_golden_sets() == []
    kept = registry.list_golden_sets("docs")[0]
    assert (kept.last_snapshot_id, kept.last_passed, kept.last_metrics) == ("docs-v1", True, {"hit_ratio": 1.0})
    assert kept.thresholds == {"min_hit": 0.5} and kept.top_k == 3
    # Then the next swap makes it due again, on the new snapshot
    _serve(registry, "docs", 2)
    assert [sid for _, sid in registry.due_golden_sets()] == ["docs-v2"]
    assert registry.golden_results() == [{"kb": "docs", "name": "smoke", "last_snapshot_id": "docs-v1",
                                          "last_run_at": kept.last_run_at.isoformat(), "last_passed": True,
                                          "last_metrics": {"hit_ratio": 1.0}}]


def test_replacing_a_set_clears_its_result_and_an_unchanged_one_keeps_it(registry: Registry) -> None:
    _serve(registry, "docs", 1)
    info = registry.register_golden_set("docs", "smoke", SET)
    registry.record_golden_result(info.id, "docs-v1", passed=True, metrics={"hit_ratio": 1.0})
    # The same text again: still evaluated on v1
    registry.register_golden_set("docs", "smoke", SET)
    assert registry.due_golden_sets() == []
    # A new gate: due again, its old result gone
    registry.register_golden_set("docs", "smoke", SET, thresholds={"min_hit": 0.9})
    (again, sid), = registry.due_golden_sets()
    assert (again.id, sid, again.last_metrics, again.last_run_at) == (info.id, "docs-v1", None, None)
    assert len(registry.list_golden_sets()) == 1


def test_sets_are_per_kb_and_removed_by_name(registry: Registry) -> None:
    registry.register_golden_set("docs", "smoke", SET)
    registry.register_golden_set("hr", "smoke", SET)
    assert [(i.kb, i.name) for i in registry.list_golden_sets()] == [("docs", "smoke"), ("hr", "smoke")]
    registry.remove_golden_set("docs", "smoke")
    assert [i.kb for i in registry.list_golden_sets()] == ["hr"]
    with pytest.raises(NotFoundError):
        registry.remove_golden_set("docs", "smoke")


@pytest.mark.parametrize(("name", "content", "top_k"), [
    ("has space", SET, 5), ("", SET, 5), ("x" * 64, SET, 5), ("ok", "  \n", 5), ("ok", SET, 0), ("ok", SET, 51),
])
def test_a_bad_registration_is_refused(registry: Registry, name: str, content: str, top_k: int) -> None:
    with pytest.raises(ConfigError):
        registry.register_golden_set("docs", name, content, top_k=top_k)
    assert registry.list_golden_sets() == []


def test_a_result_for_a_removed_set_is_dropped(registry: Registry) -> None:
    info = registry.register_golden_set("docs", "smoke", SET)
    registry.remove_golden_set("docs", "smoke")
    registry.record_golden_result(info.id, "docs-v1", passed=False, metrics=None, error="boom")
    assert registry.list_golden_sets() == []
