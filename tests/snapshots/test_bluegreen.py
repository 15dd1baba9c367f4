"""Blue/green builds: the standby is recycled and brought up to date by replay.

* steady state: with ``keep_versions = 2`` the third build recycles the first
  version's collection, replays only what changed, and serves exactly what a
  copy would; a full rebuild goes beside the live collection;
* rollback to the standby is an alias swap, and the build after it replays
  the rolled-back changes away;
* a builder SIGKILLed at every step leaves the alias on a verified version
  and a standby the next build repairs by replay (not a copy, not a full
  rebuild);
* a reader holding the standby open makes the build copy instead (an Edge
  handle writes into its files on close); a query whose collection went
  away under it is refused and the alias resolved again;
* a store that cannot rename collections builds by copy.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from freshindex.core.errors import NotFoundError
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.snapshots import Builder, BuildOptions
from freshindex.vectorstore.edge import EdgeStore
from freshindex.workers.runner import sync_inline
from tests.snapshots.test_builder import _with
from tests.snapshots.test_crash_and_concurrency import kill_builder_at

LOCK_TTL = 2.0


@pytest.fixture(autouse=True)
def build_strategy(_clean_env: None, monkeypatch: pytest.MonkeyPatch) -> str:
    """Overrides the both-strategies fixture of the conftest: these tests are about blue/green."""
    for key, value in {"FRESHINDEX_SNAPSHOTS__STRATEGY": "bluegreen", "FRESHINDEX_SNAPSHOTS__READER_GRACE": "0",
                       "FRESHINDEX_SNAPSHOTS__KEEP_VERSIONS": "2", "FRESHINDEX_EMBEDDING__PROVIDER": "hashing",
                       "FRESHINDEX_SNAPSHOTS__LOCK_TTL": str(LOCK_TTL)}.items():
        monkeypatch.setenv(key, value)
    return "bluegreen"


def _svc(tmp_path: Path, **overrides) -> Services:
    return Services(load_settings(data_dir=tmp_path / "data", **overrides))


def _write(src: Path, docs: range, rev: int) -> None:
    src.mkdir(exist_ok=True)
    for i in docs:
        (src / f"doc{i}.md").write_text(f"# Doc {i}\n\nParagraph about topic {i} at revision {rev}.\n\n"
                                        f"Second paragraph {i} revision {rev}.")


def _kb(svc: Services, tmp_path: Path, docs: int = 30) -> Path:
    src = tmp_path / "src"
    _write(src, range(docs), 0)
    svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
    return src


def stage_pending_change(svc: Services, tmp_path: Path) -> Path:
    """The source after two built changes (the ring of two full), with a third staged but not built."""
    src = _kb(svc, tmp_path)
    for rev in range(1, 3):
        _write(src, range(rev, rev + 3), rev)
        sync_inline(svc, "s")
    _write(src, range(10, 15), 7)
    (src / "doc29.md").unlink()
    sync_inline(svc, "s", build=False)
    return src


def _served(svc: Services, kb: str = "kb1") -> list[str]:
    return sorted(c for c in svc.store.list_collections() if c.startswith(f"fi_{kb}-"))


def _text(client, topic: int) -> str:
    """The served text of document ``topic`` (looked up by key: the hashing embedder ranks loosely)."""
    packet = client.retrieve(f"Paragraph about topic {topic} at revision", kb="kb1", limit=10)
    return " ".join(e.text for e in packet.evidence if e.key == f"doc{topic}.md")


def _assert_exact(svc: Services, snapshot_id: str) -> None:
    """The collection holds exactly the registry's live chunks, once each, with their content."""
    collection = svc.registry.get_snapshot(snapshot_id).collection
    ids = list(svc.store.iter_ids(collection))
    assert len(ids) == len(set(ids)) == svc.registry.count_live("kb1")
    report = svc.snapshots.verify(snapshot_id)
    assert report["ok"], report


