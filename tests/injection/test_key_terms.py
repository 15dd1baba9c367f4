"""Key terms of the refusal: a compound identifier counts whole, a common word does not count at all.

Pure functions on fixed inputs (:func:`injection.refusal.signals`); the
IDF values stand for the engine's, ``missing_idf`` for a token no point has.
"""

from __future__ import annotations

import pytest

from freshindex.injection.refusal import RefusalPolicy, TermWeights, decide, evidence_tokens, question_terms, signals

ABSENT = 9.0  # absent_idf of a collection of about 12k points


def _sig(question: str, evidence: str, idf: dict[str, float]) -> object:
    return signals(question, [evidence_tokens(evidence)],
                   weights=TermWeights(idf=idf, missing_idf=ABSENT), lexical_top=None,
                   dense_top=0.5, present=set(idf))


@pytest.mark.parametrize(("question", "whole", "parts"), [
    ("Is dbm.sqlite3 available?", "dbm.sqlite3", ("dbm", "sqlite3")),
    ("What does Path.walk return?", "path.walk", ("path", "walk")),
    ("What is os.process_cpu_count?", "os.process_cpu_count", ("os", "process", "cpu", "count")),
    ("How does getObjectFor404 work?", "getobjectfor404", ("get", "object", "404")),
])
def test_a_compound_identifier_is_one_whole_term_with_its_parts(question: str, whole: str,
                                                                 parts: tuple[str, ...]) -> None:
    # Given a question naming a dotted, snake_case or camelCase identifier
    # When its terms are read
    _terms, compounds = question_terms(question)
    # Then the whole form is a compound and the tokenizer's parts belong to it
    assert whole in compounds
    assert set(parts) <= set(compounds[whole])
    assert whole not in compounds[whole]


def test_an_identifier_whose_parts_are_in_the_evidence_but_not_its_whole_form_is_missing() -> None:
    # Given evidence about sqlite3 and about dbm, but no dbm.sqlite3 anywhere in the collection
    idf = {"dbm": 5.0, "sqlite3": 6.0, "module": 1.0}
    sig = _sig("What does the dbm.sqlite3 module do?", "The sqlite3 module; dbm.gnu and dbm.ndbm backends.", idf)
    # Then the whole form is the missing key term and its parts cover nothing of it: only "module" is covered
    assert sig.missing == ("dbm.sqlite3",)
    assert "sqlite3" not in sig.key_terms and "dbm" not in sig.key_terms
    assert sig.coverage == pytest.approx(1.0 / (ABSENT + 1.0))
    # And the shipped policy refuses, naming the identifier
    refused = decide(RefusalPolicy(), sig)
    assert refused is not None and "'dbm.sqlite3'" in refused[1]


def test_the_whole_identifier_in_the_evidence_covers_it() -> None:
    # Given the evidence that holds os.process_cpu_count whole
    idf = {"os.process_cpu_count": 8.0, "os": 2.0, "process_cpu_count": 8.0, "process": 3.0, "cpu": 5.0,
           "count": 2.0, "return": 1.0}
    sig = _sig("What does os.process_cpu_count return?", "os.process_cpu_count() returns the CPUs usable.", idf)
    # Then nothing is missing
    assert sig.missing == ()
    assert sig.coverage == pytest.approx(1.0)


def test_cpu_count_alone_does_not_cover_process_cpu_count() -> None:
    # Given evidence holding os.cpu_count (the parts cpu and count), the question naming os.process_cpu_count
    idf = {"os": 2.0, "cpu": 5.0, "count": 2.0, "process": 3.0, "return": 1.0}
    sig = _sig("What does os.process_cpu_count return?", "os.cpu_count() returns the number of CPUs.", idf)
    # Then the identifier is missing although all but one of its parts are there
    assert "os.process_cpu_count" in sig.missing
    assert sig.coverage == pytest.approx(1.0 / (ABSENT + 1.0))  # "return" alone is covered


def test_a_name_inside_a_dotted_path_of_the_evidence_is_present_and_a_word_inside_a_name_is_not() -> None:
    # Given evidence naming os.process_cpu_count (the tokenizer emits it whole and as os, process, cpu, count)
    idf = {"os.process_cpu_count": 8.0, "os": 2.0, "process": 3.0, "cpu": 5.0, "count": 2.0, "return": 1.0}
    evidence = "os.process_cpu_count() returns the CPUs usable."
    # When a question names process_cpu_count without its module, or cpu_count
    named = _sig("What does process_cpu_count return?", evidence, idf)
    other = _sig("What does cpu_count return?", evidence, idf)
    # Then the name inside the dotted path is present; cpu_count, a different name, is missing
    assert named.missing == ()
    assert other.missing == ("cpu_count",)


def test_a_common_word_missing_from_the_evidence_is_not_a_key_term() -> None:
    # Given a question with a common word ("front", in many chunks) the evidence does not use,
    # and a rare term it does
    idf = {"front": 2.5, "end": 2.0, "cache": 6.5, "invalidation": 7.5, "work": 1.5}
    sig = _sig("How does front end cache invalidation work?", "Cache invalidation: keys expire.", idf)
    # Then the common words count through BM25 only: they are no key terms, and coverage is whole
    assert sig.key_terms == ("cache", "invalidation")
    assert sig.missing == ()
    assert sig.coverage == pytest.approx(1.0)


def test_a_rare_or_absent_plain_word_is_still_a_key_term() -> None:
    # Given a plain word no point holds ("zeppelin") and a rare one the evidence lacks ("hangar")
    idf = {"hangar": 7.0, "door": 2.0}
    sig = _sig("Which zeppelin hangar door?", "The door opens inward.", idf)
    # Then both are key terms and both missing; the common word is not
    assert set(sig.missing) == {"zeppelin", "hangar"}
    assert "door" not in sig.key_terms
    assert sig.coverage == pytest.approx(2.0 / (ABSENT + 7.0 + 2.0))


