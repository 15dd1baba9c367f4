"""bench.heldout: the refusal's defaults fitted on some corpora, applied to the one left out (signals by hand)."""

from __future__ import annotations

from bench import heldout


def rows(kind_signals: list[tuple[str, float, float]], *, prefix: str = "q") -> list[dict]:
    out = []
    for i, (kind, coverage, lexical) in enumerate(kind_signals):
        sig = {"coverage": coverage, "lexical": lexical, "dense": 0.5, "unknown": []}
        out.append({"id": f"{prefix}{i}", "kind": kind, "on": {"insufficient": False, "signals": sig, "ms5": 1.0,
                                                               "ms10": 1.0},
                    "off": {"insufficient": False, "signals": sig, "hit5": True, "passage5": True, "rr10": 1.0}})
    return out


SEPARABLE = rows([("prose", 0.9 + i / 100, 0.8) for i in range(20)]
                 + [("unanswerable", 0.2 + i / 100, 0.1) for i in range(5)])
#: Pseudo-questions as a build asks them: answerable ones like the real answerable, one with no evidence.
PSEUDO = {"answerable": [[0.85 + i / 200, 0.75, 0.5] for i in range(40)] + [None],
          "perturbed": [[0.3, 0.1, 0.5]] * 10}


def test_each_corpus_is_decided_with_defaults_fitted_on_the_others_and_its_own_calibrated_bias():
    # Given three corpora whose answerable and unanswerable questions separate, and their pseudo-questions
    by = {"a": SEPARABLE, "b": SEPARABLE, "c": SEPARABLE}
    # When the refusal is fitted leave-one-corpus-out
    loo = heldout.leave_one_out(by, {n: PSEUDO for n in by})
    # Then each corpus is fitted on the two others only, within the false-refusal goal there
    assert loo["b"]["fitted_on"] == ["a", "c"]
    assert loo["b"]["met_false_goal_on_fit_set"]
    assert all(p["false_refusals"] <= heldout.FALSE_GOAL for p in loo["b"]["on_fit_set"].values())
    # And the held-out corpus refuses every unanswerable question and no answerable one, with a bias of its own
    held = loo["c"]["held_out"]
    assert held["unanswerable_refused"] == 1.0 and held["false_refusals"] == 0.0
    assert held["bias_from"] == "calibration"
    assert held["bias"] == round(heldout.calibrated_bias(PSEUDO, loo["c"]["weights"], loo["c"]["target"]), 4)


def test_a_target_refusing_too_many_answerable_questions_on_a_fit_corpus_is_not_chosen():
    # Given a corpus whose real answerable questions score below its pseudo-questions (a reader's wording)
    hard = rows([("prose", 0.46 + i / 100, 0.46 + i / 100) for i in range(20)]
                + [("unanswerable", 0.2 + i / 100, 0.2 + i / 100) for i in range(5)])
    pseudo = {"answerable": [[0.45 + i * 0.3 / 40, 0.45 + i * 0.3 / 40, 0.5] for i in range(40)], "perturbed": []}
    # When the target is fitted on it
    fitted = heldout.fit({"hard": hard}, {"hard": pseudo}, ["hard"])
    # Then the chosen target keeps its false refusals within the goal, though a higher one refuses as many
    assert fitted["on_fit_set"]["hard"]["false_refusals"] <= heldout.FALSE_GOAL
    tried = {t["target"]: t for t in fitted["targets_tried"]}
    assert tried[max(heldout.TARGETS)]["max_false_refusals"] > heldout.FALSE_GOAL
    assert fitted["target"] < max(heldout.TARGETS)


def test_no_evidence_and_unknown_names_refuse_whatever_the_weights_and_a_refusal_is_a_miss():
    # Given an answerable question without admitted evidence and an unanswerable one naming an unknown identifier
    rs = rows([("prose", 0.99, 0.9), ("unanswerable", 0.99, 0.9), ("prose", 0.99, 0.9)])
    rs[0]["off"]["insufficient"] = True
    rs[1]["on"]["signals"]["unknown"] = ["foo.bar"]
    # When they are decided with weights and a bias that accept anything
    refused = heldout.refused(rs, {"coverage_weight": 1.0, "lexical_weight": 1.0}, bias=10.0)
    # Then both are refused, the third is not
    assert refused == {"q0", "q1"}
    # And the refused answerable one counts as a miss in the held-out run, the other keeps its retrieval
    heldout.held_label(rs, refused)
    assert rs[0]["held"]["insufficient"] and not rs[0]["held"]["hit5"] and rs[0]["held"]["rr10"] == 0.0
    assert rs[2]["held"]["hit5"] and rs[2]["held"]["rr10"] == 1.0
