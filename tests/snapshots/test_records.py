"""SnapshotOps' records: their JSON form keeps the keys the CLI's --json printed, and they read by key."""

from __future__ import annotations

import pytest

from freshindex.snapshots.records import Reconciliation, StrandedRow, Swap, VerifyReport


def test_a_failed_verification_carries_its_stranded_documents_in_its_details() -> None:
    row = StrandedRow.of({"source_id": "docs", "key": "a.md", "document_id": "d1", "chunks": ["c1", "c2"]})
    failed = VerifyReport("kb-v2", ok=False, check="stranded_pending", reason="1 document", details={"expected": 3},
                          stranded=[row])
    assert failed.to_dict() == {"snapshot_id": "kb-v2", "ok": False, "check": "stranded_pending", "reason": "1 document",
                                "details": {"expected": 3, "documents": [{"source": "docs", "key": "a.md",
                                                                          "document_id": "d1", "pending_chunks": 2}]}}
    assert not failed["ok"] and failed["details"]["documents"][0]["key"] == "a.md"
    assert VerifyReport("kb-v2", ok=True, checks={"expected": 3}).to_dict() == {
        "snapshot_id": "kb-v2", "ok": True, "checks": {"expected": 3}}


def test_an_unchanged_swap_and_a_dry_run_say_only_what_happened() -> None:
    assert Swap("kb", "unchanged", "kb-v1").to_dict() == {"kb": "kb", "status": "unchanged", "snapshot_id": "kb-v1"}
    moved = Swap("kb", "swapped", "kb-v1", previous_id="kb-v2", direction="back", chunks_realigned=4).to_dict()
    assert moved["documents_to_recheck"] == "next sync" and moved["previous_id"] == "kb-v2"
    assert "next" not in Reconciliation("kb", [], repair=False).to_dict()
    assert Reconciliation("kb", [], repaired=0).to_dict()["next"] is None


def test_a_record_reads_by_key_but_is_not_a_mutable_dict() -> None:
    swap = Swap("kb", "unchanged", "kb-v1")
    assert swap["status"] == "unchanged" and swap.get("previous_id", "none") == "none"
    with pytest.raises(KeyError):
        swap["previous_id"]
    with pytest.raises(TypeError):
        swap["status"] = "swapped"  # type: ignore[index]