def test_a_policy_takes_a_calibrated_bias_and_ignores_a_calibration_without_one() -> None:
    # Given the shipped policy
    shipped = RefusalPolicy()
    # When a snapshot's calibration is applied
    # Then a fitted bias replaces the shipped one; a record without a bias (too small, failed) changes nothing
    assert shipped.calibrated({"status": "calibrated", "bias": -6.5}).bias == -6.5
    assert shipped.calibrated({"status": "too_small", "bias": None}) == shipped
    assert shipped.calibrated(None) == shipped
    assert shipped.calibrated({"bias": float("nan")}) == shipped
    assert shipped.calibrated({"bias": True}) == shipped


def test_a_calibration_fitted_for_other_weights_keeps_the_shipped_bias() -> None:
    # Given the shipped policy and calibration records as a build writes them
    shipped = RefusalPolicy()
    mine = {"version": 3, "status": "calibrated", "bias": -6.5, "policy": shipped.scoring()}
    other = {**mine, "policy": {**shipped.scoring(), "coverage_weight": shipped.coverage_weight + 1.0}}
    older = {"version": 2, "status": "calibrated", "bias": -6.5}  # recorded before records said their weights
    # When each is applied
    # Then only the one fitted for these weights moves the bias: another's threshold is not this policy's
    assert shipped.calibrated(mine).bias == -6.5
    assert shipped.calibrated(other) == shipped
    assert shipped.calibrated(older) == shipped


def test_a_word_of_general_english_is_a_readers_wording_and_a_word_outside_it_is_a_name() -> None:
    from freshindex.injection.refusal import ordinary_words

    words = ordinary_words()
    # Given the general-English vocabulary the bundled tokenizer ships (bert-base-uncased's whole words)
    assert {"folder", "afterwards", "rely", "directory"} <= words
    assert not {"cublas", "emscripten", "duckdb", "ratelimit"} & words
    # And a question in a reader's words ("folder", "live") the manual does not use (it says "directory"), and one
    # naming a library the manual lacks; neither word is anywhere in the collection
    idf = {"image": 3.0, "files": 1.5, "figures": 4.0, "stored": 2.0, "directory": 2.5}
    evidence = "The files containing the figures should be stored in the directory man/figures."
    reader = signals("Which folder should image files live in?", [evidence_tokens(evidence)],
                     weights=TermWeights(idf=idf, missing_idf=ABSENT, ordinary=words), lexical_top=None, dense_top=0.5,
                     present=set(idf))
    named = signals("Which duckdb files should image files use?", [evidence_tokens(evidence)],
                    weights=TermWeights(idf=idf, missing_idf=ABSENT, ordinary=words), lexical_top=None, dense_top=0.5,
                    present=set(idf))
    # When their signals are read with the vocabulary
    # Then the reader's words cost nothing (they still weigh in BM25's normalisation), the unknown name does
    assert reader.missing == () and reader.coverage == 1.0
    assert "folder" in reader.weights and "folder" not in reader.key_terms
    assert named.missing == ("duckdb",) and named.coverage < 1.0
    # And without it (the rule off) the reader's words are missing key terms as before
    off = signals("Which folder should image files live in?", [evidence_tokens(evidence)],
                  weights=TermWeights(idf=idf, missing_idf=ABSENT), lexical_top=None, dense_top=0.5, present=set(idf))
    assert set(off.missing) == {"folder", "live"}


def test_another_form_of_an_ordinary_word_and_words_joined_by_a_slash_are_a_readers_wording() -> None:
    from freshindex.injection.refusal import ordinary_words, question_terms

    words = ordinary_words()
    idf = {"message": 2.0, "print": 2.5, "prefix": 3.0, "hyphen": 4.0}
    evidence = "STATUS messages print with a two-hyphen prefix."

    def missing(question: str) -> tuple[str, ...]:
        return signals(question, [evidence_tokens(evidence)], weights=TermWeights(idf=idf, missing_idf=ABSENT,
                       ordinary=words), lexical_top=None, dense_top=0.5, present=set(idf)).missing

    # A plural the tokenizer folds to a non-word ("dashes" -> dashe), a past tense or -ing form of a word
    # ("duplicated", "emitting"), words joined by a slash ("note/warning"), a Latin abbreviation ("e.g."):
    # none is a name
    assert missing("Why do STATUS messages print two dashes in front, e.g. with a note/warning prefix?") == ()
    assert missing("Are STATUS messages duplicated when the prefix they print is wrapped?") == ()
    # while a name that only shares a stem with a word (tomli / tom, rustls / rustle) still is one
    assert missing("Do STATUS messages print via tomli?") == ("tomli",)
    assert missing("Do STATUS messages print via rustls?") == ("rustl",)  # the tokenizer folds the "s"
    terms, compounds = question_terms("Make a note/warning box, e.g. for ccache/distcc in lib/x86_64-linux-gnu")
    assert {"note", "warning", "ccache", "distcc"} <= set(terms) and "note/warning" not in terms
    assert "e.g" not in terms and "e" not in terms
    # while a path, a file name or a dotted name still counts whole, and a word outside English still is a name
    assert set(compounds) == {"lib/x86_64-linux-gnu"}
    terms, compounds = question_terms("Set R_LD_LIBRARY_PATH to find /opt/local/lib or usr/local/lib, not /opt/x")
    assert {"opt/local/lib", "usr/local/lib", "opt/x"} <= set(compounds) and "opt/local/lib" in terms
    assert missing("Do STATUS messages print via duckdb?") == ("duckdb",)
