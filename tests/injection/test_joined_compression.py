"""A joined item cut to fit a budget keeps the chunk that matched, not the context glued before it."""

from __future__ import annotations

from freshindex.injection.budget import ContextPolicy
from freshindex.injection.context import compose
from tests.injection.test_assembly import WORDPIECE, cand


def _sentences(word: str, n: int) -> str:
    return " ".join(f"The {word} step {i} is described here in some detail." for i in range(n))


def test_a_joined_item_over_the_budget_is_cut_from_its_matched_chunk_on() -> None:
    before = cand("p", "d1", 0.2, _sentences("preamble", 60), ordinal=3)  # rides along: the chunk before
    matched = cand("m", "d1", 0.9, "Set retries to 7 for the ratchet. " + _sentences("ratchet", 60), ordinal=4)
    pol = ContextPolicy(window_tokens=4000, default_share=0.1, token_margin=0.0)
    packet = compose("ratchet retries", "kb", "kb-v2", [matched, before], policy=pol, query_type="fact",
                     tokenizer=WORDPIECE)
    assert WORDPIECE.count(packet.rendered) <= 400
    item = next(e for e in packet.evidence if e.chunk_id in {"p", "m"})
    assert "Set retries to 7 for the ratchet." in item.text, "the chunk that matched is kept"
    assert "preamble step 0" not in item.text, "the context before it went first"
    assert item.text.startswith("[…] ") and item.text.endswith(". […]")


def test_a_joined_item_whose_first_part_matched_is_cut_as_before() -> None:
    matched = cand("m", "d1", 0.9, "Set retries to 7 for the ratchet. " + _sentences("ratchet", 60), ordinal=4)
    after = cand("n", "d1", 0.2, _sentences("epilogue", 60), ordinal=5)
    pol = ContextPolicy(window_tokens=4000, default_share=0.1, token_margin=0.0)
    packet = compose("ratchet retries", "kb", "kb-v2", [matched, after], policy=pol, query_type="fact",
                     tokenizer=WORDPIECE)
    item = next(e for e in packet.evidence if e.chunk_id in {"m", "n"})
    assert item.text.startswith("Set retries to 7 for the ratchet.") and item.text.endswith(". […]")


def _table_part(cid: str, score: float, rows: range, prev: str | None, nxt: str | None) -> object:
    body = "\n".join(f"| row{i} | {'MATCH' if i == 40 else 'filler'} value {i} described at length |" for i in rows)
    return cand(cid, "d1", score, "| key | value |\n|---|---|\n" + body, prev=prev, nxt=nxt)


def test_a_table_cut_from_a_later_part_keeps_its_header_and_the_matched_row() -> None:
    # Given a table split in three parts (each repeats the header), the last part the strongest
    x = _table_part("x", 0.2, range(0, 30), None, "y")
    y = _table_part("y", 0.3, range(30, 40), "x", "z")
    z = _table_part("z", 0.9, range(40, 70), "y", None)
    pol = ContextPolicy(window_tokens=4000, default_share=0.1, token_margin=0.0)
    packet = compose("MATCH value", "kb", "kb-v2", [z, y, x], policy=pol, query_type="fact", tokenizer=WORDPIECE)
    item = next(e for e in packet.evidence if e.chunk_id in {"x", "y", "z"})
    # Then the cut starts at the strongest part's first row, under the table's header, with no marker row
    assert item.text.startswith("| key | value |\n|---|---|\n| row40 | MATCH value 40")
    assert "[…] |" not in item.text and "row0 " not in item.text
