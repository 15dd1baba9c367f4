"""A build calibrates the refusal on its own knowledge base; the client serves with that bias.

A generated knowledge base (64 documents, each with its own made-up
vocabulary and one dotted identifier) synced through the real pipeline
(folder source, SQLite registry, Qdrant Edge, the hashing embedder: the
calibration's plumbing does not depend on the model); ``snapshots show`` and
``snapshots calibrate`` run as a user runs them, one subprocess each.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from freshindex.injection.calibration import Calibration, calibrate, fit_bias
from freshindex.injection.refusal import RefusalPolicy, RefusalReason, _evidence_tokens, _variants
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.conftest import ROOT
from tests.snapshots.conftest import ONE_STRATEGY

SYLLABLES = ("ka", "lo", "mi", "ru", "te", "zo", "van", "pel", "dri", "shu", "nor", "gax", "bel", "tor", "qui", "fen")
#: Words every document draws from (a few each): the knowledge base's common vocabulary.
COMMON = ("function", "returns", "records", "value", "each", "configuration", "option", "default", "helper",
          "setting", "table", "list", "result", "field", "request", "entry", "limit", "order", "group", "number",
          "format", "error", "path", "name", "file", "time", "state", "mode", "size", "level")


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(3))


def _corpus(folder: Path, n: int, seed: int = 7) -> list[dict[str, object]]:
    """``n`` documents, each a module with a dotted function and a vocabulary of its own; what each holds."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    docs: list[dict[str, object]] = []
    used: set[str] = set()
    for i in range(n):
        vocab: list[str] = []
        while len(vocab) < 12:
            w = _word(rng)
            if w not in used:
                used.add(w)
                vocab.append(w)
        module, func = vocab[0], f"{vocab[1]}_{vocab[2]}"
        body = " ".join(rng.choice(vocab[3:] * 2 + list(rng.sample(COMMON, 6))) for _ in range(70))
        text = f"# The {module} module\n\n## {module}.{func}\n\nThe {module}.{func} function {body}.\n"
        (folder / f"doc{i:03d}.md").write_text(text)
        docs.append({"module": module, "func": func, "words": vocab[3:],
                     "lacks": [w for w in COMMON if w not in text.split()]})
    return docs


def _services(tmp_path: Path, folder: Path) -> Services:
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    svc.registry.add_source("gen", kind="folder", location=str(folder), kb="default", owner="docs@example.com")
    assert sync_inline(svc, "gen").build_status == "built"
    return svc


def _uncalibrated(tmp_path: Path) -> Services:
    """A generated knowledge base of 40 documents synced and built with calibration off."""
    _corpus(tmp_path / "kb", 40)
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 context={"refusal_calibration": False}))
    svc.registry.add_source("gen", kind="folder", location=str(tmp_path / "kb"), kb="default",
                            owner="docs@example.com")
    assert sync_inline(svc, "gen").build_status == "built"
    return svc


