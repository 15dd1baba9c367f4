"""One rule for what a build means for its run, shared by the inline runner and the Celery task."""

from __future__ import annotations

from pathlib import Path

import pytest

from freshindex.core.enums import BuildStatus
from freshindex.core.errors import LockHeldError
from freshindex.core.exit_codes import ExitCode
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.snapshots import BuildResult, WriterLock
from freshindex.workers.pipeline import record_build
from freshindex.workers.runner import sync_inline


class FakeRuns:
    """The registry calls :func:`record_build` makes."""

    def __init__(self, applied: bool) -> None:
        self.applied, self.recorded = applied, []

    def run_changeset_applied(self, run_id: int) -> bool:
        return self.applied

    def set_run_build(self, run_id: int, *, status: str, snapshot_id: str | None, error: str | None = None) -> None:
        self.recorded.append((run_id, status, snapshot_id, error))

    def record_run_lag(self, run_id: int) -> None:
        self.recorded.append((run_id, "lag"))


@pytest.fixture
def svc(tmp_path: Path):
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    yield services
    services.close()


def test_unchanged_counts_as_built_when_an_earlier_build_took_the_run() -> None:
    runs = FakeRuns(applied=True)
    record = record_build(runs, 7, BuildResult(kb="kb1", status="unchanged", snapshot_id="kb1-v2"))
    assert record.status is BuildStatus.BUILT
    assert runs.recorded == [(7, BuildStatus.BUILT, "kb1-v2", None), (7, "lag")]


def test_a_held_lock_queues_the_build_and_leaves_the_run_pending() -> None:
    runs = FakeRuns(applied=False)
    record = record_build(runs, 7, LockHeldError("build:kb1 is held by other"))
    assert record.status is BuildStatus.PENDING and "queued behind another builder" in (record.reason or "")
    assert runs.recorded[0][1] == BuildStatus.PENDING


def test_no_run_records_nothing() -> None:
    runs = FakeRuns(applied=True)
    assert record_build(runs, None, BuildResult(kb="kb1", status="unchanged", snapshot_id="x")).status == "unchanged"
    assert runs.recorded == []


def test_an_inline_sync_behind_a_held_lock_does_not_exit_3(svc: Services, tmp_path: Path) -> None:
    # Given a source and another builder holding the knowledge base's lock
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha text")
    svc.registry.add_source("s", kind="folder", location=str(root), owner="t", kb="kb1")
    with WriterLock(svc.registry, "build:kb1", ttl=30, owner="other-builder"):
        # When it syncs inline
        report = sync_inline(svc, "s")
    # Then its build is queued, not failed: exit 0, the run stays pending for the next builder
    assert report.build_status == BuildStatus.PENDING and report.exit_code == ExitCode.OK
    assert "queued behind another builder" in (report.build_reason or "")
    assert report.as_dict()["build"]["status"] == "pending"
    assert svc.registry.get_sync_run(report.run.id).build_status == "pending"
    # And the changes stay staged: the next build applies them and the run reads as built
    result = svc.builder.build("kb1")
    assert result.status == "built"
    assert record_build(svc.registry, report.run.id, svc.builder.build("kb1")).status == BuildStatus.BUILT
