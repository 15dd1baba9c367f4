"""The coverage reranker ranks the parts of one split unit as that unit, in reading order."""

from __future__ import annotations

from freshindex.injection.assemble import Candidate, assemble
from freshindex.injection.budget import ContextPolicy, QueryBudget, QueryType
from freshindex.injection.coverage import coverage_reranker
from freshindex.injection.types import Evidence


def cand(cid: str, doc: str, text: str, *, prev: str | None = None, nxt: str | None = None, fused: float = 0.5,
         path: tuple[str, ...] = ("Reference", "select_related()")) -> Candidate:
    ev = Evidence(n=0, chunk_id=cid, score=0.5, text=text, title="QuerySet API", key=f"ref/{doc}.html",
                  source_id="s", heading_path=path, anchor="a", page=None, doc_version=1, snapshot_id="kb-v2",
                  written_in="kb-v1")
    return Candidate(ev, doc, fused, prev_id=prev, next_id=nxt)


WEIGHTS = {"select_related": 3.0, "select": 1.0, "related": 1.0}
Q = "What does select_related do?"


def _entry() -> list[Candidate]:
    # One entry cut in three linked parts; the fused order puts its continuation parts first.
    return [
        cand("p3", "querysets", "select_related(*fields)\nYou can also refer to the reverse direction.",
             prev="p2", fused=0.9),
        cand("p2", "querysets", "select_related(*fields)\nHere is the standard lookup, hitting the database.",
             prev="p1", nxt="p3", fused=0.8),
        cand("other", "admin", "ModelAdmin.list_select_related tells the admin to use select_related.", fused=0.7),
        cand("p1", "querysets", "select_related(*fields)\nReturns a QuerySet that will follow foreign keys.",
             nxt="p2", fused=0.6),
    ]


def test_parts_of_one_unit_share_its_best_position_and_come_in_reading_order() -> None:
    pool = _entry()
    scores = coverage_reranker(WEIGHTS)(Q, pool)
    by = dict(zip([c.chunk_id for c in pool], scores, strict=True))
    # Given equal coverage, the first part (fused 4th) now outranks its continuations (fused 1st and 2nd)
    assert by["p1"] > by["p2"] > by["p3"]
    # and the other document keeps the slot the fusion gave it (the reranker orders within a document only)
    assert by["p2"] > by["other"] > by["p3"]


def test_under_a_quota_of_two_the_definition_and_its_next_part_are_selected_and_joined() -> None:
    row = QueryBudget(max_chunks=3, per_document=2)
    pol = ContextPolicy(budgets={**ContextPolicy().budgets, QueryType.FACT: row})
    got = assemble(Q, _entry(), policy=pol, query_type="fact", reranker=coverage_reranker(WEIGHTS))
    first = got.ranked[0]
    assert first.text.startswith("select_related(*fields)\nReturns a QuerySet")  # the definition leads
    assert "standard lookup" in first.text and got.joined == 2  # its neighbour parts folded into it
    # the unit's parts ride with the picked part (they take no slot of the quota): the entry comes whole
    assert "reverse direction" in first.text


def test_unlinked_candidates_keep_the_fusion_order_prior() -> None:
    pool = [cand("a", "d1", "select_related here", path=("A",)), cand("b", "d2", "select_related there", path=("B",))]
    a, b = coverage_reranker(WEIGHTS)(Q, pool)
    assert a - b > 0.09  # 0.2 / 1 - 0.2 / 2: no unit, no change
