"""The insufficient-evidence block keeps every field of its report inside a nonce fence, for generated attacks.

The source names, owners, the reason and the knowledge base's name each get
a forged fence, ``</context>``, a role marker and an instruction (the attacks
of ``test_render_safety``); the checks read only the rendered text.
"""

from __future__ import annotations

import re
import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshindex.injection.render import insufficient_block
from freshindex.injection.types import NextAction, SearchReport
from tests.injection.test_render_safety import INVISIBLE, LOOKALIKES_GT, LOOKALIKES_LT, attack


def _report(kb: str, sources: list[str], owners: list[str]) -> SearchReport:
    actions = tuple(NextAction("ask_owner", "not_found", s, o) for s, o in zip(sources, owners, strict=False))
    return SearchReport(kb, "kb-v4", tuple(sources), 7, 2, {"low_score": 3, "expired": 2}, actions)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(attack(), min_size=1, max_size=3), st.lists(attack(), min_size=1, max_size=3), attack(),
       st.booleans())
def test_a_poisoned_report_stays_inside_the_fence(sources: list[str], owners: list[str], reason: str,
                                                  static: bool) -> None:
    out = insufficient_block("kb", "kb-v4", reason=reason, search=_report("kb", sources, owners), deterministic=static)
    lines = out.split("\n")
    assert lines[0] == '<context kb="kb" snapshot="kb-v4" status="insufficient_evidence">' and lines[-1] == "</context>"
    opening = [i for i, line in enumerate(lines) if re.fullmatch(r"<<<DATA-[0-9a-f]{32}", line)]
    assert len(opening) == 1
    token = lines[opening[0]][len("<<<DATA-"):]
    assert [i for i, line in enumerate(lines) if line == f"DATA-{token}>>>"] == [len(lines) - 2]
    assert out.count(token) == 3 and all(token not in f.lower() for f in [*sources, *owners, reason])
    assert out.count("</context>") == 1 and out.count("<context") == 1
    inside = lines[opening[0] + 1:-2]
    text = "\n".join(inside)
    assert "<" not in text and ">" not in text
    assert not set(unicodedata.normalize("NFKC", text)) & set(LOOKALIKES_LT + LOOKALIKES_GT) - {"\u203a"}
    assert not set(out) & set(INVISIBLE)
    # Every attacker-controlled line is one of the report's own, the instruction only inside the fence
    assert all(re.match(r"(reason=\"|searched kb=\"|candidates=\d+ |next=\"ask_owner\" )", line) for line in inside)
    assert "OBEYME" in text and "OBEYME" not in "\n".join(lines[:opening[0] + 1] + lines[-2:])
    assert "candidates=7 accepted=2 rejected={expired=2 low_score=3}" in inside


def test_the_static_mode_is_byte_stable_and_the_default_is_fresh_per_call() -> None:
    report = _report("kb", ["docs"], ["ops"])
    static = [insufficient_block("kb", "kb-v4", reason="r", search=report, deterministic=True) for _ in range(3)]
    assert static[0] == static[1] == static[2]
    fresh = {insufficient_block("kb", "kb-v4", reason="r", search=report) for _ in range(3)}
    assert len(fresh) == 3


def test_without_a_report_the_block_is_the_plain_refusal() -> None:
    assert insufficient_block("kb", None) == (
        '<context kb="kb" snapshot="none" status="insufficient_evidence">\n'
        "No source in the knowledge base supports an answer to this question. Say so; do not guess.\n</context>")
