"""Builds: verification holds bad versions, the alias never moves on failure,
one writer per knowledge base, tombstones apply before the swap."""

from __future__ import annotations

from pathlib import Path

import pytest

from freshindex.core.errors import LockHeldError
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.snapshots import Builder, BuildOptions, WriterLock
from freshindex.workers.runner import sync_inline
from tests.snapshots.conftest import ONE_STRATEGY


class DropsPoints:
    """A store that silently loses the last point of every upsert (a lost batch)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def upsert(self, name, points):
        self.inner.upsert(name, list(points)[:-1])

    def __getattr__(self, item):
        return getattr(self.inner, item)


@pytest.fixture
def svc(tmp_path: Path):
    # The hashing embedder keeps these bookkeeping tests fast; the real model
    # runs in tests/workers/test_pipeline.py and the end-to-end test.
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    yield services
    services.close()


def _with(svc: Services, **components) -> Services:
    """Another composition of the same process: ``svc``'s registry, store, embedder and metrics, some replaced."""
    shared = {"registry": svc.registry, "store": svc.store, "embedder": svc.embedder, "metrics": svc.metrics}
    return Services(svc.settings, **{**shared, **components})


def _source(svc: Services, root: Path, files: dict[str, str]) -> None:
    root.mkdir(exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    svc.registry.add_source("s", kind="folder", location=str(root), owner="t", kb="kb1")


def test_a_lost_batch_fails_verification_and_holds_the_swap(svc: Services, tmp_path: Path) -> None:
    root = tmp_path / "src"
    _source(svc, root, {"a.md": "# A\n\nalpha text", "b.md": "# B\n\nbeta text"})
    good = sync_inline(svc, "s")
    assert good.snapshot.id == "kb1-v1"
    (root / "c.md").write_text("# C\n\ngamma text")
    faulty = Builder(svc.registry, DropsPoints(svc.store), svc.embedder, svc.metrics, BuildOptions(naming=svc.naming))
    held = sync_inline(_with(svc, builder=faulty), "s")
    assert held.build_status == "failed" and held.exit_code == 3
    assert "registry expects" in (held.build_reason or "")
    assert svc.store.get_alias("fi_kb1") == "fi_kb1-v1"  # the last good snapshot keeps serving
    assert svc.registry.get_snapshot("kb1-v2").status == "failed"
    assert svc.metrics.value("freshindex_verification_failures_total", kb="kb1", check="count") == 1
    assert "fi_kb1-v2" not in svc.store.list_collections()
    # The changes stay staged; a healthy builder picks them up.
    result = svc.builder.build("kb1")
    assert result.status == "built" and result.snapshot_id == "kb1-v3"
    assert svc.client.retrieve("gamma text", kb="kb1").evidence[0].key == "c.md"


@ONE_STRATEGY  # one build, the first: full under either strategy
def test_a_second_builder_is_refused_while_the_lock_is_held(svc: Services, tmp_path: Path) -> None:
    _source(svc, tmp_path / "src", {"a.md": "# A\n\nalpha"})
    sync_inline(svc, "s", build=False)
    with WriterLock(svc.registry, "build:kb1", ttl=30, owner="other-builder"):
        with pytest.raises(LockHeldError, match="other-builder"):
            svc.builder.build("kb1")
    assert svc.builder.build("kb1").status == "built"


@ONE_STRATEGY  # one build, the first: full under either strategy
def test_an_expired_lock_of_a_dead_builder_does_not_block(svc: Services, tmp_path: Path) -> None:
    _source(svc, tmp_path / "src", {"a.md": "# A\n\nalpha"})
    sync_inline(svc, "s", build=False)
    assert svc.registry.acquire_lock("build:kb1", "dead-builder", ttl=0.01) is not None
    import time

    time.sleep(0.05)
    assert svc.builder.build("kb1").status == "built"


@ONE_STRATEGY  # one build, the first: full under either strategy
def test_a_tombstoned_chunk_is_not_served_even_before_the_next_swap(svc: Services, tmp_path: Path) -> None:
    root = tmp_path / "src"
    _source(svc, root, {"a.md": "# Old\n\nthe zebra migration procedure", "b.md": "# B\n\nbeta"})
    sync_inline(svc, "s")
    assert svc.client.retrieve("zebra migration procedure", kb="kb1").evidence[0].key == "a.md"
    (root / "a.md").unlink()
    sync_inline(svc, "s", build=False)  # tombstones written, nothing built yet
    assert svc.store.get_alias("fi_kb1") == "fi_kb1-v1"
    packet = svc.client.retrieve("zebra migration procedure", kb="kb1")
    assert all(e.key != "a.md" for e in packet.evidence)
    assert packet.withheld.get("tombstoned") == 1 and "tombstoned" not in packet.dropped  # hidden from callers


def test_a_swap_recorded_by_nobody_is_reconciled_by_the_next_build(svc: Services, tmp_path: Path) -> None:
    root = tmp_path / "src"
    _source(svc, root, {"a.md": "# A\n\nalpha"})
    sync_inline(svc, "s")
    (root / "b.md").write_text("# B\n\nbeta")
    sync_inline(svc, "s", build=False)

    class DiesAfterSwap(Builder):
        def build(self, kb, **kw):
            original = self.registry.activate_snapshot

            def crash(*a, **k):
                raise KeyboardInterrupt("killed after the swap")

            self.registry.activate_snapshot = crash
            try:
                return super().build(kb, **kw)
            finally:
                self.registry.activate_snapshot = original

    with pytest.raises(KeyboardInterrupt):
        DiesAfterSwap(svc.registry, svc.store, svc.embedder, svc.metrics, BuildOptions(naming=svc.naming)).build("kb1")
    assert svc.store.get_alias("fi_kb1") == "fi_kb1-v2"
    assert svc.registry.get_snapshot("kb1-v2").status == "verified"
    result = svc.builder.build("kb1")
    assert result.status == "unchanged" and result.snapshot_id == "kb1-v2"
    assert svc.registry.get_snapshot("kb1-v2").status == "active"
    assert svc.registry.staged_changesets("kb1") == []


def test_retention_keeps_recent_versions_and_never_the_active_one(svc: Services, tmp_path: Path) -> None:
    root = tmp_path / "src"
    _source(svc, root, {"a.md": "# A\n\nv0"})
    for i in range(1, 6):
        (root / "a.md").write_text(f"# A\n\nversion {i}")
        sync_inline(svc, "s")
    statuses = {s.id: s.status for s in svc.registry.list_snapshots("kb1")}
    assert statuses["kb1-v5"] == "active"
    assert [k for k, v in statuses.items() if v == "pruned"] == ["kb1-v2", "kb1-v1"]
    assert sorted(c for c in svc.store.list_collections() if c.startswith("fi_kb1")) == [
        "fi_kb1-v3", "fi_kb1-v4", "fi_kb1-v5"]


# The first build is full under either strategy; the second is by a Builder made here, with its own default
# strategy whatever the environment says.
@ONE_STRATEGY
def test_held_builds_are_exported_from_the_registry(svc: Services, tmp_path: Path) -> None:
    """Builds run in workers; the service scraped by Prometheus reads their outcome from the registry."""
    from freshindex.health.metrics import Metrics

    root = tmp_path / "src"
    _source(svc, root, {"a.md": "# A\n\nalpha text"})
    sync_inline(svc, "s")
    (root / "b.md").write_text("# B\n\nbeta")
    sync_inline(_with(svc, builder=Builder(svc.registry, DropsPoints(svc.store), svc.embedder, svc.metrics,
                                           BuildOptions(naming=svc.naming))), "s")
    scraped = Metrics()  # another process: it saw none of the builds
    scraped.add_health_collector(svc.registry.knowledge_bases, svc.registry.health)
    assert scraped.value("freshindex_held_builds_total", kb="kb1", check="count") == 1
    assert scraped.value("freshindex_snapshots", kb="kb1", status="active") == 1


class Recorded:
    """The hashing embedder made :class:`Releasable`, with the order of its releases and the store's writes."""

    def __init__(self, inner, events: list[str]) -> None:
        self.inner, self.events = inner, events

    def release(self) -> None:
        self.events.append("release")

    def embed(self, texts):
        self.events.append("embed")
        return self.inner.embed(texts)

    def __getattr__(self, item):
        return getattr(self.inner, item)


class RecordsWrites:
    def __init__(self, inner, events: list[str]) -> None:
        self.inner, self.events = inner, events

    def upsert(self, name, points):
        self.events.append("upsert")
        self.inner.upsert(name, points)

    def __getattr__(self, item):
        return getattr(self.inner, item)


def test_the_model_is_let_go_before_the_store_is_written_and_loads_again_for_the_canaries(
        svc: Services, tmp_path: Path) -> None:
    # Given a releasable embedder, a staged change and a canary that the build's verification asks
    events: list[str] = []
    embedder = Recorded(svc.embedder, events)
    root = tmp_path / "src"
    _source(svc, root, {"a.md": "# A\n\nalpha text", "b.md": "# B\n\nbeta text"})
    sync_inline(svc, "s")
    svc.registry.add_canary("kb1", "beta text", "b.md")
    (root / "c.md").write_text("# C\n\ngamma text")
    sync_inline(svc, "s", build=False)
    builder = Builder(svc.registry, RecordsWrites(svc.store, events), embedder, svc.metrics,
                      BuildOptions(naming=svc.naming))
    # When it builds
    result = builder.build("kb1")
    # Then the model was released before the first write, and the canary's question was embedded after it
    assert result.status == "built", result
    assert events.index("release") < events.index("upsert") < events.index("embed")
    assert result.verification["canaries"]["failed"] == []
    # And a build with nothing staged returns before releasing anything
    events.clear()
    assert builder.build("kb1").status == "unchanged" and events == []


def test_a_canary_is_scored_as_a_golden_question_is(svc: Services, tmp_path: Path) -> None:
    # Given a source whose documents sit in a folder, and a canary naming its document relative to it
    root = tmp_path / "src"
    (root / "guides").mkdir(parents=True)
    _source(svc, root, {"guides/a.md": "# A\n\nalpha text", "guides/b.md": "# B\n\nbeta text"})
    sync_inline(svc, "s")
    svc.registry.add_canary("kb1", "beta text", "b.md")
    (root / "guides" / "c.md").write_text("# C\n\ngamma text")
    sync_inline(svc, "s", build=False)
    # When it builds, Then the canary finds guides/b.md (the golden sets' key rule: equal, or ending in /b.md)
    result = svc.builder.build("kb1")
    assert result.status == "built" and result.verification["canaries"]["failed"] == [], result
    # And a canary whose document is nowhere holds the next build
    svc.registry.add_canary("kb1", "gamma text", "nosuch.md")
    (root / "guides" / "d.md").write_text("# D\n\ndelta text")
    sync_inline(svc, "s", build=False)
    held = svc.builder.build("kb1")
    assert held.status != "built" and held.verification["canaries"]["failed"] == ["gamma text"], held
