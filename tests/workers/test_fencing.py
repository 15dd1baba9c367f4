"""Fencing: a task of a sync run that is closed (finished, or adopted by a later
run) changes nothing, is counted, and never strands a document.

Given a source synced and built more than once, when a task of an earlier run
arrives late (a redelivery after its worker died, a retry after a countdown),
then the registry is exactly as it was, the stale task is counted on its run
and in ``freshindex_stale_tasks_total``, and no spurious finish or build runs.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from freshindex.core.ids import document_id
from freshindex.registry import Registry
from freshindex.registry.schema import Changeset, ChangesetEntry, Chunk, Document, DocumentResult, Snapshot, SyncRun
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import pipeline
from freshindex.workers.runner import sync_inline
from tests.conftest import coordinator, distributed_env, worker_process

KEY = "guides/release.md"


@pytest.fixture
def svc(tmp_path: Path, onnx_embedder) -> Iterator[Services]:
    services = Services(load_settings(data_dir=tmp_path / "data"), embedder=onnx_embedder)
    yield services
    services.close()


def _state(reg: Registry) -> dict[str, Any]:
    """Everything a stale task could have touched, as plain values."""
    with reg.session() as s:
        return {
            "documents": sorted((d.id, d.etag, d.content_hash, d.state, d.version, d.error_reason)
                                for d in s.scalars(select(Document))),
            "chunks": sorted((c.id, c.state, c.tombstoned, c.added_changeset_id) for c in s.scalars(select(Chunk))),
            "entries": sorted((e.changeset_id, e.chunk_id, e.op) for e in s.scalars(select(ChangesetEntry))),
            "changesets": sorted((c.id, c.status) for c in s.scalars(select(Changeset))),
            "results": sorted((r.sync_run_id, r.key, r.outcome) for r in s.scalars(select(DocumentResult))),
            "runs": sorted((r.id, r.status, r.build_status) for r in s.scalars(select(SyncRun))),
            "snapshots": sorted((x.id, x.status) for x in s.scalars(select(Snapshot))),
        }


def _edit(kb: Path, text: str) -> None:
    path = kb / KEY
    path.write_text(path.read_text() + f"\n\n## Late addition\n\n{text}\n")


def test_a_stale_redelivered_task_after_a_later_build_changes_nothing(svc: Services, sample_kb: Path) -> None:
    # Given two syncs, each built: run 1's changeset is applied and closed.
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    first = sync_inline(svc, "docs")
    _edit(sample_kb, "Releases are frozen during the last week of each quarter.")
    second = sync_inline(svc, "docs")
    assert second.build_status == "built" and second.snapshot.id == "default-v2"
    # The source moves on again; nobody synced it yet.
    _edit(sample_kb, "Hotfixes need two approvals from the on-call rota.")
    before = _state(svc.registry)
    embedded_before = svc.metrics.value("freshindex_chunks_embedded_total", model=svc.embedder.model_id)

    # When run 1's task for the document is delivered again.
    stat = (sample_kb / KEY).stat()
    outcome = pipeline.process_document(svc.pipeline, pipeline.DocumentTask(
        first.run.id, first.run.changeset_id, "docs", KEY, f"late-{stat.st_mtime_ns}", stat.st_size))

    # Then it is fenced off: nothing changed, nothing embedded, counted twice over.
    assert outcome.outcome == "stale", outcome
    assert "succeeded" in (outcome.error_detail or "")
    assert _state(svc.registry) == before
    assert svc.metrics.value("freshindex_chunks_embedded_total", model=svc.embedder.model_id) == embedded_before
    assert svc.metrics.value("freshindex_stale_tasks_total", task="process_document") == 1
    assert svc.registry.get_sync_run(first.run.id).stale_tasks == 1
    assert svc.registry.stranded_documents("default") == []
    assert svc.snapshots.verify("default-v2")["ok"]
    # And the next sync takes the change as usual (the etag was not moved by the stale task).
    third = sync_inline(svc, "docs")
    assert third.run.summary["documents"]["modified"] == 1 and third.build_status == "built"
    packet = svc.client.retrieve("How many approvals do hotfixes need?", kb="default", limit=10)
    assert any(e.key == KEY and "two approvals" in e.text for e in packet.evidence)


def test_a_run_adopted_while_its_task_works_is_fenced_in_the_staging_transaction(
    svc: Services, sample_kb: Path
) -> None:
    # Given a built source and an open run whose task is in flight.
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    _edit(sample_kb, "Canary releases start at five percent of traffic.")
    run_id, cs_id = svc.registry.start_sync_run("docs", "test")
    doc = document_id("docs", KEY)
    hash_before = svc.registry.get_document(doc).content_hash
    adopted: list[int] = []
    real = svc.connector_for

    class _AdoptedDuringFetch:
        """The connector of a slow task: while it fetches, a later run adopts its changeset."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def fetch(self, key: str) -> bytes:
            adopted.append(svc.registry.open_or_join_run("docs", "later", lease_s=0).run_id)
            return self.inner.fetch(key)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    ctx = dataclasses.replace(svc.pipeline, connector_for=lambda source: _AdoptedDuringFetch(real(source)))

    # When the task stages its result after the adoption.
    stat = (sample_kb / KEY).stat()
    outcome = pipeline.process_document(ctx, pipeline.DocumentTask(run_id, cs_id, "docs", KEY, "new-etag", stat.st_size))

    # Then the fence inside stage_document refused it: no pending chunks, no entries anywhere.
    assert adopted and outcome.outcome == "stale"
    assert svc.registry.get_sync_run(run_id).status == "failed"
    assert svc.registry.get_sync_run(run_id).stale_tasks == 1
    assert svc.registry.get_document(doc).content_hash == hash_before
    assert svc.registry.changeset_ops([cs_id]) == {}
    later = svc.registry.get_sync_run(adopted[0])
    assert svc.registry.changeset_ops([later.changeset_id]) == {}
    with svc.registry.session() as s:
        assert not s.scalars(select(Chunk).where(Chunk.state == "pending")).all()


