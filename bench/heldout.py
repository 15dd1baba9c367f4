"""The refusal's fitted defaults, fitted on some corpora and reported on the one left out.

The refusal (:mod:`freshindex.injection.refusal`) has two fitted defaults:

* its weights (``context.refusal_coverage_weight``, ``refusal_lexical_weight``;
  ``refusal_dense_weight`` stays 0: the dense cosine depends on the model);
* the calibration's target (``context.refusal_target_false_rate``): each
  knowledge base's bias is fitted at build time on pseudo-questions made from
  its own chunks (:mod:`freshindex.injection.calibration`) to refuse at most
  that share of the answerable ones.  Pseudo-questions are easier than real
  ones, so the target that gives a real false-refusal rate is itself fitted.

For a held-out corpus H, from the signals the client recorded for every real
question and for the pseudo-questions its build's calibration asks:

1. the weights: logistic regression on the other corpora's questions
   (:func:`bench.evidence.fit_client_refusal`; its bias is not used);
2. the target: for each of :data:`TARGETS`, every other corpus's bias is
   calibrated from its own pseudo-questions under those weights
   (:func:`freshindex.injection.calibration.fit_bias`, as its build does) and
   its questions decided with it; kept is the target under which no fit
   corpus refuses more than :data:`FALSE_GOAL` of its answerable questions and
   the worst fit corpus refuses the most unanswerable ones (then the most on
   average, then the lower target); when none meets the false-refusal goal,
   the one with the fewest false refusals;
3. H's bias calibrated from H's own pseudo-questions at those weights and
   that target, as H's build would; H's questions decided with it.

A question is refused whatever the weights when it had no admitted evidence
(refused with the refusal off too) or it names an identifier no permitted
document holds (``unknown``: the rule without a fitted constant).

The shipped defaults are the same fit over every corpus (:func:`fit`), the
shipped bias (a knowledge base too small to calibrate) the logistic fit's
own, moved for at most 5 % false refusals over all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.evidence import fit_client_refusal
from freshindex.injection.calibration import fit_bias

SIGNALS = ("coverage", "lexical", "dense")
#: The calibration targets tried (the share of answerable pseudo-questions a knowledge base's bias may refuse).
TARGETS = (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1)
#: The false-refusal goal a target must keep on every corpus it is fitted on.
FALSE_GOAL = 0.03

Rows = Sequence[Mapping[str, Any]]
Pseudo = Mapping[str, Sequence[Sequence[float] | None]]


def signal_list(sig: Any) -> list[float] | None:
    """A Signals' (or its dict's) values in :data:`SIGNALS` order; None for none (no admitted evidence)."""
    if sig is None:
        return None
    get = sig.get if isinstance(sig, Mapping) else (lambda n, d: getattr(sig, n, d))
    return [float(get(n, 0.0)) for n in SIGNALS]


def _score(weights: Mapping[str, float], values: Sequence[float]) -> float:
    return sum(float(weights.get(f"{n}_weight", 0.0)) * v for n, v in zip(SIGNALS, values, strict=True))


def calibrated_bias(pseudo: Pseudo, weights: Mapping[str, float], target: float) -> float | None:
    """The bias a build calibrates for these weights and target (answerable pseudo-questions that reached a decision)."""
    return fit_bias([_score(weights, s) for s in pseudo["answerable"] if s is not None], target)


def refused(rows: Rows, weights: Mapping[str, float], bias: float) -> set[str]:
    """The ids of the questions the client refuses with ``weights`` and ``bias`` (see the module docstring)."""
    out = set()
    for r in rows:
        sig = r["on"].get("signals") or {}
        forced = bool(r["off"]["insufficient"]) or bool(sig.get("unknown"))
        values = signal_list(sig) if sig else None
        if forced or (values is not None and bias + _score(weights, values) < 0):
            out.add(r["id"])
    return out


def rates(rows: Rows, refused_ids: set[str]) -> dict[str, Any]:
    un = [r for r in rows if r["kind"] == "unanswerable"]
    an = [r for r in rows if r["kind"] != "unanswerable"]
    return {"unanswerable_refused": round(sum(r["id"] in refused_ids for r in un) / len(un), 4) if un else None,
            "false_refusals": round(sum(r["id"] in refused_ids for r in an) / len(an), 4) if an else None,
            "falsely_refused": [r["id"] for r in an if r["id"] in refused_ids]}


def _weights(rows_by: Mapping[str, Rows], names: Sequence[str]) -> dict[str, float]:
    fit_rows = [{"id": r["id"], "kind": r["kind"], "split": "dev",
                 "client": dict(zip(SIGNALS, signal_list(r["on"].get("signals") or {}) or [0.0] * 3, strict=True))}
                for n in names for r in rows_by[n] if not r["off"]["insufficient"]]
    params = fit_client_refusal(fit_rows)["params"]
    return {"bias": params["bias"], **{f"{n}_weight": float(params.get(f"{n}_weight", 0.0)) for n in SIGNALS}}


def fit(rows_by: Mapping[str, Rows], pseudo_by: Mapping[str, Pseudo], names: Sequence[str]) -> dict[str, Any]:
    """Weights and calibration target fitted on the corpora ``names`` (steps 1 and 2 of the module docstring)."""
    weights = _weights(rows_by, names)
    tried = []
    for t in TARGETS:
        per = {}
        for n in names:
            bias = calibrated_bias(pseudo_by[n], weights, t)
            per[n] = {"bias": None if bias is None else round(bias, 4),
                      **rates(rows_by[n], refused(rows_by[n], weights, bias if bias is not None else weights["bias"]))}
        worst_false = max(p["false_refusals"] or 0.0 for p in per.values())
        refusals = [p["unanswerable_refused"] or 0.0 for p in per.values()]
        tried.append({"target": t, "per_corpus": per, "max_false_refusals": worst_false,
                      "min_unanswerable_refused": min(refusals), "mean_unanswerable_refused": sum(refusals) / len(refusals)})
    feasible = [x for x in tried if x["max_false_refusals"] <= FALSE_GOAL]
    if feasible:
        best = max(feasible, key=lambda x: (x["min_unanswerable_refused"], x["mean_unanswerable_refused"], -x["target"]))
    else:
        best = min(tried, key=lambda x: (x["max_false_refusals"], -x["min_unanswerable_refused"], x["target"]))
    return {"fitted_on": list(names), "weights": {k: round(v, 4) for k, v in weights.items()},
            "target": best["target"], "met_false_goal_on_fit_set": bool(feasible), "on_fit_set": best["per_corpus"],
            "targets_tried": [{k: x[k] for k in ("target", "max_false_refusals", "min_unanswerable_refused")}
                              for x in tried]}


def apply(fitted: Mapping[str, Any], rows: Rows, pseudo: Pseudo) -> dict[str, Any]:
    """Step 3: the held-out corpus's own calibrated bias at the fitted weights and target, and its decisions."""
    weights = fitted["weights"]
    bias = calibrated_bias(pseudo, weights, fitted["target"])
    used = bias if bias is not None else weights["bias"]
    ids = refused(rows, weights, used)
    return {"bias": round(used, 4), "bias_from": "calibration" if bias is not None else "shipped (no calibration)",
            "refused_ids": sorted(ids), **rates(rows, ids)}


