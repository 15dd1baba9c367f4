"""Settling a recycled side whose builder died between retiring its base and renaming it.

A blue/green builder marks the standby it recycles ``pruned`` and then
renames its collection; a builder killed in between leaves the collection
untouched under its old name.  The next build's reconcile completes the
rename, but a reader in another process may have that collection open
(the rename is then refused, :class:`StoreBusyError`), and a reconcile may
itself be killed after failing the dead version's record.  Either way:

* the build goes on and the alias ends on a verified version;
* the untouched collection is not left ``pruned`` on disk: it is the
  standby again (or renamed as the dead version's side), so a later build
  recycles it by replay, not by a full rebuild, and nothing leaks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.snapshots import Builder, BuildOptions
from freshindex.vectorstore.edge import EdgeStore
from freshindex.workers.runner import sync_inline
from tests.snapshots.test_bluegreen import _assert_exact, _kb, _served, _text, _write


@pytest.fixture(autouse=True)
def build_strategy(_clean_env: None, monkeypatch: pytest.MonkeyPatch) -> str:
    """Overrides the both-strategies fixture of the conftest: these tests are about blue/green."""
    for key, value in {"FRESHINDEX_SNAPSHOTS__STRATEGY": "bluegreen", "FRESHINDEX_SNAPSHOTS__READER_GRACE": "0",
                       "FRESHINDEX_SNAPSHOTS__KEEP_VERSIONS": "2", "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}.items():
        monkeypatch.setenv(key, value)
    return "bluegreen"


class _Killed(BaseException):
    """Stands for a SIGKILL at a phase: nothing after it runs (the writer lock is let go)."""


def _dying_builder(svc: Services, phase: str) -> Builder:
    def hook(name: str) -> None:
        if name == phase:
            raise _Killed(name)

    return Builder(svc.registry, svc.store, svc.embedder, svc.metrics,
                   BuildOptions(naming=svc.naming, keep_versions=2, strategy="bluegreen", reader_grace=0.0,
                                on_phase=hook, pipeline_version=svc.builder.pipeline_version))


def _died_before_the_rename(tmp_path: Path) -> tuple[Services, Path]:
    """v1 retired, v2 active, a change staged; v3's builder died after marking v1 pruned."""
    svc = Services(load_settings(data_dir=tmp_path / "data"))
    src = _kb(svc, tmp_path, docs=12)
    for rev in (1, 2):
        _write(src, range(rev, rev + 2), rev)
        sync_inline(svc, "s")
    _write(src, range(8, 10), 7)
    sync_inline(svc, "s", build=False)
    with pytest.raises(_Killed):
        _dying_builder(svc, "recycling").build("kb1")
    assert svc.registry.get_snapshot("kb1-v1").status == "pruned"
    assert svc.registry.get_snapshot("kb1-v3").status == "building"
    assert "fi_kb1-v1" in svc.store.list_collections() and "fi_kb1-v3" not in svc.store.list_collections()
    svc.store.release()
    return svc, src


def test_a_reader_on_the_unrenamed_standby_does_not_strand_it(tmp_path: Path) -> None:
    # Given a builder killed between retiring v1 and renaming it, and a reader that has v1 open
    svc, src = _died_before_the_rename(tmp_path)
    reader = EdgeStore(svc.settings.vector_path)
    assert reader.count("fi_kb1-v1") == svc.registry.get_snapshot("kb1-v1").point_count
    # When the next build reconciles (the rename is refused: the reader holds v1)
    result = svc.builder.build("kb1")
    # Then it builds, the alias is on a verified version, and v1 holds its version again
    assert result.status == "built" and svc.store.get_alias("fi_kb1") == f"fi_{result.snapshot_id}"
    assert svc.registry.get_snapshot(result.snapshot_id).status == "active"
    assert svc.registry.get_snapshot("kb1-v3").status == "failed"
    _assert_exact(svc, result.snapshot_id)
    assert "revision 7" in _text(svc.client, 8)
    assert "fi_kb1-v1" not in svc.store.list_collections() or \
        svc.registry.get_snapshot("kb1-v1").status in ("retired", "active")
    # And once the reader lets go, the next build recycles a standby by replay, and nothing leaks
    reader.close()
    svc.store.release()
    _write(src, range(3, 4), 9)
    again = sync_inline(svc, "s").snapshot
    assert again.strategy == "bluegreen"
    assert len(_served(svc)) == 2
    served = {svc.registry.get_snapshot(svc.naming.snapshot_of(c) or "").status for c in _served(svc)}
    assert served == {"active", "retired"}
    _assert_exact(svc, again.id)
    assert "revision 9" in _text(svc.client, 3) and "revision 7" in _text(svc.client, 9)
    svc.close()


def test_a_reconcile_killed_before_the_rename_leaves_a_standby_repaired_by_replay(tmp_path: Path) -> None:
    # Given a builder killed between retiring v1 and renaming it, and the reconcile after it killed
    # between failing v3's record and completing the rename (what a reconcile that failed the
    # record first left behind)
    svc, _src = _died_before_the_rename(tmp_path)
    svc.registry.fail_snapshot("kb1-v3", "abandoned while building: its builder died", {"failed_check": "abandoned"})
    # When the next build runs
    result = svc.builder.build("kb1")
    # Then it repairs a standby by replay (neither a copy nor a full rebuild), and nothing leaks
    assert result.status == "built" and result.strategy == "bluegreen"
    assert svc.store.get_alias("fi_kb1") == f"fi_{result.snapshot_id}"
    assert _served(svc) == sorted(["fi_kb1-v2", f"fi_{result.snapshot_id}"])
    _assert_exact(svc, result.snapshot_id)
    assert "revision 7" in _text(svc.client, 8) and "revision 2" in _text(svc.client, 3)
    svc.close()


def test_the_settle_runs_before_the_record_is_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a builder killed between retiring v1 and renaming it
    svc, _src = _died_before_the_rename(tmp_path)
    # When the reconcile after it is killed as it fails v3's record
    def killed(*a, **k):
        raise _Killed("fail_snapshot")

    monkeypatch.setattr(svc.registry, "fail_snapshot", killed)
    with pytest.raises(_Killed):
        svc.builder.build("kb1")
    monkeypatch.undo()
    # Then the side was settled first: v3's collection exists, its record still says building
    assert svc.registry.get_snapshot("kb1-v3").status == "building"
    assert "fi_kb1-v3" in svc.store.list_collections()
    # And the next build repairs it by replay
    svc.store.release()
    result = svc.builder.build("kb1")
    assert result.status == "built" and result.strategy == "bluegreen"
    assert svc.registry.get_snapshot(result.snapshot_id).verification["side"]["from"] == "kb1-v3"
    _assert_exact(svc, result.snapshot_id)
    svc.close()