def test_a_stranded_document_is_found_by_verify_and_repaired_by_reconcile(
    svc: Services, sample_kb: Path, tmp_path: Path
) -> None:
    # Given the damage an unfenced late task used to do: run 1's changeset was
    # applied, then the task staged the document's new content into it.
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    first = sync_inline(svc, "docs")
    _edit(sample_kb, "Rollbacks are announced in the release channel.")
    with svc.registry.session() as s:
        s.execute(update(SyncRun).where(SyncRun.id == first.run.id).values(status="running"))
        s.execute(update(Changeset).where(Changeset.id == first.run.changeset_id).values(status="open"))
    ref = next(r for r in svc.connector_for(svc.registry.get_source("docs")).list() if r.key == KEY)
    pipeline.process_document(svc.pipeline, pipeline.DocumentTask(first.run.id, first.run.changeset_id, "docs", KEY,
                                                                  ref.etag, ref.size))
    with svc.registry.session() as s:
        s.execute(update(SyncRun).where(SyncRun.id == first.run.id).values(status="succeeded"))
        s.execute(update(Changeset).where(Changeset.id == first.run.changeset_id).values(status="applied"))
    assert sync_inline(svc, "docs").run.summary["documents_changed"] == 0  # the etag matches: "unchanged"

    # When verify looks, then it names the document.
    result = svc.snapshots.verify("default-v1")
    assert not result["ok"] and result["check"] == "stranded_pending"
    assert [d["key"] for d in result["details"]["documents"]] == [KEY]
    assert [d["key"] for d in svc.snapshots.reconcile("default", repair=False)["stranded"]] == [KEY]

    # When reconcile repairs it and a build runs, then it is served again and verify passes.
    repaired = svc.snapshots.reconcile("default")
    assert repaired["repaired"] == 1
    assert svc.registry.stranded_documents("default") == []
    assert svc.registry.get_document(document_id("docs", KEY)).content_hash is None  # next sync re-checks it
    built = svc.builder.build("default", reason="after reconcile")
    assert built.status == "built"
    assert svc.snapshots.verify(built.snapshot_id)["ok"]
    assert svc.registry.tombstone_backlog("default") == 0
    packet = svc.client.retrieve("Where are rollbacks announced?", kb="default")
    assert any(e.key == KEY for e in packet.evidence)
    # And the next sync re-checks it against the source without re-embedding anything.
    again = sync_inline(svc, "docs")
    assert again.run.summary["chunks_embedded"] == 0


# -- a real worker process over Redis ------------------------------------------------


@pytest.fixture
def worker_env(tmp_path: Path, pg_url: str, redis_url: str) -> dict[str, str]:
    return distributed_env(tmp_path, pg_url, redis_url, "fi-fence")


@pytest.fixture
def worker(worker_env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen]:
    with worker_process(worker_env, tmp_path / "worker.log", "fence") as proc:
        yield proc


@pytest.mark.services
@pytest.mark.slow
def test_a_stale_task_sent_to_a_real_worker_changes_nothing_and_is_counted(
    worker_env: dict[str, str], worker: subprocess.Popen, sample_kb: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from freshindex.workers.names import TaskName
    from freshindex.workers.runner import sync_distributed

    with coordinator(worker_env, monkeypatch) as (svc, app):
        svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
        first = sync_distributed(svc, app, "docs", timeout=240)
        assert first.build_status == "built", (tmp_path / "worker.log").read_text()[-3000:]
        _edit(sample_kb, "Release notes are written by the feature owner.")
        before = _state(svc.registry)
        stat = (sample_kb / KEY).stat()

        # When run 1's task arrives again, through the broker, at a separate worker.
        result = app.send_task(str(TaskName.PROCESS_DOCUMENT),
                               args=[first.run.id, first.run.changeset_id, "docs", KEY, "late", stat.st_size])
        assert result.get(timeout=120) == "stale"

        # Then nothing changed (no finish, no build either) and the run counts it.
        assert svc.registry.get_sync_run(first.run.id).stale_tasks == 1
        assert _state(svc.registry) == before
        assert worker.poll() is None
        assert "stale_task" in (tmp_path / "worker.log").read_text()
