"""bench.transfer on update corpora: what counts as a stale item served, the figures that count them, the held-out
refusal serving nothing, and an earlier report's corpora kept (no corpus, no index: folders and rows by hand)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import heldout, transfer

OLD_DOC = ("The renderer pads the event name to thirty characters so that the key value pairs line up in "
           "columns on every console line it writes out.")
KEPT = ("Processors are called in order with the logger, the method name and the event dictionary and each "
        "returns the dictionary the next one gets.")
NEW_DOC = ("The renderer pads the event name to twenty characters by default and the width can be given to the "
           "renderer's constructor as a keyword.")


def releases(tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "old", tmp_path / "new"
    for root in (old, new):
        (root / "docs").mkdir(parents=True)
    (old / "docs" / "dev.md").write_text(f"# Dev\n\n{OLD_DOC}\n\n{KEPT}\n")
    (new / "docs" / "dev.md").write_text(f"# Dev\n\n{NEW_DOC}\n\n{KEPT}\n")
    (old / "docs" / "gone.md").write_text("A page the update deleted.\n")
    (old / "page.html").write_text("<div role='main'><p>It is \u201cquoted\u201d here and stays the same across both "
                                   "releases of this manual page for sure.</p></div>")
    (new / "page.html").write_text("<div role='main'><p>It is \"quoted\" here and stays the same across both "
                                   "releases of this manual page for sure.</p></div>")
    return old, new


def ev(key: str, text: str) -> dict:
    return {"key": key, "chunk_id": f"{key}:{text[:6]}", "text": text}


def test_an_item_of_a_deleted_document_or_holding_removed_old_text_is_stale_and_kept_or_new_text_is_not(tmp_path):
    # Given a document changed by the update, one deleted, and a page whose quotes only changed typography
    stale = transfer.StaleCheck(*releases(tmp_path))
    # Then an item holding the removed sentence (laid out otherwise, in the source's folder) is stale
    assert stale(ev("/srv/repo/docs/dev.md", "Dev\n" + OLD_DOC.upper())) == "holds old-release text the update removed"
    # And an item of the deleted document is stale whatever its text
    assert stale(ev("docs/gone.md", "A page the update deleted.")) == "document deleted or moved by the update"
    # And neither the new text, the text both releases hold, nor a quote's typography makes an item stale
    assert stale(ev("docs/dev.md", NEW_DOC + " " + KEPT)) is None
    assert stale(ev("page.html", 'It is "quoted" here and stays the same across both releases of this manual')) is None


def test_a_run_across_the_seam_of_two_joined_chunks_is_not_old_text(tmp_path):
    # Given a term whose paragraph the old release followed with the next term, and the new with a note between
    old, new = tmp_path / "old", tmp_path / "new"
    para = "The alpha option sets how many widgets the tool builds before it stops and reports."
    for root, between in ((old, ""), (new, "New in version 3.3: the widgets are counted per target.\n")):
        root.mkdir()
        (root / "ref.md").write_text(f"ALPHA_OPTION\n{para}\n{between}ALPHA_OPTION_EXTRA\nAnother option.\n")
    stale = transfer.StaleCheck(old, new)
    # When the packet joins the term's chunk and its continuation, which repeats the term's heading line
    joined = f"ALPHA_OPTION\n{para}\nALPHA_OPTION\nNew in version 3.3: the widgets are counted per target."
    # Then the run across the seam ("... stops and reports alpha option") is not old text the item holds
    assert stale(ev("ref.md", joined)) is None
    # And the old adjacency inside one part still is
    assert stale(ev("ref.md", f"{para}\nALPHA_OPTION_EXTRA\nAnother option.")) == \
        "holds old-release text the update removed"


def row(qid: str, kind: str, stale5: list | None, *, hit: bool = True) -> dict:
    run = {"insufficient": False, "hit5": hit, "passage5": hit, "passage5_exact": hit, "passage5_strict": hit,
           "passage5_any_page": hit, "rr10": 1.0 if hit else 0.0, "rank10": 1 if hit else None, "ms5": 1.0,
           "ms10": 1.0, "prefix": True, "n10": 1, "distractor_above": False}
    if stale5 is not None:
        run["stale5"] = stale5
    return {"id": qid, "kind": kind, "on": dict(run, signals={}), "off": dict(run)}


def test_stale_items_and_code_questions_are_figures_and_a_corpus_indexed_once_has_no_stale_figure():
    item = {"rank": 2, "key": "docs/gone.md", "chunk_id": "c", "why": "document deleted or moved by the update"}
    rows = [row("c1", "code", [item]), row("c2", "code", [], hit=False), row("p1", "prose", [item, item])]
    got = transfer.figures(rows, "off")
    assert got["stale_served"] == 3 and got["code_hit_at_5"] == 0.5
    assert transfer.goals(got)["stale_served"] == "missed"
    once = transfer.figures([row("p1", "prose", None)], "off")
    assert once["stale_served"] is None and once["code_hit_at_5"] is None
    assert transfer.goals(once)["stale_served"] == "n/a" and transfer.goals(once)["code_hit_at_5"] == "n/a"


def test_a_question_the_held_out_refusal_refuses_serves_nothing_stale():
    item = {"rank": 1, "key": "docs/gone.md", "chunk_id": "c", "why": "document deleted or moved by the update"}
    rows = [row("p1", "prose", [item]), row("u1", "unanswerable", [item]), row("p2", "prose", [item])]
    heldout.held_label(rows, {"p1", "u1"})
    assert [r["held"]["stale5"] for r in rows] == [[], [], [item]]
    assert transfer.figures(rows, "held")["stale_served"] == 1


def test_an_earlier_reports_corpora_are_kept_with_their_figures_and_this_runs_replace_theirs(tmp_path):
    before = {"meta": {"date": "then", "commit": {"head": "abc"}, "command": "python -m bench.transfer"},
              "corpora": {"django": {"hit_at_5": 0.93, "held_out_by_kind": {"code": {"hit_at_5": 0.8}}},
                          "structlog_repo": {"hit_at_5": 0.1}},
              "leave_one_corpus_out": {"django": {"fitted_on": ["python311", "rmanuals"]}},
              "misses": {"django": {"counts": {}}}, "questions": {"django": []}}
    path = tmp_path / "transfer.json"
    path.write_text(json.dumps(before))
    res = {"corpora": {"structlog_repo": {"hit_at_5": 0.7}}, "leave_one_corpus_out": {}, "misses": {}, "questions": {}}
    got = transfer.merge_earlier(res, path)
    assert got["corpora"]["structlog_repo"]["hit_at_5"] == 0.7, "this run's figures, not the earlier ones"
    dj = got["corpora"]["django"]
    assert dj["hit_at_5"] == 0.93 and dj["code_hit_at_5"] == 0.8 and dj["stale_served"] is None
    assert dj["earlier_run"]["fit_pool"] == ["django", "structlog_repo"]
    assert dj["held_out_fitted_on"] == ["python311", "rmanuals"]
    assert got["misses"]["django"] == {"counts": {}} and got["leave_one_corpus_out"]["django"]["fitted_on"]


def test_who_wrote_the_questions_is_the_first_paragraph_of_writers_md(tmp_path, monkeypatch):
    golden = tmp_path / "bench" / "goldens" / "repo"
    golden.mkdir(parents=True)
    (golden / "WRITERS.md").write_text("# repo: notes\n\n**Who wrote it:** a helper, blind.\nIt saw only the corpus.\n\n"
                                       "## Later\nnot this\n")
    monkeypatch.setattr(transfer, "ROOT", tmp_path)
    assert transfer.questions_by("repo") == "Who wrote it: a helper, blind. It saw only the corpus."
    assert transfer.questions_by("other").startswith("not stated")


def test_an_update_corpus_holds_the_first_syncs_chunks_less_the_updates_tombstones_plus_its_additions():
    first = {"chunks_added": 100, "chunks_embedded": 98}
    assert transfer._chunks({"summary": first}) == 98
    assert transfer._chunks({"summary": first, "updated_to": "v2",
                             "update_summary": {"tombstones": 30, "chunks_added": 12}}) == 82
