"""Near-copies across documents: one evidence item, the others cited as its mirrors; which copy is canonical.

The grouping rules on fixed candidate lists (generated documents, no
corpus pages), then the packet, its rendering and its JSON through the real
pipeline (folder source, SQLite registry, Qdrant Edge, the hashing embedder).
"""

from __future__ import annotations

from pathlib import Path

from freshindex.injection.assemble import Candidate, assemble
from freshindex.injection.budget import ContextPolicy, QueryBudget, QueryType
from freshindex.injection.duplicates import hub_like
from freshindex.injection.types import ContextPacket, Evidence, Mirror
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

PASSAGE = ("The export job writes one archive per tenant every night, compresses it with zstd at level "
           "nineteen, and keeps the last fourteen archives in the cold bucket before pruning older ones.")


def cand(cid: str, key: str, score: float, text: str, *, title: str = "", path: tuple[str, ...] = (),
         date: str | None = None, page: int | None = None, prev: str | None = None,
         nxt: str | None = None) -> Candidate:
    ev = Evidence(n=0, chunk_id=cid, score=score, text=text, title=title or key, key=key, source_id="s",
                  heading_path=path, anchor="", page=page, doc_version=3, snapshot_id="kb-v2", written_in="kb-v1",
                  date=date)
    return Candidate(ev, f"doc:{key}", score, prev_id=prev, next_id=nxt)


def _fact(**row: int) -> ContextPolicy:
    return ContextPolicy(budgets={**ContextPolicy().budgets, QueryType.FACT: QueryBudget(**row)})


def test_a_near_copy_on_another_page_is_a_mirror_not_a_second_answer() -> None:
    # Given the same passage on two pages, one with a small edit, and an unrelated chunk
    edited = PASSAGE.replace("fourteen", "fifteen")
    got = assemble("How many archives does the export job keep?", [
        cand("a", "ops/export.md", 0.9, PASSAGE), cand("b", "howto/backups.md", 0.8, edited),
        cand("c", "ops/other.md", 0.7, "Workers restart after a deploy; nothing is lost in flight.")])
    # Then one item carries the passage and names the other page as its mirror
    assert [c.chunk_id for c in got.ranked] == ["a", "c"]
    assert got.ranked[0].evidence.also_in == (Mirror("howto/backups.md", 3),)
    assert got.dropped.get("duplicate") == 1


def test_the_newer_version_is_canonical_even_when_the_older_copy_ranks_first() -> None:
    q = "How many archives does the export job keep?"
    # Given an older release's copy of a page ranked above the current one (keys differ in a version folder)
    old, new = cand("old", "docs/v1/export.md", 0.9, PASSAGE), cand("new", "docs/v2/export.md", 0.8, PASSAGE + " Now.")
    [item] = assemble(q, [old, new]).ranked
    # Then the newer version is shown, at the group's best place, and the older one cited as its mirror
    assert item.chunk_id == "new" and item.evidence.also_in == (Mirror("docs/v1/export.md", 3),)
    assert item.score == 0.9
    # and so it is when the documents carry dates instead
    a = cand("a", "a.md", 0.9, PASSAGE, date="2024-01-01")
    b = cand("b", "b.md", 0.8, PASSAGE + " Now.", date="2025-06-01T00:00:00Z")
    assert assemble(q, [a, b]).ranked[0].chunk_id == "b"


REWRITTEN = ("Binary builds for Windows use the Rtools42 toolchain, installed under C:/rtools42 with its own "
             "make and compilers; older toolchains are no longer supported for package builds.")
OLDER = ("The binary distribution is built with the Rtools40 toolchain; put C:/rtools40/usr/bin on the PATH "
         "before the compilers so that its make is found first, and use a 64-bit shell.")


def test_an_older_release_ranks_after_the_current_one_when_its_text_was_rewritten() -> None:
    # Given a release's rewrite of a passage (not a near-copy) ranked below the older release's version of it,
    # and an unrelated current page in between
    q = "Which toolchain builds the binary distribution for Windows?"
    old, other = cand("old", "4.0.4/R-admin.pdf", 0.99, OLDER), cand("x", "4.2.2/R-FAQ.pdf", 0.9, PASSAGE)
    new, old_faq = cand("new", "4.2.2/R-admin.pdf", 0.89, REWRITTEN), cand("of", "4.0.4/R-FAQ.pdf", 0.5, PASSAGE[:40])
    got = assemble(q, [old, other, new, old_faq], policy=_fact(per_document=3, max_chunks=4))
    # Then every current item comes first, the superseded ones after them in their own order
    assert [c.chunk_id for c in got.ranked] == ["x", "new", "old", "of"]
    # And a question naming the older release answers from it (R 4.0 names 4.0.4): the current copy goes after
    named = assemble("Which toolchain built R 4.0 for Windows?", [new, old], policy=_fact(per_document=3, max_chunks=4))
    assert [c.chunk_id for c in named.ranked] == ["old", "new"]
    # And a year or a numbered folder is no release: last year's page of the same name keeps its place
    years = [cand("y1", "news/2023/index.md", 0.9, OLDER), cand("y2", "news/2024/index.md", 0.8, REWRITTEN)]
    assert [c.chunk_id for c in assemble(q, years, policy=_fact(per_document=3, max_chunks=4)).ranked] == ["y1", "y2"]
    # And an older release with no newer copy in the order keeps its place
    alone = assemble(q, [old, other], policy=_fact(per_document=3, max_chunks=4))
    assert [c.chunk_id for c in alone.ranked] == ["old", "x"]


