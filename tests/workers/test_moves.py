"""Vectors survive moves, renames and renumbering, through the real pipeline.

Given a folder with a Python package, a TypeScript file and Markdown pages
(one with numbered sections), synced once; when the code moves under
``src/``, a page is renamed and a section is renumbered, then the next syncs
embed 0 chunks: neither the embedded text nor the vector cache key depends
on the file path or on section numbers.  The new path is in the payload.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.conftest import EXAMPLES


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    # A move is a delete plus an add: the deletion guard would hold most of this tree's documents.
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                      sync={"max_deletion_share": 1.0}))
    yield services
    services.close()


MANUAL = """# Operations manual

## 3.1 Preparation

Announce the window in the release channel and freeze merges.

## 3.2 Rollback

Run `migrate down 1` only if the migration has not been committed to the ledger.

### 3.2.1 Verification

Check the ledger balance after the rollback and page the owner on a mismatch.
"""


def _tree(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    shutil.copy(EXAMPLES / "kb/code/retry.py", root / "pkg/retry.py")
    shutil.copy(EXAMPLES / "kb/code/ratelimit.ts", root / "pkg/ratelimit.ts")
    (root / "docs").mkdir()
    (root / "docs/manual.md").write_text(MANUAL)
    (root / "docs/untitled.md").write_text("Keep raw events for 13 months, then delete them.\n")


def test_a_moved_renamed_or_renumbered_file_embeds_nothing(svc: Services, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _tree(root)
    svc.registry.add_source("repo", kind="folder", location=str(root), owner="eng", kb="default")
    first = sync_inline(svc, "repo")
    assert first.run.status == "succeeded", first.errors
    assert first.run.summary["chunks_embedded"] >= 8

    # A release that moves its package under src/ and renames a page (title from its file name).
    (root / "src").mkdir()
    shutil.move(root / "pkg", root / "src/pkg")
    (root / "docs/untitled.md").rename(root / "docs/retention.md")
    moved = sync_inline(svc, "repo")
    assert moved.run.status == "succeeded", moved.errors
    assert moved.run.summary["chunks_embedded"] == 0
    keys = {r.key for r in svc.registry.chunk_rows(sorted(svc.registry.live_chunk_ids_for_kb("default")))}
    assert {"src/pkg/retry.py", "src/pkg/ratelimit.ts", "docs/retention.md"} <= keys  # the path is in the payload
    assert not {"pkg/retry.py", "docs/untitled.md"} & keys

    # Chapter 3 becomes chapter 4.
    (root / "docs/manual.md").write_text(MANUAL.replace("## 3.", "## 4.").replace("### 3.", "### 4."))
    renumbered = sync_inline(svc, "repo")
    assert renumbered.run.summary["documents_changed"] == 1
    assert renumbered.run.summary["chunks_embedded"] == 0
    rows = [r for r in svc.registry.chunk_rows(sorted(svc.registry.live_chunk_ids_for_kb("default")))
            if r.key == "docs/manual.md"]
    rollback = next(r for r in rows if "migrate down 1" in r.text)
    assert rollback.heading_path == ("Operations manual", "Rollback")
    assert rollback.meta["numbered_heading_path"] == ["Operations manual", "4.2 Rollback"]  # citations keep it


# -- moves by similarity: a file that changed on its way to a new key -----------------------------------------------

def _guide(topic: str, sections: int = 6, edited: int | None = None) -> str:
    """A Markdown page of ``sections`` sections about ``topic``, each its own paragraph; ``edited``: that
    section's paragraph rewritten (what a release does to a page it also moves)."""
    parts = [f"# {topic.title()} guide\n"]
    for i in range(sections):
        body = (f"Step {i} of the {topic} procedure: check the {topic} queue depth, drain shard {i} and record "
                f"the {topic} ledger offset {i * 37} before the next window opens.")
        if i == edited:
            body = f"Step {i} changed in this release: the {topic} shard {i} is drained by the operator on call."
        parts.append(f"## Part {i}\n\n{body}\n")
    return "\n".join(parts)


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Services]:
    """The embedded default with the deletion guard at its defaults: a move must not need a looser one."""
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                      context={"refusal_calibration": False}))
    yield services
    services.close()