def leave_one_out(rows_by: Mapping[str, Rows], pseudo_by: Mapping[str, Pseudo]) -> dict[str, Any]:
    """For each corpus: the defaults fitted on the others, applied to it (the module docstring)."""
    out: dict[str, Any] = {}
    for held in rows_by:
        others = [n for n in rows_by if n != held]
        if not others:
            continue
        fitted = fit(rows_by, pseudo_by, others)
        out[held] = {**fitted, "held_out": apply(fitted, rows_by[held], pseudo_by[held])}
    return out


def held_label(rows: list[dict[str, Any]], refused_ids: set[str], label: str = "held") -> None:
    """Give each row a ``label`` run: the retrieval of refusal off, refused where ``refused_ids`` says (a miss)."""
    for r in rows:
        run = dict(r["off"])
        run["ms5"], run["ms10"] = r["on"]["ms5"], r["on"]["ms10"]
        run["insufficient"] = r["id"] in refused_ids
        if run["insufficient"] and r["kind"] != "unanswerable":
            run.update(hit5=False, passage5=False, passage5_exact=False, passage5_strict=False,
                       passage5_any_page=False, rr10=0.0, rank10=None, distractor_above=False, n10=0)
        if run["insufficient"] and "stale5" in run:
            run["stale5"] = []  # a refused question serves nothing, stale or not
        r[label] = run