def test_a_hub_list_entry_does_not_outrank_the_page_it_summarises() -> None:
    q = "Which Widget 4.1 release fixed the archive path traversal?"
    hub = cand("hub", "news/advisories.md", 1.1,
               "Archive path traversal in the unpack helper. Details\n\nAffected\n\n- Widget 4.2 (fix)\n"
               "- Widget 4.1 (fix)\n- Widget 3.9 (fix)",
               title="All advisories", path=("All advisories", "2024", "Archive path traversal"))
    body = ("The unpack helper let crafted member names write outside the target folder. It now rejects "
            "absolute names and parent references before extracting anything.")
    detail = [cand(f"n{v}", f"notes/{v}.md", s, f"Widget {v} fixes one security issue.\n\nArchive path traversal "
                   f"in the unpack helper\n\n{body}", title=f"Widget {v} release notes")
              for v, s in (("4.2.7", 0.95), ("4.1.12", 0.93), ("3.9.30", 0.9))]
    assert hub_like(hub.text) and not hub_like(detail[0].text)
    got = assemble(q, [hub, *detail, cand("x", "misc.md", 0.5, "Unrelated notes on logging levels.")])
    # Then the release note of the series the question names answers, at the hub's place; the hub and the
    # other releases' copies are its mirrors
    first = got.ranked[0]
    assert first.chunk_id == "n4.1.12" and first.score == 1.1
    assert {m.key for m in first.evidence.also_in} == {"news/advisories.md", "notes/4.2.7.md", "notes/3.9.30.md"}
    assert [c.chunk_id for c in got.ranked] == ["n4.1.12", "x"]


def test_a_short_shared_phrase_does_not_make_two_chunks_copies() -> None:
    a = cand("a", "a.md", 0.9, "Set the timeout.")
    b = cand("b", "b.md", 0.8, "Set the timeout.\n\nThen restart.")
    got = assemble("timeout?", [a, b])
    assert all(not c.evidence.also_in for c in got.ranked)


def test_split_parts_ride_with_the_picked_part_and_the_join_spans_their_pages() -> None:
    # Given a unit cut in three parts over pages 4-5 and a quota of one chunk per document
    parts = [cand("p1", "m.pdf", 0.9, "Stack checking can be turned off", page=4, nxt="p2"),
             cand("p2", "m.pdf", 0.5, "by setting the limit to minus one", page=5, prev="p1", nxt="p3"),
             cand("p3", "m.pdf", 0.4, "before the engine starts.", page=5, prev="p2"),
             cand("o", "n.pdf", 0.6, "Signals are handled by the engine.", page=9)]
    got = assemble("stack checking", parts, policy=_fact(max_chunks=2, per_document=1))
    # Then the whole unit is one item citing pages 4-5, and the other document keeps its slot
    assert [c.chunk_id for c in got.ranked] == ["p1", "o"] and got.joined == 2
    e = got.ranked[0].evidence
    assert "minus one" in e.text and "engine starts" in e.text and (e.page, e.page_end) == (4, 5)


def test_the_subject_document_keeps_one_chunk_past_the_quota() -> None:
    # Given an order that opens with three chunks of one document (quota two), then other documents
    cands = [cand(f"s{i}", "subject.md", 0.9 - i / 10, f"Subject part {i} says thing {i} about the subject.")
             for i in range(3)] + [cand("o1", "o1.md", 0.5, "Other one."), cand("o2", "o2.md", 0.4, "Other two.")]
    got = assemble("q", cands, policy=_fact(max_chunks=5, per_document=2))
    assert [c.chunk_id for c in got.ranked] == ["s0", "s1", "s2", "o1", "o2"]
    # but a document that does not open the order keeps the plain quota
    mixed = [cand("o1", "o1.md", 0.95, "Other one."), *cands[:3], cands[4]]
    got = assemble("q", mixed, policy=_fact(max_chunks=5, per_document=2))
    assert [c.chunk_id for c in got.ranked] == ["o1", "s0", "s1", "o2"]


def test_the_packet_and_its_rendering_cite_the_mirror(tmp_path: Path) -> None:
    # Given two documents in a knowledge base holding the same passage with a small edit
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "export.md").write_text(f"# Export job\n\n{PASSAGE}\n")
    (docs / "backups.md").write_text(f"# Backups\n\n{PASSAGE.replace('nineteen', 'twenty')}\n")
    (docs / "deploy.md").write_text("# Deploys\n\nWorkers restart after a deploy; queued tasks wait for them.\n")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("docs", kind="folder", location=str(docs), owner="o@example.com", kb="default")
        assert sync_inline(svc, "docs").build_status == "built"
        packet = svc.client.retrieve("How many archives does the export job keep in the cold bucket?", kb="default")
    finally:
        svc.close()
    # Then one evidence item holds the passage, the other document is its mirror, never a second answer
    holding = [e for e in packet.evidence if "cold bucket" in e.text]
    assert len(holding) == 1 and not packet.insufficient
    [mirror] = holding[0].also_in
    assert {holding[0].key, mirror.key} == {"export.md", "backups.md"} and mirror.doc_version >= 1
    # and the rendered entry names it, and the JSON carries it to the thin client
    assert f'also_in="{mirror.key}#{mirror.anchor} (v{mirror.doc_version})"' in packet.rendered
    again = ContextPacket.from_dict(packet.as_dict())
    assert [e.also_in for e in again.evidence] == [e.also_in for e in packet.evidence]