def _outcomes(svc: Services, run_id: int) -> dict[str, tuple[str, int, int]]:
    """Per key of a run: (outcome, chunks embedded, chunks reused)."""
    from sqlalchemy import select

    from freshindex.registry.schema import DocumentResult

    with svc.registry.session() as s:
        return {r.key: (r.outcome, r.chunks_embedded, r.chunks_reused)
                for r in s.scalars(select(DocumentResult).where(DocumentResult.sync_run_id == run_id))}


def test_files_moved_and_edited_on_a_folder_are_moves_that_embed_only_the_edit(guarded: Services,
                                                                             tmp_path: Path) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    topics = ["billing", "search", "ingest", "alerts"]
    for t in topics:
        (root / f"{t}.md").write_text(_guide(t))
    guarded.registry.add_source("kb", kind="folder", location=str(root), owner="t", kb="default")
    assert sync_inline(guarded, "kb").run.status == "succeeded"

    # Three of four pages move into a folder under new names, each with one section rewritten: as
    # deletions that is 75 % of the source, held; as moves it is an ordinary release.
    (root / "runbooks").mkdir()
    for t in topics[:3]:
        (root / f"{t}.md").unlink()
        (root / "runbooks" / f"{t}-runbook.md").write_text(_guide(t, edited=2))
    report = sync_inline(guarded, "kb")
    d = report.as_dict()
    assert report.run.status == "succeeded", d["held_reason"]
    assert d["moves"] == [{"from": f"{t}.md", "to": f"runbooks/{t}-runbook.md"} for t in sorted(topics[:3])]
    assert d["documents"] == {**d["documents"], "moved": 3, "added": 3, "deleted": 0}
    outcomes = _outcomes(guarded, report.run.id)
    for t in topics[:3]:
        assert outcomes[f"{t}.md"][0] == "moved"
        outcome, embedded, reused = outcomes[f"runbooks/{t}-runbook.md"]
        assert (outcome, embedded) == ("added", 1) and reused >= 4  # the rewritten section only
    assert d["chunks_embedded"] == 3
    keys = {r.key for r in guarded.registry.chunk_rows(guarded.registry.live_chunk_ids_for_kb("default"))}
    assert keys == {"alerts.md"} | {f"runbooks/{t}-runbook.md" for t in topics[:3]}


def test_a_deletion_and_an_unrelated_addition_of_the_same_name_are_not_a_move(guarded: Services,
                                                                              tmp_path: Path) -> None:
    root = tmp_path / "kb"
    (root / "team-a").mkdir(parents=True)
    (root / "team-a/notes.md").write_text(_guide("billing"))
    (root / "index.md").write_text(_guide("search"))
    guarded.registry.add_source("kb", kind="folder", location=str(root), owner="t", kb="default")
    assert sync_inline(guarded, "kb").run.status == "succeeded"

    (root / "team-a/notes.md").unlink()
    (root / "team-b").mkdir()
    (root / "team-b/notes.md").write_text("# Notes\n\nThe offsite is in Lisbon; book the train before May.\n"
                                          "Bring the quarterly plan printed, and the badge for the venue.\n")
    report = sync_inline(guarded, "kb")
    d = report.as_dict()
    assert d["moves"] == [] and d["documents"]["moved"] == 0
    assert d["documents"]["deleted"] == 1 and d["documents"]["added"] == 1
    assert _outcomes(guarded, report.run.id)["team-a/notes.md"][0] == "deleted"


def test_an_s3_release_that_moves_and_edits_objects_is_not_held(tmp_path: Path, s3_server: str) -> None:
    from freshindex.workers.connectors.s3 import s3_client

    client = s3_client(endpoint_url=s3_server, region="us-east-1", access_key_id="k", secret_access_key="s")
    client.create_bucket(Bucket="kb-moves")
    topics = ["billing", "search", "ingest", "alerts"]
    for t in topics:
        client.put_object(Bucket="kb-moves", Key=f"docs/v1/{t}.md", Body=_guide(t).encode())
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 context={"refusal_calibration": False},
                                 sources={"s3": {"endpoint_url": s3_server, "access_key_id": "k",
                                                 "secret_access_key": "s"}}))
    try:
        svc.registry.add_source("hb", kind="s3", location="s3://kb-moves/docs", owner="t", kb="default")
        assert sync_inline(svc, "hb").run.status == "succeeded"
        for t in topics:  # every object moves to the next release's prefix, with one section rewritten
            client.delete_object(Bucket="kb-moves", Key=f"docs/v1/{t}.md")
            client.put_object(Bucket="kb-moves", Key=f"docs/v2/{t}.md", Body=_guide(t, edited=4).encode())
        report = sync_inline(svc, "hb")
        d = report.as_dict()
        assert report.run.status == "succeeded", d["held_reason"]
        assert sorted((m["from"], m["to"]) for m in d["moves"]) == [(f"v1/{t}.md", f"v2/{t}.md")
                                                                    for t in sorted(topics)]
        assert d["documents"]["deleted"] == 0 and d["chunks_embedded"] == len(topics)
    finally:
        svc.close()