def _cli(tmp_path: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env.update(settings)
    env["FRESHINDEX_DATA_DIR"] = str(tmp_path / "data")
    env["FRESHINDEX_EMBEDDING__PROVIDER"] = "hashing"
    return subprocess.run([sys.executable, "-m", "freshindex", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=300)


@ONE_STRATEGY  # one build, the first: full under either strategy
def test_a_build_calibrates_the_refusal_on_its_own_knowledge_base(tmp_path: Path) -> None:
    # Given a generated knowledge base of 64 documents with distinct vocabularies, synced and built
    docs = _corpus(tmp_path / "kb", 64)
    svc = _services(tmp_path, tmp_path / "kb")
    try:
        active = svc.registry.active_snapshot("default")
        assert active is not None
        # Then the snapshot holds a calibration fitted on its own pseudo-questions
        cal = svc.registry.snapshot_calibration(active.id)
        assert cal is not None and cal["status"] == "calibrated", cal
        target = svc.settings.context.refusal_target_false_rate
        assert cal["answerable"] >= 50 and cal["perturbed"] >= 50
        assert cal["false_refusals"] <= target
        assert isinstance(cal["bias"], float) and cal["bias"] != RefusalPolicy().bias
        assert cal["seconds"] >= 0
        # And asked again it samples the same chunks (seeded by the snapshot id) and holds the target (the bias
        # itself may move a little: the engine orders tied hits differently from one query to the next)
        again = svc.calibrate_refusal(active.collection, active.id)
        assert (again["sampled"], again["perturbed"]) == (cal["sampled"], cal["perturbed"])
        assert again["false_refusals"] <= target
        # And the evidence memo its questions filled is let go (a syncing process carries it into no next build)
        assert _evidence_tokens.cache_info().currsize == 0 and _variants.cache_info().currsize == 0
        # And the client serves with the calibrated bias
        assert svc.client._policy(active.id).bias == cal["bias"]
        # When a question names an identifier the knowledge base does not have (its parts it does have)
        a, b = docs[3], docs[4]
        absent = svc.client.retrieve(f"What does {a['module']}.{b['func']} return?", kb="default")
        # Then it is refused, naming the identifier
        assert absent.insufficient, absent.rendered
        assert f"{a['module']}.{b['func']}".lower() in (absent.reason or "")
        # When an answerable question is asked partly in words of the knowledge base the document does not use
        words, other = a["words"], a["lacks"]
        answered = svc.client.retrieve(f"In {a['module']}, which {words[0]} {other[0]} does the {a['func']} "
                                       f"{other[1]} have for {words[1]}?", kb="default")
        # Then it is answered from that document
        assert not answered.insufficient, answered.reason
        assert answered.evidence[0].key == "doc003.md"
    finally:
        svc.close()
    # And `snapshots show --json` reports it; the text form prints one line of it
    shown = _cli(tmp_path, "snapshots", "show", active.id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["calibration"]["bias"] == cal["bias"]
    assert json.loads(shown.stdout)["calibration"]["serves"] is True
    text = _cli(tmp_path, "snapshots", "show", active.id)
    assert f"bias {cal['bias']}" in text.stdout, text.stdout


@ONE_STRATEGY  # one build, the first: full under either strategy
def test_a_tiny_knowledge_base_keeps_the_shipped_policy(tmp_path: Path) -> None:
    # Given a knowledge base of 5 documents (fewer points than refusal_calibration_min_chunks)
    _corpus(tmp_path / "kb", 5)
    svc = _services(tmp_path, tmp_path / "kb")
    try:
        active = svc.registry.active_snapshot("default")
        assert active is not None
        # Then its calibration says too small, fits no bias, and the client keeps the shipped policy
        cal = svc.registry.snapshot_calibration(active.id)
        assert cal is not None and cal["status"] == "too_small" and cal["bias"] is None
        assert svc.client._policy(active.id) == svc.client.refusal
        # And an unrelated question is still refused (no admitted evidence refuses whatever the bias)
        packet = svc.client.retrieve("Which zeppelin hangar protocol is used?", kb="default")
        assert packet.insufficient
    finally:
        svc.close()


@ONE_STRATEGY  # one build, the first; `snapshots calibrate` builds nothing
def test_a_snapshot_built_before_calibration_is_calibrated_on_request(tmp_path: Path) -> None:
    # Given a snapshot built with calibration off (as one built before it existed)
    svc = _uncalibrated(tmp_path)
    try:
        active = svc.registry.active_snapshot("default")
        assert active is not None
        assert svc.registry.snapshot_calibration(active.id)["status"] == "skipped"
        assert svc.client._policy(active.id) == svc.client.refusal
    finally:
        svc.close()
    # When `freshindex snapshots calibrate` runs on it
    done = _cli(tmp_path, "snapshots", "calibrate", "--json")
    assert done.returncode == 0, done.stderr
    # Then the registry keeps the calibration and a client reads it
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        cal = svc.registry.snapshot_calibration(active.id)
        assert cal is not None and cal["status"] == "calibrated" and cal == json.loads(done.stdout)
        assert svc.client._policy(active.id).bias == cal["bias"]
    finally:
        svc.close()


@ONE_STRATEGY  # builds nothing
@pytest.mark.parametrize(("scores", "target", "bias"), [
    ([1.0, 2.0, 3.0, 4.0], 0.0, -1.0),  # no false refusal allowed: the weakest answerable one still passes
    ([1.0, 2.0, 3.0, 4.0], 0.25, -2.0),  # one of four may be refused
    ([float("-inf"), 2.0, 3.0, 4.0], 0.25, -2.0),  # a question refused anyway uses up the allowance
    ([float("-inf")], 0.5, None),
])
def test_the_bias_refuses_at_most_the_target_share(scores: list[float], target: float, bias: float | None) -> None:
    assert fit_bias(scores, target) == bias
    if bias is not None:
        assert sum(1 for s in scores if bias + s < 0) <= target * len(scores)


@ONE_STRATEGY  # builds nothing
def test_calibration_off_is_recorded_without_asking(tmp_path: Path) -> None:
    class Store:
        def count(self, name: str) -> int:
            return 1000

    rec = calibrate(Store(), None, collection="c", snapshot_id="kb-v1", policy=RefusalPolicy(),  # type: ignore[arg-type]
                    settings=Calibration(enabled=False))
    assert rec["status"] == "skipped" and rec["bias"] is None
    assert RefusalReason.KEY_TERMS_MISSING  # the reason the calibrated refusal names


@pytest.mark.parametrize("share", [0.1, 0.0])
def test_a_small_update_inherits_the_parents_calibration_and_a_large_share_refits(tmp_path: Path,
                                                                                    share: float) -> None:
    # Given a calibrated knowledge base of 64 documents
    _corpus(tmp_path / "kb", 64)
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 context={"refusal_calibration_refit_share": share}))
    try:
        svc.registry.add_source("gen", kind="folder", location=str(tmp_path / "kb"), kb="default", owner="d@x")
        first = sync_inline(svc, "gen").snapshot
        assert first is not None and first.verification["calibration"]["status"] == "calibrated"
        # When one document is edited and the next build runs
        doc = tmp_path / "kb" / "doc005.md"
        doc.write_text(doc.read_text() + "\nOne more sentence about nothing new.\n")
        second = sync_inline(svc, "gen").snapshot
        assert second is not None and second.id != first.id
        calibration = second.verification["calibration"]
        if share > 0:
            # Then under the refit share it carries the parent's record forward, saying from where and how much changed
            assert calibration["inherited_from"] == first.id
            assert calibration["bias"] == first.verification["calibration"]["bias"]
            assert 0 < calibration["changed_since"] <= share * first.point_count
        else:
            # Then with no share allowed it is fitted afresh
            assert calibration["status"] == "calibrated" and "inherited_from" not in calibration
    finally:
        svc.close()


def test_a_build_refits_a_calibration_fitted_for_other_refusal_weights(tmp_path: Path) -> None:
    # Given a knowledge base calibrated under the shipped refusal weights
    _corpus(tmp_path / "kb", 64)
    svc = _services(tmp_path, tmp_path / "kb")
    first = svc.registry.active_snapshot("default")
    svc.close()
    assert first is not None and first.verification["calibration"]["policy"] == RefusalPolicy().scoring()
    # When the weights change (an upgrade's new defaults, an operator's setting)
    weights = {"refusal_coverage_weight": RefusalPolicy().coverage_weight + 1.0}
    # Then `snapshots show` says the old bias does not serve
    shown = _cli(tmp_path, "snapshots", "show", first.id, "--json",
                 FRESHINDEX_CONTEXT__REFUSAL_COVERAGE_WEIGHT=str(weights["refusal_coverage_weight"]))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["calibration"]["serves"] is False
    # When a small edit is built
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}, context=weights))
    try:
        doc = tmp_path / "kb" / "doc005.md"
        doc.write_text(doc.read_text() + "\nOne more sentence about nothing new.\n")
        second = sync_inline(svc, "gen").snapshot
        # Then the parent's record is not carried forward (well under the refit share): it is fitted afresh
        assert second is not None and second.id != first.id
        calibration = second.verification["calibration"]
        assert calibration["status"] == "calibrated" and "inherited_from" not in calibration
        assert calibration["policy"]["coverage_weight"] == weights["refusal_coverage_weight"]
    finally:
        svc.close()


@ONE_STRATEGY  # one build, the first: full under either strategy
def test_calibration_embeds_its_pseudo_questions_in_batches_not_one_request_each(tmp_path: Path) -> None:
    # Given a built knowledge base and an embedder that counts its calls (a remote one makes a request per call)
    svc = _uncalibrated(tmp_path)
    calls: list[int] = []

    class Counting:
        model_id, dimension = svc.embedder.model_id, svc.embedder.dimension

        def embed(self, texts):
            calls.append(len(texts))
            return svc.embedder.embed(texts)

    try:
        active = svc.registry.active_snapshot("default")
        assert active is not None
        # When the snapshot is calibrated
        cal = calibrate(svc.store, Counting(), collection=active.collection, snapshot_id=active.id,
                        policy=RefusalPolicy(), naming=svc.naming)
    finally:
        svc.close()
    # Then every pseudo-question was asked, with their vectors from one call per question set
    assert cal["status"] == "calibrated"
    asked = cal["answerable"] + cal["no_evidence_answerable"] + cal["perturbed"] + cal["no_evidence_perturbed"]
    assert len(calls) == 2 and sum(calls) == asked, calls
