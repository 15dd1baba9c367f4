"""No single question word the evidence spells otherwise refuses on its own; a name's words apart are not the name.

Pure functions on fixed inputs (:func:`injection.refusal.signals`); the IDF
values stand for the engine's, ``ABSENT`` for a token no point has.
"""

from __future__ import annotations

import pytest

from freshindex.injection.refusal import TermWeights, evidence_tokens, signals

ABSENT = 9.0


def _sig(question: str, evidence: str) -> object:
    tokens = evidence_tokens(evidence)
    idf = {t: 7.5 for t in tokens}  # every word of the evidence rare: a key term whenever the question has it
    return signals(question, [tokens],
                   weights=TermWeights(idf=idf, missing_idf=ABSENT), lexical_top=None, dense_top=0.5,
                   present=set(idf))


@pytest.mark.parametrize(("question", "evidence"), [
    ("Is the logger caching its bound context?", "The logger can cache its bound context."),  # a stem
    ("Which processor is emitting duplicates?", "Processors emit duplicates once."),  # a stem
    ("Is the flag a boolean?", "The flag is a bool."),  # an abbreviation
    ("What is the runtime overhead?", "The overhead at run time is one dictionary copy."),  # two words
    ("What does add.log.level do?", "Use add_log_level first."),  # an identifier split otherwise
    ("What does add_log_level do?", "Call addLogLevel first."),  # an identifier joined
])
def test_a_key_term_the_evidence_spells_otherwise_is_not_missing(question: str, evidence: str) -> None:
    sig = _sig(question, evidence)
    assert sig.missing == (), sig.missing
    assert sig.unknown == ()


@pytest.mark.parametrize(("question", "evidence", "name"), [
    ("Does it ship a SentryProcessor?", "Send events to a sentry processor of your own.", "sentryprocessor"),
    ("Is there a --watch option?", "Watch the output of the build.", "--watch"),
])
def test_a_names_words_apart_are_not_the_name(question: str, evidence: str, name: str) -> None:
    sig = _sig(question, evidence)
    assert name in sig.missing
    assert name in sig.unknown
