"""Consecutive chunks of one section are joined in a packet by the registry's ordinals (the recheck's
``ChunkStatus.ordinal``): a point's payload does not carry its chunk's place, so without them the join by
ordinals never happened outside hand-made payloads.  Through the real pipeline (hashing embedder)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import update

from freshindex.registry.schema import Document
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

_WORDS = ("quartz", "falcon", "meadow", "lantern", "cobalt", "harbor", "thistle", "ember", "orchid", "glacier",
          "saffron", "walnut", "pebble", "juniper", "marble", "willow")


def _paragraph(i: int) -> str:
    """A paragraph of its own words (so each chunk is findable) that all say 'spindle ratchet'."""
    w = _WORDS[i]
    return (f"The spindle ratchet {w} step {i} turns the {w} gear, then the {w} lever holds it while the "
            f"{w} spring settles; operators check the {w} mark before the next step.")


def test_consecutive_chunks_of_a_section_are_one_item(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    body = "\n\n".join(_paragraph(i) for i in range(len(_WORDS)))
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

        # Every chunk of the section matches: only a chunk next to one that took a slot rides free, so the
        # section is not pulled in whole: a fact question's quota is 2, 3 for the document that opens the order
        # with more, so at most 3 slots and their 6 neighbours of the 16.
        everything = svc.client.retrieve("spindle ratchet step gear lever spring operators mark", kb="default",
                                         limit=5)
        served = " ".join(e.text for e in everything.evidence if e.key == "guide.md")
        assert 3 <= sum(w in served for w in _WORDS) <= 9

        # A rollback (or swap, repair) clears the document's hash: its places are unknown until the next sync.
        with svc.registry.session() as s:
            s.execute(update(Document).where(Document.key == "guide.md").values(content_hash=None))
        assert all(status.ordinal is None for status in svc.registry.chunk_status([r.id for r in guide]).values())
    finally:
        svc.close()
