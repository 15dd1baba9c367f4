"""A product or format the question names with a capital ("Flatpak", "SARIF") that no permitted document
mentions refuses it like an absent identifier; a word capitalised by grammar, an English word, or a name the
evidence holds in another form does not."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from freshindex.injection.proper_names import proper_names
from freshindex.injection.refusal import RefusalPolicy, RefusalReason, TermWeights, decide, ordinary_words, signals
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

_POOL = {"generator", "produce", "bundle", "variable", "cpack", "debian", "package", "deb", "option", "accept"}


def _signals(question: str, pool: set[str] = _POOL):
    weights = TermWeights(idf={t: 1.0 for t in pool}, missing_idf=9.0, ordinary=ordinary_words())
    return signals(question, [frozenset(pool)], weights=weights, lexical_top=8.0, dense_top=0.8, present=pool)


@pytest.mark.parametrize(("question", "names"), [
    ("Is there a CPack generator that produces Flatpak bundles?", {"flatpak": "flatpak"}),  # CPack: a compound
    ("Can it write warnings to a SARIF file? Does it run on Kubernetes.", {"sarif": "sarif",
                                                                           "kubernete": "kubernetes"}),
    ("Bazel: which options does the generator accept?", {}),  # first word of a sentence: grammar
    ("Which LogRecord attribute holds it, and is it on by default?", {}),  # capital inside: compound
    ("How Do I Enable Autoreload In The Dev Server?", {}),  # Title Case: capitals say nothing
    ("How do I reload the dev server?\nThanks, Priya", {}),  # a sign-off is a fragment, not the subject
    ("Does the \u201cBazel\u201d generator take options?", {"bazel": "bazel"}),  # curly quotes are edges
])
def test_proper_names_are_capitalised_words_inside_a_sentence(question: str, names: dict[str, str]) -> None:
    # token -> the word as the reader wrote it (the tokenizer folds a plural: the refusal names the word)
    assert proper_names(question) == names


def test_a_capitalised_name_no_candidate_holds_refuses_whatever_the_score() -> None:
    s = _signals("Is there a CPack generator that produces Flatpak bundles, and what are its variables?")
    assert s.unknown == ("flatpak",)
    reason, why = decide(RefusalPolicy(bias=10.0), s)  # a score that answers anything
    assert reason is RefusalReason.KEY_TERMS_MISSING and "'flatpak'" in why
    assert decide(replace(RefusalPolicy(bias=10.0), unknown_names=False), s) is None
    # named as the reader wrote it, not as the tokenizer folded it
    plural = _signals("Does the Debian generator produce bundles for Kubernetes?")
    assert plural.unknown == ("kubernetes",) and "kubernete" in plural.missing


@pytest.mark.parametrize("question", [
    "Does the Debian generator produce a package for each component?",  # the evidence holds it
    "Does the generator produce bundles on Windows?",  # a word of general English: the reader's wording
    "Flatpak aside, which variables does the bundle generator accept?",  # first word: capitalised by grammar
    "Does the generator produce flatpak bundles?",  # lower case: a word, weighed by the score only
])
def test_no_capitalised_absent_name_is_no_unknown_name(question: str) -> None:
    assert _signals(question).unknown == ()


def test_through_the_client_a_named_absent_product_is_refused_and_a_present_one_answered(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "cpack.md").write_text(
        "# CPack generators\n\n## Debian\n\nThe Debian generator produces one deb package per component. "
        "Its variables start with CPACK_DEBIAN_ and the generator accepts a package name option.\n")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 context={"min_score": 0.0}))
    try:
        svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="default")
        assert sync_inline(svc, "docs").build_status == "built"
        refused = svc.client.retrieve("Which variables does the CPack generator for Flatpak bundles accept?",
                                      kb="default")
        assert refused.insufficient and "'flatpak'" in (refused.reason or "")
        answered = svc.client.retrieve("Which variables does the CPack generator for Debian packages accept?",
                                       kb="default")
        assert not answered.insufficient and answered.evidence[0].key == "cpack.md"
    finally:
        svc.close()


def test_an_upper_case_plural_is_held_by_its_singular() -> None:
    # "URLs" is a compound name; evidence writing "urls" in lower case holds only the folded "url"
    s = _signals("How do I return URLs from a view?", {"return", "url", "view"})
    assert s.unknown == ()


def test_a_capitalised_name_ocr_misread_is_held_by_the_scanned_candidate() -> None:
    pool = {"build", "emscriplen", "toolchain"}  # a scan read "Emscripten" as "Emscriplen"
    weights = TermWeights(idf={t: 1.0 for t in pool}, missing_idf=9.0, ordinary=ordinary_words())
    q = "How do I build the package with the Emscripten toolchain?"
    read = signals(q, [frozenset(pool)], weights=weights, lexical_top=8.0, dense_top=0.8, present=pool,
                   ocr_read=pool)
    typed = signals(q, [frozenset(pool)], weights=weights, lexical_top=8.0, dense_top=0.8, present=pool)
    assert read.unknown == () and typed.unknown == ("emscripten",)
