"""What a point carries of its chunk's parser metadata: no links (core.payload.UNSERVED_META), through the real
pipeline; a release that moves only a link's href rewrites no point."""

from __future__ import annotations

from pathlib import Path

from freshindex.core.payload import PointPayload, served_meta
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

_PAGE = """<html><head><title>Release notes</title></head><body><main>
<h1>Release notes</h1>
<h2>Fixes</h2>
<p>The planner no longer loses a join clause on partitioned tables
(<a href="https://example.org/c/{fix}">commit</a>, <a href="https://example.org/c/aa11">commit</a>).</p>
<h2>Upgrading</h2>
<p>{upgrade}</p>
</main></body></html>
"""


def _points(svc: Services) -> dict[str, PointPayload]:
    collection = svc.store.get_alias(svc.naming.alias("default"))
    assert collection is not None
    ids = svc.registry.live_chunk_ids_for_kb("default")
    return {p.id: PointPayload.from_dict(p.payload) for p in svc.store.retrieve(collection, ids)}


def test_points_carry_no_links_and_a_moved_href_rewrites_no_point(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    page = root / "notes.html"
    page.write_text(_PAGE.format(fix="bb22", upgrade="A dump and restore is not required for this release."))
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="default")
        assert sync_inline(svc, "docs").build_status == "built"
        rows = {r.id: r for r in svc.registry.chunk_rows(svc.registry.live_chunk_ids_for_kb("default"))}
        linked = [r for r in rows.values() if r.meta.get("links")]
        assert linked, "the registry keeps the links the parser read"
        first = _points(svc)
        assert all("links" not in p.meta for p in first.values())
        assert all(p.meta == served_meta(rows[i].meta) for i, p in first.items())

        # The next release moves one href and rewrites the other section's text.
        page.write_text(_PAGE.format(fix="cc33", upgrade="Run REINDEX on every GiST index after upgrading."))
        assert sync_inline(svc, "docs").build_status == "built"
        second = _points(svc)
        kept = linked[0].id
        assert kept in second, "the linked section's text did not change: same chunk"
        assert svc.registry.chunk_rows([kept])[0].meta["links"][0]["href"] == "https://example.org/c/cc33"
        assert second[kept].snapshot_id == first[kept].snapshot_id, "a moved href alone rewrote the point"
        changed = [i for i in second if i not in first]
        assert changed and all(second[i].snapshot_id != first[kept].snapshot_id for i in changed)
    finally:
        svc.close()
