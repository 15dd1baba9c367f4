"""Consecutive chunks of one section are joined in a packet by the registry's ordinals (the recheck's
``ChunkStatus.ordinal``): a point's payload does not carry its chunk's place, so without them the join by
ordinals never happened outside hand-made payloads.  Through the real pipeline (hashing embedder)."""

from __future__ import annotations

from pathlib import Path

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

_WORDS = ("quartz", "falcon", "meadow", "lantern", "cobalt", "harbor", "thistle", "ember", "orchid", "glacier")


def _paragraph(i: int) -> str:
    """A paragraph of its own words (so each chunk is findable) that all say 'spindle ratchet'."""
    w = _WORDS[i]
    return (f"The spindle ratchet {w} step {i} turns the {w} gear, then the {w} lever holds it while the "
            f"{w} spring settles; operators check the {w} mark before the next step.")


def test_consecutive_chunks_of_a_section_are_one_item(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    body = "\n\n".join(_paragraph(i) for i in range(6))
    (root / "guide.md").write_text(f"# Spindle guide\n\n## Ratchet procedure\n\n{body}\n")
    (root / "other.md").write_text("# Other\n\n## Notes\n\nNothing about the topic at all, only weather.\n")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 sources={"chunk_tokens": 64, "chunk_overlap_tokens": 0},
                                 context={"min_score": 0.0, "refusal": False}))
    try:
        svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="default")
        assert sync_inline(svc, "docs").build_status == "built"
        ids = svc.registry.live_chunk_ids_for_kb("default")
        status = svc.registry.chunk_status(ids)
        rows = {r.id: r for r in svc.registry.chunk_rows(ids)}
        assert all(status[i].ordinal == rows[i].ordinal for i in ids)
        guide = sorted((r for r in rows.values() if r.key == "guide.md"), key=lambda r: r.ordinal)
        assert len(guide) >= 3 and len({tuple(r.heading_path) for r in guide}) == 1, "one section, cut in parts"
        assert all(r.meta.get("prev") is None and r.meta.get("next") is None for r in guide), \
            "paragraphs, not parts of one split unit: only their ordinals say they are consecutive"

        packet = svc.client.retrieve("spindle ratchet quartz falcon step", kb="default", limit=5)
        on_guide = [e for e in packet.evidence if e.key == "guide.md"]
        assert on_guide
        joined = on_guide[0].text
        assert "quartz" in joined and "falcon" in joined, "the two consecutive chunks are one item"
        assert joined.index("quartz") < joined.index("falcon"), "in reading order"
    finally:
        svc.close()