def test_the_third_build_recycles_the_standby_and_replays_only_the_change(tmp_path: Path) -> None:
    svc = _svc(tmp_path)
    src = _kb(svc, tmp_path)
    assert sync_inline(svc, "s").snapshot.strategy == "full"
    _write(src, range(0, 2), 1)
    second = sync_inline(svc, "s")
    assert second.snapshot.strategy == "incremental"  # the ring of two is not full yet: a copy
    _write(src, range(2, 4), 2)
    (src / "doc29.md").unlink()
    third = sync_inline(svc, "s")
    snap = svc.registry.get_snapshot(third.snapshot.id)
    assert snap.strategy == "bluegreen" and snap.parent_id == "kb1-v2"
    # v1's collection became v3: two physical collections, v1 is no longer retained.
    assert _served(svc) == ["fi_kb1-v2", "fi_kb1-v3"]
    assert svc.registry.get_snapshot("kb1-v1").status == "pruned"
    assert snap.verification["side"]["base"] == "kb1-v1"
    # What v3 replayed is v2's change (2 documents, 2 chunks each, both ways), not the collection.
    assert 0 < snap.verification["replayed"] <= 12 < snap.point_count
    _assert_exact(svc, "kb1-v3")
    assert "revision 2" in _text(svc.client, 3)
    assert not any(e.key == "doc29.md" for e in svc.client.retrieve("topic 29", kb="kb1", limit=10).evidence)
    # v2's edits survive in v3 although v3's own changesets do not contain them.
    assert "revision 1" in _text(svc.client, 1)
    svc.close()


