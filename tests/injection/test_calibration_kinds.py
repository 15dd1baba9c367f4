"""The refusal's calibration samples each content kind of a generated repository in proportion, in a reader's words.

A generated repository (Python modules, Markdown pages, CSV tables, each
with a made-up vocabulary) synced through the real pipeline (folder source,
SQLite registry, Qdrant Edge, the hashing embedder: what is sampled and how
it is phrased does not depend on the model).  The build's calibration is
read back; the pseudo-questions are asked again through
:func:`injection.calibration.pseudo_signals` to read their wording.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from freshindex.injection.calibration import KINDS, Calibration, content_kind, pseudo_signals, reader_form
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

SYLLABLES = ("ka", "lo", "mi", "ru", "te", "zo", "van", "pel", "dri", "shu", "nor", "gax", "bel", "tor", "qui", "fen")


def _word(rng: random.Random, used: set[str]) -> str:
    while True:
        w = "".join(rng.choice(SYLLABLES) for _ in range(3))
        if w not in used:
            used.add(w)
            return w


def _repository(root: Path, seed: int = 11) -> list[str]:
    """Modules (code), pages (prose) and CSV files (tables); the snake_case identifiers the code defines."""
    rng, used = random.Random(seed), set[str]()
    names: list[str] = []
    for _module in range(12):
        module = root / "src" / "pkg" / f"{_word(rng, used)}.py"
        module.parent.mkdir(parents=True, exist_ok=True)
        parts = []
        for _f in range(4):
            a, b, c, d = (_word(rng, used) for _ in range(4))
            names.append(f"{a}_{b}")
            parts.append(f"def {a}_{b}({c}: int) -> int:\n    \"\"\"Return the {c} of every {d} the {b} holds, "
                         f"checked against the {a} limits.\"\"\"\n    total = {c} + len({d}_{c}_list())\n"
                         f"    return total * {c}\n")
        module.write_text("\n\n".join(parts))
    for _page in range(8):
        words = [_word(rng, used) for _ in range(10)]
        body = " ".join(rng.choice(words) + rng.choice(("", " the", " a", " with")) for _ in range(90))
        (root / "docs").mkdir(exist_ok=True)
        (root / "docs" / f"{words[0]}.md").write_text(f"# The {words[0]} guide\n\n## {words[1]} and {words[2]}\n\n"
                                                      f"{body}.\n")
    for _table in range(3):
        cols = [_word(rng, used) for _ in range(3)]
        rows = [",".join(_word(rng, used) for _ in cols) for _ in range(14)]
        (root / "data").mkdir(exist_ok=True)
        (root / "data" / f"{cols[0]}.csv").write_text(",".join(cols) + "\n" + "\n".join(rows) + "\n")
    return names


def test_calibration_samples_each_kind_in_proportion_and_phrases_code_as_a_reader(tmp_path: Path) -> None:
    # Given a generated repository of code, prose pages and tables, synced and built
    names = _repository(tmp_path / "repo")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 context={"refusal_calibration_sample": 60}))
    try:
        svc.registry.add_source("repo", kind="folder", location=str(tmp_path / "repo"), kb="default",
                                owner="docs@example.com")
        assert sync_inline(svc, "repo").build_status == "built"
        active = svc.registry.active_snapshot("default")
        assert active is not None
        # Then the build's calibration reports every content kind the repository has, with its share
        cal = svc.registry.snapshot_calibration(active.id)
        assert cal is not None and cal["status"] == "calibrated", cal
        assert set(cal["kinds"]) == set(KINDS), cal.get("kinds")
        assert abs(sum(k["share"] for k in cal["kinds"].values()) - 1.0) < 1e-3
        for kind, got in cal["kinds"].items():
            assert got["answerable"] + got["no_evidence_answerable"] > 0, (kind, got)
            assert got["false_refusals"] is None or 0.0 <= got["false_refusals"] <= 1.0
        # When its pseudo-questions are made again (the same sample: seeded by the snapshot id)
        every = Calibration(sample=60, min_score=svc.settings.context.min_score, perturbed=None)
        asked = pseudo_signals(svc.store, svc.embedder, collection=active.collection, snapshot_id=active.id,
                               policy=svc.refusal_policy, settings=every, naming=svc.naming)
        # Then each kind is asked about in proportion to its share of the knowledge base (one question or so
        # apart: a chunk with too few distinctive words makes none)
        n = len(asked.answerable_kinds)
        total = sum(asked.surveyed.values())
        for kind in KINDS:
            share = asked.surveyed[kind] / total
            assert abs(asked.answerable_kinds.count(kind) - share * n) <= max(3.0, 0.15 * n), (kind, asked.surveyed)
        # And asking only some of the perturbed questions (they report, never fit) leaves the answerable ones and
        # the kinds of the perturbed ones as they were
        few = pseudo_signals(svc.store, svc.embedder, collection=active.collection, snapshot_id=active.id,
                             policy=svc.refusal_policy, settings=replace(every, perturbed=12), naming=svc.naming)
        assert len(asked.perturbed) > 12 and len(few.perturbed) == len(few.perturbed_kinds) == 12
        assert few.answerable == asked.answerable and few.answerable_questions == asked.answerable_questions
        assert set(few.perturbed_kinds) == set(asked.perturbed_kinds), (few.perturbed_kinds, asked.perturbed_kinds)
        assert cal["perturbed"] + cal["no_evidence_perturbed"] == min(svc.settings.context.refusal_calibration_perturbed,
                                                                       len(asked.perturbed))
        # And a question about code names no identifier whole: a reader writes its words
        code = [q for q, k in zip(asked.answerable_questions, asked.answerable_kinds, strict=True) if k == "code"]
        assert code
        for q in code:
            assert not any(name in q for name in names), q
    finally:
        svc.close()


def test_a_chunks_kind_is_code_table_or_prose() -> None:
    from freshindex.core.payload import PointPayload

    def payload(kind: str, **meta: object) -> PointPayload:
        return PointPayload(chunk_id="c", document_id="d", source_id="s", kb="kb", key="k", text="t",
                            content_hash="h", snapshot_id="v", kind=kind, meta=dict(meta))

    assert content_kind(payload("code")) == "code"
    assert content_kind(payload("mixed", symbol="pkg.f")) == "code"
    assert content_kind(payload("table")) == content_kind(payload("table_row")) == "table"
    assert content_kind(payload("paragraph")) == content_kind(payload("mixed")) == "prose"


def test_a_readers_form_keeps_the_stem_and_is_a_known_word() -> None:
    rng = random.Random(3)
    vocabulary = {"caching", "cached", "emitting", "parse"}
    assert reader_form("cache", rng, vocabulary) in {"caching", "cached"}
    assert reader_form("emit", rng, vocabulary) == "emitting"
    assert reader_form("parsing", rng, vocabulary) == "parse"
    assert reader_form("zorblat", rng, vocabulary) == "zorblat"  # no known form: the word itself