def test_a_web_page_moved_to_a_new_url_with_an_edit_is_a_move(tmp_path: Path) -> None:
    from bench.docsite import DocSite, serve

    site_root = tmp_path / "site"
    site_root.mkdir()

    def page(title: str, body: str) -> str:
        return f"<html><head><title>{title}</title></head><body><main>{body}</main></body></html>"

    def publish(pages: dict[str, str]) -> None:
        links = "".join(f'<li><a href="{name}">{name}</a></li>' for name in sorted(pages))
        (site_root / "index.html").write_text(page("Index", f"<h1>Guides</h1><ul>{links}</ul>"))
        for name, text in pages.items():
            html = "".join(f"<h2>{line[3:]}</h2>" if line.startswith("## ") else f"<p>{line}</p>"
                           for line in text.splitlines()[1:] if line.strip())
            (site_root / name).write_text(page(name, f"<h1>{name}</h1>{html}"))

    publish({"billing.html": _guide("billing"), "search.html": _guide("search")})
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 context={"refusal_calibration": False}))
    try:
        with serve(DocSite(root=site_root, mount="/docs/")) as site:
            svc.registry.add_source("site", kind="web", location=f"{site.base}/docs/", owner="t", kb="default",
                                    setup=SourceSetup(options={"prefix": "/docs/", "rate_limit": "1000/second"}))
            assert sync_inline(svc, "site").run.status == "succeeded"
            (site_root / "billing.html").unlink()
            publish({"billing-guide.html": _guide("billing", edited=1), "search.html": _guide("search")})
            report = sync_inline(svc, "site")
        d = report.as_dict()
        assert report.run.status == "succeeded", d["held_reason"]
        assert d["moves"] == [{"from": f"{site.base}/docs/billing.html", "to": f"{site.base}/docs/billing-guide.html"}]
        assert d["documents"]["deleted"] == 0
        # The plan compared the page the crawl read, and the document task indexed those same bytes: the
        # moved page was requested once, by the crawl (move finding borrows the body, never re-fetches).
        assert site.paths().count("/docs/billing-guide.html") == 1, site.paths()
    finally:
        svc.close()


def test_pairing_is_one_to_one_best_similarity_first_and_ties_go_by_key() -> None:
    from freshindex.workers.similarity import match_moves

    scores = {("new/a.md", "old/a.md"): 0.9, ("new/a.md", "x/a.md"): 0.95, ("other/a.md", "old/a.md"): 0.9,
              ("other/a.md", "x/a.md"): 0.6, ("b.md", "c.md"): 0.7, ("d.md", "c.md"): 0.7}
    found = match_moves({"new/a.md": 100, "other/a.md": 100, "b.md": 100, "d.md": 100},
                        {"old/a.md": 100, "x/a.md": 100, "c.md": 100}, lambda n, o: scores.get((n, o), 0.1))
    # x/a.md goes to its best (0.95); old/a.md then to the other candidate; c.md ties: the first new key.
    assert [(m.new, m.old, m.by) for m in found] == [("new/a.md", "x/a.md", "basename"),
                                                     ("other/a.md", "old/a.md", "basename"),
                                                     ("b.md", "c.md", "size")]
    # The same answer whatever order the keys come in.
    again = match_moves({"d.md": 100, "b.md": 100, "other/a.md": 100, "new/a.md": 100},
                        {"c.md": 100, "x/a.md": 100, "old/a.md": 100}, lambda n, o: scores.get((n, o), 0.1))
    assert again == found