def test_a_recycling_build_reads_nothing_from_the_active_collection(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay learns what the active version holds from the registry: opening the
    active shard only to look chunks up was most of a small build's time at 1M chunks."""
    svc = _svc(tmp_path)
    stage_pending_change(svc, tmp_path)
    active = svc.registry.active_snapshot("kb1").collection
    read: list[str] = []
    assert isinstance(svc.store, EdgeStore)
    shard = svc.store._shard
    monkeypatch.setattr(svc.store, "_shard", lambda name: (read.append(name), shard(name))[1])
    result = svc.builder.build("kb1")
    assert result.strategy == "bluegreen" and result.status == "built"
    assert read and active not in read  # the new version was verified; the active one never opened
    monkeypatch.undo()
    _assert_exact(svc, result.snapshot_id)
    assert "revision 7" in _text(svc.client, 12)
    assert not any(e.key == "doc29.md" for e in svc.client.retrieve("topic 29", kb="kb1", limit=10).evidence)
    svc.close()


def test_a_full_rebuild_goes_beside_and_the_ring_copies_once_after_it(tmp_path: Path) -> None:
    svc = _svc(tmp_path)
    src = _kb(svc, tmp_path, docs=10)
    for rev in range(3):
        _write(src, range(rev, rev + 1), rev + 1)
        sync_inline(svc, "s")
    assert svc.registry.get_snapshot("kb1-v3").strategy == "bluegreen"
    full = svc.builder.build("kb1", full=True)
    assert full.strategy == "full" and full.status == "built"
    assert _served(svc) == ["fi_kb1-v3", "fi_kb1-v4"]  # built beside v3, then v2 pruned by retention
    _write(src, range(5, 6), 9)
    after = sync_inline(svc, "s").snapshot
    # v3 differs from v4 by a full build: no replay can bridge that, so this one copies.
    assert svc.registry.get_snapshot(after.id).strategy == "incremental"
    _write(src, range(6, 7), 9)
    again = sync_inline(svc, "s").snapshot
    assert svc.registry.get_snapshot(again.id).strategy == "bluegreen"
    _assert_exact(svc, again.id)
    svc.close()


def test_rollback_to_the_standby_is_a_swap_and_the_next_build_replays_it_away(tmp_path: Path) -> None:
    svc = _svc(tmp_path)
    src = _kb(svc, tmp_path, docs=10)
    for rev in range(1, 4):
        _write(src, range(rev, rev + 1), rev)
        sync_inline(svc, "s")
    assert svc.registry.active_snapshot("kb1").id == "kb1-v3"
    result = svc.snapshots.rollback("kb1", actor="t", reason="bad release")
    assert result["snapshot_id"] == "kb1-v2" and svc.store.get_alias("fi_kb1") == "fi_kb1-v2"
    assert "revision 0" in _text(svc.client, 3)
    # The source still has revision 3: the next sync rebuilds it on v3's recycled collection.
    again = sync_inline(svc, "s").snapshot
    snap = svc.registry.get_snapshot(again.id)
    assert snap.strategy == "bluegreen" and snap.parent_id == "kb1-v2" and snap.verification["side"]["base"] == "kb1-v3"
    assert "revision 3" in _text(svc.client, 3)
    _assert_exact(svc, again.id)
    with pytest.raises(Exception, match="restore it from its archive"):
        svc.snapshots.swap("kb1", "kb1-v1", actor="t", reason="too old: its collection was recycled")
    svc.close()


def test_a_swap_across_branches_realigns_both_and_the_next_replay_serves_the_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """v2 edits a document; rollback to v1; v3 (another source) branches from v1; a swap to v2
    must realign v2's edit too (its changesets lie on the other branch, not between v2 and v3 by
    number), or the registry says v1's text is live and the next recycling build serves it."""
    monkeypatch.setenv("FRESHINDEX_SNAPSHOTS__KEEP_VERSIONS", "3")
    svc = _svc(tmp_path)
    src = _kb(svc, tmp_path, docs=6)
    other = tmp_path / "other"
    other.mkdir()
    (other / "note.md").write_text("# Note\n\nA note about gardening, first draft.")
    svc.registry.add_source("t", kind="folder", location=str(other), owner="t", kb="kb1")
    sync_inline(svc, "s")
    sync_inline(svc, "t")  # v2: both sources
    _write(src, range(2, 3), 5)
    sync_inline(svc, "s")  # v3: doc2 at revision 5
    assert "revision 5" in _text(svc.client, 2)
    svc.snapshots.rollback("kb1", to="kb1-v2", actor="t", reason="test")
    assert "revision 0" in _text(svc.client, 2)
    (other / "note.md").write_text("# Note\n\nA note about gardening, second draft.")
    v4 = sync_inline(svc, "t").snapshot  # branches from v2
    assert svc.registry.get_snapshot(v4.id).parent_id == "kb1-v2"
    swapped = svc.snapshots.swap("kb1", "kb1-v3", actor="t", reason="test")
    assert swapped["status"] == "swapped"
    assert "revision 5" in _text(svc.client, 2)
    _assert_exact(svc, "kb1-v3")  # the registry describes v3, doc2's revision 5 included
    (other / "note.md").write_text("# Note\n\nA note about gardening, third draft.")
    v5 = sync_inline(svc, "t").snapshot  # recycles a side and replays up to v3
    assert svc.registry.get_snapshot(v5.id).strategy == "bluegreen"
    assert "revision 5" in _text(svc.client, 2) and "revision 0" not in _text(svc.client, 2)
    _assert_exact(svc, v5.id)
    svc.close()


def test_a_rollback_does_not_hide_an_upsert_staged_before_it(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """doc2 at revision 1 is staged (not built) while v3 serves revision 2; a rollback to v1 realigns
    the chunks v2 and v3 touched, revision 1's among them: it must stay pending, not be tombstoned,
    or the next build writes its point and the query path hides it."""
    monkeypatch.setenv("FRESHINDEX_SNAPSHOTS__KEEP_VERSIONS", "3")
    svc = _svc(tmp_path)
    src = _kb(svc, tmp_path, docs=6)
    sync_inline(svc, "s")
    for rev in (1, 2):
        _write(src, range(2, 3), rev)
        sync_inline(svc, "s")
    _write(src, range(2, 3), 1)
    sync_inline(svc, "s", build=False)  # revision 1 again, staged behind v3
    svc.snapshots.rollback("kb1", to="kb1-v1", actor="t", reason="test")
    assert "revision 0" in _text(svc.client, 2)
    built = svc.builder.build("kb1")
    assert built.status == "built"
    assert "revision 1" in _text(svc.client, 2)
    sync_inline(svc, "s")  # the rollback made doc2 be re-read: revision 1 only
    text = _text(svc.client, 2)
    assert "revision 1" in text and "revision 0" not in text
    _assert_exact(svc, svc.registry.active_snapshot("kb1").id)
    svc.close()


def test_a_recycled_side_that_fails_verification_is_dropped_and_the_ring_refills(tmp_path: Path) -> None:
    from tests.snapshots.test_builder import DropsPoints

    svc = _svc(tmp_path)
    src = _kb(svc, tmp_path, docs=10)
    for rev in range(1, 3):
        _write(src, range(rev, rev + 1), rev)
        sync_inline(svc, "s")
    _write(src, range(20, 21), 1)  # a new document: its last point is lost
    faulty = Builder(svc.registry, DropsPoints(svc.store), svc.embedder, svc.metrics,
                     BuildOptions(naming=svc.naming, strategy="bluegreen", reader_grace=0, keep_versions=2,
                                  pipeline_version=svc.builder.pipeline_version))
    held = sync_inline(_with(svc, builder=faulty), "s")
    assert held.build_status == "failed" and svc.store.get_alias("fi_kb1") == "fi_kb1-v2"
    assert svc.registry.get_snapshot("kb1-v3").strategy == "bluegreen"
    assert _served(svc) == ["fi_kb1-v2"]
    result = svc.builder.build("kb1")
    assert result.status == "built" and result.strategy == "incremental"
    _assert_exact(svc, result.snapshot_id or "")
    svc.close()


def test_a_store_without_rename_builds_by_copy(tmp_path: Path) -> None:
    class NoRename:
        def __init__(self, inner) -> None:
            self.inner = inner

        def __getattr__(self, item):
            if item == "rename_collection":
                raise AttributeError(item)
            return getattr(self.inner, item)

    svc = _svc(tmp_path)
    src = _kb(svc, tmp_path, docs=5)
    builder = Builder(svc.registry, NoRename(svc.store), svc.embedder, svc.metrics,
                      BuildOptions(naming=svc.naming, strategy="bluegreen", reader_grace=0, keep_versions=2,
                                   pipeline_version=svc.builder.pipeline_version))
    strategies = []
    for rev in range(1, 5):
        _write(src, range(rev, rev + 1), rev)
        sync_inline(svc, "s", build=False)
        strategies.append(builder.build("kb1").strategy)
    assert strategies == ["full", "incremental", "incremental", "incremental"]
    svc.close()


def test_a_reader_holding_the_standby_open_makes_the_build_copy_not_corrupt(tmp_path: Path) -> None:
    svc = _svc(tmp_path)
    src = _kb(svc, tmp_path, docs=10)
    sync_inline(svc, "s")
    # Another process's store (its own flock): it queried v1 and keeps it open.
    reader = EdgeStore(svc.settings.vector_path)
    client = _with(svc, store=reader).client
    assert client.retrieve("Paragraph about topic 4", kb="kb1").snapshot_id == "kb1-v1"
    _write(src, range(4, 5), 1)
    sync_inline(svc, "s")
    _write(src, range(4, 5), 2)
    # v1 is the standby, but the reader has not queried since the swap: the builder copies.
    held = sync_inline(svc, "s").snapshot
    assert held.strategy == "incremental" and "fi_kb1-v1" in reader._open
    assert svc.metrics.value("freshindex_standby_busy_total", kb="kb1") == 1
    # Its next query lets v1 go; the build after that recycles, and what it wrote survives the
    # reader closing its handles (an Edge close writes the trackers back).
    assert "revision 2" in _text(client, 4) and "fi_kb1-v1" not in reader._open
    _write(src, range(5, 6), 3)
    recycled = sync_inline(svc, "s").snapshot
    assert recycled.strategy == "bluegreen"
    assert "revision 3" in _text(client, 5)
    reader.close()
    svc.store.release()
    fresh = _with(svc, store=EdgeStore(svc.settings.vector_path)).client
    assert "revision 3" in _text(fresh, 5) and "revision 2" in _text(fresh, 4)
    _assert_exact(svc, recycled.id)
    svc.close()


def test_a_query_on_a_collection_whose_directory_went_is_refused(tmp_path: Path) -> None:
    svc = _svc(tmp_path)
    _kb(svc, tmp_path, docs=3)
    sync_inline(svc, "s")
    vector = svc.embedder.embed(["Paragraph about topic 1"])[0].tolist()
    assert svc.store.search("fi_kb1-v1", vector, limit=3)
    import shutil

    shutil.rmtree(svc.settings.vector_path / "collections" / "fi_kb1-v1")  # the handle stays cached
    with pytest.raises(NotFoundError, match="during the query"):
        svc.store.search("fi_kb1-v1", vector, limit=3)
    assert "fi_kb1-v1" not in svc.store._open
    svc.close()


def test_in_use_and_rename_respect_other_handles(tmp_path: Path) -> None:
    from freshindex.core.errors import StoreBusyError

    svc = _svc(tmp_path)
    _kb(svc, tmp_path, docs=3)
    sync_inline(svc, "s")
    svc.store.release()
    other = EdgeStore(svc.settings.vector_path)
    assert not svc.store.in_use("fi_kb1-v1")
    other.count("fi_kb1-v1")
    assert svc.store.in_use("fi_kb1-v1")
    with pytest.raises(StoreBusyError):
        svc.store.rename_collection("fi_kb1-v1", "fi_kb1-v9")
    other.release()
    assert not svc.store.in_use("fi_kb1-v1")
    svc.store.rename_collection("fi_kb1-v1", "fi_kb1-v9")
    assert svc.store.count("fi_kb1-v9") == svc.registry.count_live("kb1")
    svc.close()


def test_the_builder_waits_for_a_reader_to_let_go_of_the_standby(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    svc = _svc(tmp_path, snapshots={"reader_grace": 60.0})
    src = _kb(svc, tmp_path, docs=5)
    sync_inline(svc, "s")
    reader = EdgeStore(svc.settings.vector_path)
    assert reader.get_alias("fi_kb1") == "fi_kb1-v1" and reader.count("fi_kb1-v1")
    _write(src, range(1, 2), 1)
    sync_inline(svc, "s")
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the reader's next query, while the builder waits
        waits.append(seconds)
        reader.get_alias("fi_kb1")

    monkeypatch.setattr(svc.builder, "sleep", sleep)
    _write(src, range(2, 3), 2)
    assert sync_inline(svc, "s").snapshot.strategy == "bluegreen"
    assert len(waits) == 1 and 0 < waits[0] <= 0.1 and not reader._open
    reader.close()
    svc.close()


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["recycling", "recycled", "written", "verifying", "swapped"])
def test_a_builder_killed_at_any_step_leaves_a_standby_repaired_by_replay(phase: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k.startswith("FRESHINDEX_")}
    env["FRESHINDEX_DATA_DIR"] = str(tmp_path / "data")
    svc = Services(load_settings(data_dir=tmp_path / "data"))
    stage_pending_change(svc, tmp_path)
    svc.store.release()

    killed_at = kill_builder_at(phase, env, tmp_path)

    # The alias is on a verified version: the old one, or (killed after the swap) the new one.
    serving = svc.store.get_alias("fi_kb1")
    assert serving == ("fi_kb1-v3" if phase == "swapped" else "fi_kb1-v2")
    assert svc.registry.get_snapshot(svc.naming.snapshot_of(serving) or "").status in ("active", "verified")
    time.sleep(max(0.0, LOCK_TTL + 0.2 - (time.monotonic() - killed_at)))
    result = svc.builder.build("kb1")
    dead = svc.registry.get_snapshot("kb1-v3")
    if phase == "swapped":
        assert result.status == "unchanged" and dead.status == "active"  # the record was completed
        _assert_exact(svc, "kb1-v3")
        svc.close()
        return
    assert dead.status == "failed" and "abandoned" in (dead.failure_reason or "")
    assert dead.verification["side"]["base"] == "kb1-v1"
    # Repaired by replaying onto the dead builder's collection: neither a copy nor a full rebuild.
    assert result.status == "built" and result.snapshot_id == "kb1-v4" and result.strategy == "bluegreen"
    repaired = svc.registry.get_snapshot("kb1-v4")
    assert repaired.verification["side"] == {**repaired.verification["side"], "base": "kb1-v1", "from": "kb1-v3"}
    assert _served(svc) == ["fi_kb1-v2", "fi_kb1-v4"]
    _assert_exact(svc, "kb1-v4")
    assert "revision 7" in _text(svc.client, 12)
    assert "revision 2" in _text(svc.client, 4)
    svc.close()
