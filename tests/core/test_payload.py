"""The point payload: one type writes it and reads it back; the stored JSON keeps its shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from freshindex.core.payload import PayloadError, PointPayload
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

#: The payload keys shards written before PointPayload existed carry (the stored contract).
STORED_KEYS = ["chunk_id", "document_id", "source_id", "kb", "key", "title", "heading_path", "anchor", "page",
               "kind", "text", "content_hash", "doc_version", "acl", "snapshot_id", "meta", "tenant", "acl_version",
               "sensitivity"]


def _payload(**over) -> PointPayload:
    values = dict(chunk_id="c1", document_id="d1", source_id="s", kb="kb1", key="a.md", text="alpha",
                  content_hash="h1", snapshot_id="kb1-v1", title="A", heading_path=("A", "B"), anchor="b",
                  page=3, kind="paragraph", doc_version=2, acl=("group:eng",), meta={"ocr": True})
    values.update(over)
    return PointPayload(**values)


def test_a_payload_round_trips_through_its_stored_dict() -> None:
    p = _payload()
    d = p.to_dict()
    assert list(d) == STORED_KEYS
    assert d["heading_path"] == ["A", "B"] and d["acl"] == ["group:eng"]  # JSON lists, as always stored
    assert PointPayload.from_dict(d) == p
    assert p.ocr


def test_unknown_keys_are_ignored_and_optional_ones_default() -> None:
    d = {k: v for k, v in _payload().to_dict().items() if k not in ("title", "page", "meta", "acl", "anchor")}
    d["added_by_a_newer_writer"] = {"x": 1}
    p = PointPayload.from_dict(d)
    assert p.title is None and p.page is None and p.meta == {} and p.acl == () and p.anchor == ""
    assert p.chunk_id == "c1"


@pytest.mark.parametrize("key", list(PointPayload.REQUIRED))
def test_a_missing_required_key_is_a_clear_error(key: str) -> None:
    d = _payload().to_dict()
    del d[key]
    with pytest.raises(PayloadError, match=key):
        PointPayload.from_dict(d)


def test_what_the_builder_writes_is_what_the_reader_reads(tmp_path: Path) -> None:
    # Given a tiny knowledge base built with the hashing embedder
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        root = tmp_path / "src"
        root.mkdir()
        (root / "a.md").write_text("# Alpha\n\n## Part\n\nalpha text about payloads")
        svc.registry.add_source("s", kind="folder", location=str(root), owner="t", kb="kb1")
        report = sync_inline(svc, "s")
        assert report.build_status == "built"
        collection = svc.store.get_alias("fi_kb1")
        # When a point is read back from the store
        ids = list(svc.store.iter_ids(collection))
        points = svc.store.retrieve(collection, ids)
        assert points and all(sorted(p.payload) == sorted(STORED_KEYS) for p in points)
        read = [PointPayload.from_dict(p.payload) for p in points]
        # Then it names its chunk, source, snapshot and text as the registry does
        rows = {r.id: r for r in svc.registry.chunk_rows(ids)}
        for p in read:
            row = rows[p.chunk_id]
            assert (p.document_id, p.source_id, p.kb, p.key) == (row.document_id, row.source_id, "kb1", "a.md")
            assert p.content_hash == row.content_hash and p.text == row.text
            assert p.snapshot_id == report.snapshot.id
        assert any(p.heading_path == ("Alpha", "Part") for p in read)
        # And the query path cites it through the same type
        evidence = svc.client.retrieve("alpha text about payloads", kb="kb1").evidence
        assert evidence and evidence[0].key == "a.md" and evidence[0].written_in == report.snapshot.id
    finally:
        svc.close()
