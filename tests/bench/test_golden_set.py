"""The Django golden set's schema (no network: the passages are checked against the pages by the bench)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[2] / "bench" / "goldens" / "django" / "questions.jsonl"
KINDS = {"prose", "table", "code", "config", "update_only", "distractor", "unanswerable"}
VERSIONS = {"3:3.2.25-0+deb12u3", "3:3.2.25-0+deb12u7"}
PAGE = re.compile(r"^(?!/)(?!.*\.\.)[\w./-]+\.html$")


@pytest.fixture(scope="module")
def items() -> list[dict]:
    return [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_size_and_kinds(items):
    kinds = Counter(i["kind"] for i in items)
    assert len(items) >= 60
    assert set(kinds) == KINDS, "every kind present, no other"
    assert kinds["unanswerable"] >= 10
    assert len({i["id"] for i in items}) == len(items), "ids are unique"
    assert len({i["question"].strip().lower() for i in items}) == len(items), "questions are unique"


def test_every_item_is_well_formed(items):
    for i in items:
        assert set(i) >= {"id", "question", "kind", "split", "page", "passage"}, i["id"]
        assert i["split"] in {"dev", "test"}, i["id"]
        assert i["question"].strip().endswith("?") or i["kind"] == "code", i["id"]
        if i["kind"] == "unanswerable":
            assert i["page"] is None and i["passage"] is None, i["id"]
            assert i["key_terms"] and all(isinstance(t, str) and t.strip() for t in i["key_terms"]), i["id"]
            continue
        assert isinstance(i["page"], str) and PAGE.match(i["page"]), i["id"]
        passage = i["passage"]
        assert isinstance(passage, str) and 8 <= len(passage) <= 300, i["id"]
        assert passage == " ".join(passage.split()), f"{i['id']}: passage whitespace is normalised"
        if i["kind"] == "update_only":
            assert i["version"] in VERSIONS and i["version"].endswith("u7"), i["id"]
        if i["kind"] == "distractor":
            assert i["distractor_pages"] and i["page"] not in i["distractor_pages"], i["id"]
            assert all(PAGE.match(p) for p in i["distractor_pages"]), i["id"]


def test_splits_are_balanced_within_every_kind(items):
    for kind in KINDS:
        splits = Counter(i["split"] for i in items if i["kind"] == kind)
        assert abs(splits["dev"] - splits["test"]) <= 1, (kind, splits)
        assert splits["dev"] and splits["test"], kind
    dev_unanswerable = sum(i["split"] == "dev" and i["kind"] == "unanswerable" for i in items)
    assert dev_unanswerable >= 5, "a refusal threshold needs unanswerable questions on dev"
