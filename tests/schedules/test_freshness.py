"""Freshness: pause/resume, validity, supersedes, hard expiry, stale labels, removal, tombstone GC, lag.

Real parts: a SQLite registry, Qdrant Edge, folder sources synced inline,
the injection client's query path (the hashing embedder keeps it fast).
Times are passed to the sweep (``now=``), so nothing waits on the clock.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from freshindex.core.errors import ConfigError, SourceError
from freshindex.registry.records import SourceSetup
from freshindex.schedules.gc import collect_tombstones, retain_snapshots
from freshindex.schedules.plan import due_sources
from freshindex.schedules.sweep import sweep
from freshindex.services import Services
from freshindex.workers.runner import sync_inline

NOW = dt.datetime.now(dt.UTC)


def _keys(packet) -> list[str]:
    return [e.key for e in packet.evidence]


def _iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _folder(tmp_path: Path, files: dict[str, str]) -> Path:
    kb = tmp_path / "kb"
    kb.mkdir(exist_ok=True)
    for name, text in files.items():
        (kb / name).write_text(text)
    return kb


def _live_points(svc: Services) -> int:
    active = svc.registry.active_snapshot("default")
    return svc.store.count(active.collection)


def test_pause_stops_polls_and_holds_webhook_tickets_until_resume(svc: Services, tmp_path: Path) -> None:
    # Given a polled source
    svc.registry.add_source("docs", kind="folder", location=str(_folder(tmp_path, {"a.md": "# A\n\nalpha\n"})),
                            owner="t", kb="default", setup=SourceSetup(poll_interval_s=5))
    assert due_sources(svc.registry) == ["docs"]
    # When it is paused, and a webhook event arrives
    assert svc.registry.set_source_paused("docs", True).paused
    ticket = svc.registry.accept_delivery("docs", "d-1", None)
    # Then it is not polled and its ticket waits
    assert due_sources(svc.registry) == []
    # (claims look a minute past the wall clock: NOW is this module's import time, minutes ago in a full run)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    assert svc.registry.claim_due_tickets(later) == []
    # When it is resumed, the waiting ticket is dispatched and polls come back
    assert not svc.registry.set_source_paused("docs", False).paused
    assert [t.id for t in svc.registry.claim_due_tickets(later)] == [ticket.ticket_id]
    assert due_sources(svc.registry) == ["docs"]


def test_a_document_past_valid_until_is_withdrawn_at_once_and_removed_by_the_next_build(
        svc: Services, tmp_path: Path) -> None:
    until = NOW + dt.timedelta(days=1)
    kb = _folder(tmp_path, {
        "promo.md": f"---\nvalid_until: {_iso(until)}\n---\n# Promo\n\nThe winter promotion code is frost42kite.\n",
        "keep.md": "# Keep\n\nThe office opens at nine harbor7lamp.\n"})
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    assert sync_inline(svc, "docs").build_status == "built"
    assert "promo.md" in _keys(svc.client.retrieve("winter promotion code frost42kite", kb="default"))
    points = _live_points(svc)
    # Before its end of validity a sweep changes nothing
    assert sweep(svc.registry, now=NOW).withdrawn == ()
    # When the sweep runs after valid_until
    report = sweep(svc.registry, now=until + dt.timedelta(seconds=1), metrics=svc.metrics)
    # Then it is withdrawn through the query path before any build
    assert [(w.key, w.reason) for w in report.withdrawn] == [("promo.md", "expired")]
    assert "promo.md" not in _keys(svc.client.retrieve("winter promotion code frost42kite", kb="default"))
    assert "keep.md" in _keys(svc.client.retrieve("office opens at nine harbor7lamp", kb="default"))
    status = next(iter(svc.registry.chunk_status(sorted(svc.registry.live_chunk_ids_for_kb("default"))).values()))
    assert status.valid_until is None or isinstance(status.valid_until, dt.datetime)
    # And the next build drops its points; a second sweep withdraws nothing twice
    assert svc.builder.build("default").status == "built"
    assert _live_points(svc) == points - 1
    assert sweep(svc.registry, now=until + dt.timedelta(seconds=2)).withdrawn == ()
    # The document stays withdrawn across an unchanged re-sync
    sync_inline(svc, "docs")
    assert "promo.md" not in _keys(svc.client.retrieve("winter promotion code frost42kite", kb="default"))


def test_chunk_status_reports_expiry_before_the_sweep(svc: Services, tmp_path: Path) -> None:
    past = NOW - dt.timedelta(hours=1)
    kb = _folder(tmp_path, {"old.md": f"---\nvalid_until: {_iso(past)}\n---\n# Old\n\nstale text quartz9.\n"})
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    ids = sorted(svc.registry.live_chunk_ids_for_kb("default"))
    status = svc.registry.chunk_status(ids)[ids[0]]
    assert status.expired and not status.superseded and not status.tombstoned
    assert abs((status.valid_until - past).total_seconds()) < 1


def test_a_superseded_version_stops_being_served_at_its_end_of_validity(svc: Services, tmp_path: Path) -> None:
    switch = NOW + dt.timedelta(days=2)
    kb = _folder(tmp_path, {
        "travel-v3.md": "# Travel policy v3\n\nThe hotel cap per night is 180 euros.\n",
        "travel-v4.md": (f"---\nversion: 4\nvalid_from: {_iso(switch)}\nsupersedes: travel-v3.md\n---\n"
                         "# Travel policy v4\n\nThe hotel cap per night is 210 euros.\n")})
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    q = "hotel cap per night euros"
    assert {"travel-v3.md", "travel-v4.md"} <= set(_keys(svc.client.retrieve(q, kb="default")))
    assert sweep(svc.registry, now=switch - dt.timedelta(seconds=1)).withdrawn == ()
    report = sweep(svc.registry, now=switch)
    assert [(w.key, w.reason) for w in report.withdrawn] == [("travel-v3.md", "superseded")]
    assert _keys(svc.client.retrieve(q, kb="default")) == ["travel-v4.md"]
    v4 = next(d for d in svc.registry.documents_for_source("docs").values() if d.key == "travel-v4.md")
    prov = svc.registry.document_provenance(v4.id)
    assert prov["source_version"] == "4" and prov["supersedes"] == "travel-v3.md"
    assert prov["source_uri"] == (kb / "travel-v4.md").resolve().as_uri()


def test_an_unreachable_source_keeps_serving_labelled_stale_then_hard_expiry_withdraws_it(
        svc: Services, tmp_path: Path) -> None:
    kb = _folder(tmp_path, {"runbook.md": "# Runbook\n\nRestart the ingest daemon with care7olive.\n"})
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    svc.registry.set_freshness_policy("docs", stale_after_s=3600, hard_expiry_s=86400)
    verified = svc.registry.source_freshness(source_id="docs")[0].last_verified_at
    assert verified is not None and svc.registry.health("default")["stale_sources"] == {}
    # When the source becomes unreachable
    shutil.move(kb, tmp_path / "gone")
    with pytest.raises(SourceError):
        sync_inline(svc, "docs")
    assert svc.registry.sync_runs("docs")[0].status == "failed"
    # Then it keeps serving its last good snapshot, labelled stale with its last verified time
    packet = svc.client.retrieve("restart the ingest daemon care7olive", kb="default")
    assert "runbook.md" in _keys(packet)
    # and the query response labels that evidence stale, with when it was last verified
    assert packet.evidence[0].stale and packet.evidence[0].verified_at == verified.isoformat()
    assert "STALE" in packet.rendered
    stale = svc.registry.health("default")["stale_sources"]["docs"]
    assert stale["stale_reason"] == "unreachable" and stale["last_verified_at"] == verified.isoformat()
    assert stale["last_error"]
    assert sweep(svc.registry, now=verified + dt.timedelta(hours=1)).stale == ["docs"]
    # When it stays unverified past its hard expiry, its documents are withdrawn
    report = sweep(svc.registry, now=verified + dt.timedelta(days=1, seconds=1))
    assert [(w.key, w.reason) for w in report.withdrawn] == [("runbook.md", "unverified")]
    assert _keys(svc.client.retrieve("restart the ingest daemon care7olive", kb="default")) == []
    # When the source comes back, the next sync serves the document again
    shutil.move(tmp_path / "gone", kb)
    assert sync_inline(svc, "docs").build_status == "built"
    assert "runbook.md" in _keys(svc.client.retrieve("restart the ingest daemon care7olive", kb="default"))
    assert sweep(svc.registry).withdrawn == ()
    assert svc.registry.source_freshness(source_id="docs")[0].stale is False


def test_remove_withdraws_every_document_and_the_next_build_drops_them(svc: Services, tmp_path: Path) -> None:
    kb = _folder(tmp_path, {"a.md": "# A\n\nalpha mango1.\n", "b.md": "# B\n\nbeta mango2.\n"})
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default",
                            setup=SourceSetup(poll_interval_s=5))
    sync_inline(svc, "docs")
    withdrawn = svc.registry.remove_source("docs")
    assert sorted(w.key for w in withdrawn) == ["a.md", "b.md"]
    assert _keys(svc.client.retrieve("alpha mango1", kb="default")) == []
    assert due_sources(svc.registry) == []
    assert svc.builder.build("default").status == "built"
    assert _live_points(svc) == 0
    with pytest.raises(Exception, match="removed"):
        svc.registry.set_source_paused("docs", False)
    assert [r.status for r in svc.registry.sync_runs("docs")] == ["succeeded"]
    # A removed source is never synced again, until it is added again
    with pytest.raises(ConfigError, match="removed"):
        sync_inline(svc, "docs")
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default", replace=True)
    assert sync_inline(svc, "docs").build_status == "built"
    assert "a.md" in _keys(svc.client.retrieve("alpha mango1", kb="default"))


def _tombstones(svc: Services) -> dict[int, int | None]:
    from sqlalchemy import select

    from freshindex.registry.schema import Snapshot, Tombstone

    with svc.registry.session() as s:
        return dict(s.execute(select(Tombstone.id, Snapshot.version)
                              .outerjoin(Snapshot, Snapshot.id == Tombstone.applied_snapshot_id)).all())


def test_tombstone_gc_keeps_what_a_retained_snapshot_needs(svc: Services, tmp_path: Path) -> None:
    # Given four snapshots of an edited document (each edit tombstones the previous chunk)
    kb = _folder(tmp_path, {"a.md": "# A\n\nversion one lime3.\n"})
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    for n in range(2, 5):
        (kb / "a.md").write_text(f"# A\n\nversion {n} lime3.\n")
        assert sync_inline(svc, "docs").build_status == "built"
    # Retention (the builder's, under its lock) keeps keep_versions; a failing kb is skipped, not raised
    assert retain_snapshots(["default", "broken"], lambda kb_: svc.builder.retain(kb_) if kb_ == "default"
                            else (_ for _ in ()).throw(RuntimeError("lock held"))) == {"default": []}
    retained = [s.version for s in svc.registry.list_snapshots("default") if s.status in ("active", "retired")]
    oldest = min(retained)
    assert oldest > 1  # older versions were pruned
    before = _tombstones(svc)
    # When the GC runs (retention 0) long after
    collected = collect_tombstones(svc.registry, retention_s=0, now=NOW + dt.timedelta(days=30))
    # Then exactly the tombstones applied at or below the oldest retained version are gone
    after = _tombstones(svc)
    assert collected["default"] == len(before) - len(after) > 0
    assert after == {i: v for i, v in before.items() if v is None or v > oldest}
    # Retention window: a fresh tombstone is kept however old its snapshot
    assert collect_tombstones(svc.registry, retention_s=3600, now=NOW)["default"] == 0


def test_sync_lag_is_recorded_on_every_built_run(svc: Services, tmp_path: Path) -> None:
    kb = _folder(tmp_path, {"a.md": "# A\n\nfirst.\n"})
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    first = sync_inline(svc, "docs")
    (kb / "a.md").write_text("# A\n\nsecond.\n")
    second = sync_inline(svc, "docs")
    lags = {r["run"]: r for r in svc.registry.run_lags(source_id="docs")}
    assert set(lags) == {first.run.id, second.run.id}
    edit = dt.datetime.fromtimestamp((kb / "a.md").stat().st_mtime, dt.UTC)
    seen = dt.datetime.fromisoformat(lags[second.run.id]["observed_at"])
    assert abs((seen - max(edit, first.run.finished_at.replace(tzinfo=dt.UTC))).total_seconds()) < 0.01
    assert lags[second.run.id]["lag_s"] >= 0
    # An unchanged re-sync builds nothing and records no lag
    third = sync_inline(svc, "docs")
    assert third.run.id not in {r["run"] for r in svc.registry.run_lags(source_id="docs")}


def test_the_same_file_in_two_folders_is_one_canonical_document_with_mirrors(svc: Services, tmp_path: Path) -> None:
    text = "# Escalation\n\nPage the on-call lead after fifteen minutes walrus8.\n"
    one, two = tmp_path / "one", tmp_path / "two"
    (two / "copies").mkdir(parents=True)
    (one / "policy").mkdir(parents=True)
    (one / "policy" / "escalation.md").write_text(text)
    (one / "other.md").write_text("# Other\n\nunrelated.\n")
    (two / "escalation.md").write_text(text)
    (two / "copies" / "escalation-old-name.md").write_text(text)
    svc.registry.add_source("one", kind="folder", location=str(one), owner="t", kb="default")
    svc.registry.add_source("two", kind="folder", location=str(two), owner="t", kb="default")
    sync_inline(svc, "one")
    second = sync_inline(svc, "two")
    assert second.run.summary["chunks_embedded"] == 0
    # One canonical document, one set of chunks, the two other copies its mirrors
    canon = next(d for d in svc.registry.documents_for_source("one").values() if d.key == "policy/escalation.md")
    prov = svc.registry.document_provenance(canon.id)
    assert sorted((m["source_id"], m["key"]) for m in prov["mirrors"]) == [
        ("two", "copies/escalation-old-name.md"), ("two", "escalation.md")]
    other = next(d for d in svc.registry.documents_for_source("one").values() if d.key == "other.md")
    assert len(svc.registry.live_chunk_ids_for_kb("default")) == (
        len(svc.registry.live_chunk_ids(canon.id)) + len(svc.registry.live_chunk_ids(other.id)))
    for doc in svc.registry.documents_for_source("two").values():
        assert svc.registry.document_provenance(doc.id)["canonical_id"] == canon.id
    # One result slot, citing the canonical location
    packet = svc.client.retrieve("page the on-call lead walrus8", kb="default")
    assert packet.evidence[0].key == "policy/escalation.md"
    assert len([e for e in packet.evidence if "walrus8" in e.text]) == 1
    # When the canonical copy is deleted, a sweep re-homes the mirrors and the next sync serves one of them
    (one / "policy" / "escalation.md").unlink()
    sync_inline(svc, "one")
    report = sweep(svc.registry)
    assert report.resync == ["two"] and len(report.rehomed) == 2
    sync_inline(svc, "two")
    packet = svc.client.retrieve("page the on-call lead walrus8", kb="default")
    assert len([e for e in packet.evidence if "walrus8" in e.text]) == 1
    docs = {d.key: svc.registry.document_provenance(d.id) for d in svc.registry.documents_for_source("two").values()}
    canonical = [k for k, p in docs.items() if p["canonical_id"] == p["document_id"]]
    assert len(canonical) == 1 and len(docs[canonical[0]]["mirrors"]) == 1


def test_copies_indexed_twice_are_merged_by_the_sweep(svc: Services, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    text = "# Same\n\nidentical words heron6.\n"
    kb = _folder(tmp_path, {"a.md": text, "b.md": text})
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    # Given two workers that indexed both copies at once (neither saw the other's row)
    with monkeypatch.context() as m:
        m.setattr(svc.registry, "canonical_twin", lambda *a, **k: None)
        sync_inline(svc, "docs")
    both = {d.key: d.id for d in svc.registry.documents_for_source("docs").values()}
    assert all(svc.registry.live_chunk_ids(i) for i in both.values())  # two sets of points
    points = _live_points(svc)
    # When the sweep runs, the later copy becomes the mirror of the earlier one
    report = sweep(svc.registry)
    assert [(w.key, w.reason) for w in report.withdrawn] == [("b.md", "mirrored")]
    docs = {d.key: d.id for d in svc.registry.documents_for_source("docs").values()}
    assert svc.registry.document_provenance(docs["b.md"])["canonical_id"] == docs["a.md"]
    assert [e.key for e in svc.client.retrieve("identical words heron6", kb="default").evidence
            if "heron6" in e.text] == ["a.md"]
    assert svc.builder.build("default").status == "built" and _live_points(svc) == points - 1
    assert svc.registry.merge_twins() == []
    # And an unchanged re-sync keeps it a mirror
    sync_inline(svc, "docs")
    assert svc.registry.document_provenance(docs["b.md"])["canonical_id"] == docs["a.md"]


def test_reconciliation_withdraws_orphans_both_ways(svc: Services, tmp_path: Path) -> None:
    from freshindex.registry.schema import Chunk
    from freshindex.schedules.reconcile import reconcile

    kb = _folder(tmp_path, {"a.md": "# A\n\nalpha plum1.\n", "b.md": "# B\n\nbeta plum2.\n"})
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    docs = {d.key: d.id for d in svc.registry.documents_for_source("docs").values()}
    a_chunk = sorted(svc.registry.live_chunk_ids(docs["a.md"]))[0]
    b_chunk = sorted(svc.registry.live_chunk_ids(docs["b.md"]))[0]

    def ids(kb_: str) -> list[str]:
        return list(svc.store.iter_ids(svc.registry.active_snapshot(kb_).collection))

    assert reconcile(svc.registry, point_ids=ids, locked=svc.builder.lock)["default"]["index_orphans"] == 0
    # Given a point whose registry row no longer says live (an index orphan) ...
    with svc.registry.session() as s:
        s.get(Chunk, a_chunk).state = "removed"
    # ... and a live chunk the index lost (a registry orphan)
    report = reconcile(svc.registry, point_ids=lambda kb_: [i for i in ids(kb_) if i != b_chunk],
                       locked=svc.builder.lock)["default"]
    assert (report["index_orphans"], report["registry_orphans"]) == (1, 1)
    assert report["orphan_ids"] == [a_chunk] and report["absent_ids"] == [b_chunk]
    # Then the next build removes the orphan point, and the next sync re-reads the other document
    assert svc.builder.build("default").status == "built"
    assert a_chunk not in ids("default")
    assert svc.registry.get_document(docs["b.md"]).etag is None
    again = reconcile(svc.registry, point_ids=ids, locked=svc.builder.lock)["default"]
    assert again["index_orphans"] == 0
