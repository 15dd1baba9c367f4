"""bench.versions' scoring rules (no corpus, no index: the packets are written by hand)."""

from __future__ import annotations

import types

from bench import transfer, versions

PDF = transfer.Corpus("v", types.SimpleNamespace(OLD_DIR="4.0.4"), "test", pdf=True)
Q = {"id": "q", "kind": "prose", "page": "4.2.2/R-admin.pdf#page=30", "passage": "the first library of a normal R session"}


def ev(key: str, page: int, text: str = "", also_in: tuple[str, ...] = ()) -> dict:
    return {"key": key, "chunk_id": f"{key}:{page}", "score": 0.5, "page": page, "page_end": None, "ocr": False,
            "text": text, "also_in": list(also_in)}


def packet(*items: dict) -> dict:
    return {"ms": 1.0, "insufficient": False, "reason": None, "why": None, "signals": None, "evidence": list(items)}


def test_an_older_release_item_before_the_page_is_counted_and_after_it_is_not():
    # Given the 4.0.4 copy of the page ranked first, then the 4.2.2 page
    above = packet(ev("4.0.4/R-admin.pdf", 30), ev("4.2.2/R-admin.pdf", 30, Q["passage"]))
    got = versions.judge(PDF, Q, above, above)
    # Then the older copy stands above the canonical one, and the 4.2.2 item is still the hit at rank 2
    assert got["older_above"] and got["older_rank10"] == 1 and got["rank10"] == 2 and got["older_in_top5"] == 1
    # And in the other order it does not
    below = packet(ev("4.2.2/R-admin.pdf", 30, Q["passage"]), ev("4.0.4/R-admin.pdf", 30))
    assert not versions.judge(PDF, Q, below, below)["older_above"]
    # And with the page absent, any older item is above it
    absent = packet(ev("4.0.4/R-admin.pdf", 31))
    assert versions.judge(PDF, Q, absent, absent)["older_above"]


def test_an_older_copy_is_a_mirror_only_when_the_item_on_the_page_cites_it():
    cites = packet(ev("4.2.2/R-admin.pdf", 30, Q["passage"], also_in=("4.0.4/R-admin.pdf",)))
    assert versions.judge(PDF, Q, cites, cites)["cited_as_mirror"]
    # An item on another page citing the older copy, or the page citing a 4.2.2 sibling, does not count
    other = packet(ev("4.2.2/R-admin.pdf", 12, also_in=("4.0.4/R-admin.pdf",)),
                   ev("4.2.2/R-admin.pdf", 30, Q["passage"], also_in=("4.2.2/R-FAQ.pdf",)))
    assert not versions.judge(PDF, Q, other, other)["cited_as_mirror"]


def test_figures_split_kept_and_changed_passages_and_judge_the_goals():
    good = packet(ev("4.2.2/R-admin.pdf", 30, Q["passage"], also_in=("4.0.4/R-admin.pdf",)))
    bad = packet(ev("4.0.4/R-admin.pdf", 30), ev("4.2.2/R-admin.pdf", 30, Q["passage"]))
    rows = [{"id": "a", "passage_in_older": True, "on": versions.judge(PDF, Q, good, good)},
            {"id": "b", "passage_in_older": False, "on": versions.judge(PDF, Q, bad, bad)}]
    f = versions.figures(rows)
    assert f["questions"] == 2 and f["older_above_canonical"] == 1 and f["cited_as_mirror"] == 1
    assert f["kept"]["older_above_canonical"] == 0 and f["changed"]["older_above_canonical"] == 1
    assert f["older_items_top5"] == round(1 / 3, 4) and f["mrr_at_10"] == 0.75
    assert f["goals"]["older_above_canonical"] == "missed" and f["goals"]["hit_at_5"] == "met"


def test_each_pair_asks_the_newer_release_golden_questions_moved_into_its_directory():
    from bench.corpora import python311, python_versions, rmanuals, rmanuals_versions

    for pair, single in ((rmanuals_versions, rmanuals), (python_versions, python311)):
        asked = pair.load_questions()
        answerable = [q for q in single.load_questions() if q["kind"] != "unanswerable"]
        # Every answerable golden question, nothing else, its page (and distractor pages) under the newer release
        assert [q["id"] for q in asked] == [q["id"] for q in answerable]
        assert all(q["page"].startswith(pair.NEW_DIR + "/") for q in asked)
        assert all(p.startswith(pair.NEW_DIR + "/") for q in asked for p in q.get("distractor_pages", ()))
        # and moved back it is the golden question, unchanged
        assert [pair._unprefixed(q) for q in asked] == answerable
        assert versions.corpus("rmanuals" if pair is rmanuals_versions else "python").module is pair