def test_only_plausible_pairs_are_compared_and_never_more_than_the_cap() -> None:
    from freshindex.workers.similarity import match_moves

    asked: list[tuple[str, str]] = []

    def score(n: str, o: str) -> float:
        asked.append((n, o))
        return 0.8

    new = {"a/guide.md": 10, "handbook.md": 1200, "huge.md": 50_000, "guide.txt": 1000, "tiny.md": 100, "git.md": 0}
    match_moves(new, {"guide.md": 1000}, score)
    # Same basename whatever its size; else the same suffix and a size that allows 50 %; unknown sizes: name only.
    assert asked == [("a/guide.md", "guide.md")]  # it scored 0.8: a move, nothing else compared
    asked.clear()
    match_moves(new, {"guide.md": 1000}, lambda n, o: score(n, o) - 0.5)
    assert asked == [("a/guide.md", "guide.md"), ("handbook.md", "guide.md")]
    asked.clear()
    many = {f"d{i}/guide.md": 1000 for i in range(50)}
    assert len(match_moves(many, {f"e{i}/guide.md": 1000 for i in range(50)}, score, max_comparisons=7)) <= 7
    assert len(asked) == 7

    # A site restructured wholesale: 5,000 pages gone, 5,000 unrelated ones new, all of one size, one name.
    import time

    for new_name, old_name in (("{i}.md", "page-{i}.md"), ("index.md", "index.md")):  # the size pass, the name pass
        asked.clear()
        started = time.perf_counter()
        match_moves({f"new{i}/" + new_name.format(i=i): 1000 for i in range(5000)},
                    {f"old{i}/" + old_name.format(i=i): 1000 for i in range(5000)}, lambda n, o: score(n, o) - 0.5)
        # 0.1 s here; 25 M pairs unbounded (minutes): a wide margin for a loaded machine
        assert len(asked) == 200 and time.perf_counter() - started < 10.0


def test_the_planner_fetches_only_plausible_candidates_through_the_run_s_reader(guarded: Services,
                                                                               tmp_path: Path) -> None:
    import dataclasses

    from freshindex.workers.connectors.folder import FolderConnector
    from freshindex.workers.planner import plan_sync

    root = tmp_path / "kb"
    root.mkdir()
    (root / "guide.md").write_text(_guide("billing"))
    (root / "keep.md").write_text(_guide("search"))
    guarded.registry.add_source("kb", kind="folder", location=str(root), owner="t", kb="default")
    assert sync_inline(guarded, "kb").run.status == "succeeded"

    fetched: list[tuple[int | None, str]] = []

    class Counting(FolderConnector):
        """Records each fetch with the run it reads for (None: the process-wide connector)."""

        run: int | None = None

        def for_run(self, run_id: int) -> Counting:
            reader = Counting(root, max_bytes=10_000_000)
            reader.run = run_id
            return reader

        def fetch(self, key: str) -> bytes:
            fetched.append((self.run, key))
            return super().fetch(key)

    (root / "guide.md").unlink()
    (root / "handbook.md").write_text(_guide("billing", edited=3))  # the move: same suffix, similar size
    (root / "huge.md").write_text(_guide("billing") * 20)  # the same text and more, but 20 times the size
    (root / "guide.txt").write_text(_guide("billing", edited=5))  # another suffix: another parser
    ctx = dataclasses.replace(guarded.pipeline, connector_for=lambda _s: Counting(root, max_bytes=10_000_000))
    plan = plan_sync(ctx, "kb")
    assert fetched == [(plan.run_id, "handbook.md")]  # through the run's reader, and nothing implausible
    assert guarded.registry.get_sync_run(plan.run_id).summary["moves"] == [{"from": "guide.md", "to": "handbook.md"}]
    docs = guarded.registry.documents_for_source("kb")
    assert docs["guide.md"].state == "deleted" and plan.deleted == 0  # staged as moved, not as a deletion


def test_move_finding_stops_at_its_deadline_whatever_is_left_of_the_cap() -> None:
    from freshindex.workers.similarity import match_moves

    # Given candidates that each take 10 s to read (a clock the test moves) and a 25 s budget
    now = [0.0]
    asked: list[str] = []

    def slow(new_key: str, old_key: str) -> float:
        asked.append(new_key)
        now[0] += 10.0
        return 0.1  # never a move: every pair is worth trying

    match_moves({f"n{i}/guide.md": 100 for i in range(20)}, {f"o{i}/guide.md": 100 for i in range(20)}, slow,
                max_comparisons=200, deadline=25.0, clock=lambda: now[0])
    # Then three pairs were scored (at 0, 10 and 20 s) and none after the deadline
    assert len(asked) == 3
