"""The scheduled evaluation in one process: registered sets asked after a swap, recorded, exported.

Real parts: the embedded default (SQLite registry, qdrant-edge store, hashing embedder), folder syncs run
inline, the evaluator of ``freshindex/evaluation``, the ``golden-sets`` commands through click.  The
distributed path (beat, a worker, its metrics port) is tests/e2e/test_eval_schedule_distributed.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from freshindex.cli import cli
from freshindex.cli.support import failure
from freshindex.eval_schedule import evaluate_due
from freshindex.health.metrics import Metrics
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

DOCS = {
    "install.md": "# Install\n\nTo install freshindex run pip install freshindex on a machine with Python 3.11.\n",
    "refunds.md": "# Refunds\n\nRefunds above 10,000 USD need the approval of the CFO before payment.\n",
}
GOLDEN = "\n".join(json.dumps(q) for q in (
    {"id": "install", "question": "How do I install freshindex?", "expected": "install.md",
     "required_passage": "pip install freshindex"},
    {"id": "refunds", "question": "Who approves refunds above 10,000 USD?", "expected": "refunds.md",
     "required_passage": "approval of the CFO"},
)) + "\n"


def _settings(tmp_path: Path):
    return load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"})


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    """kb ``docs`` with one folder source holding both documents, synced once (``docs-v1`` serves)."""
    folder = tmp_path / "wiki"
    folder.mkdir()
    for key, text in DOCS.items():
        (folder / key).write_text(text)
    services = Services(_settings(tmp_path))
    services.registry.add_source("wiki", kind="folder", location=str(folder), owner="t", kb="docs")
    assert sync_inline(services, "wiki").snapshot.id == "docs-v1"
    try:
        yield services
    finally:
        services.close()


def test_a_registered_set_is_asked_once_per_swap_and_its_figures_are_gauges(svc: Services, tmp_path: Path) -> None:
    # Given a set registered on docs
    svc.registry.register_golden_set("docs", "smoke", GOLDEN, thresholds={"min_hit": 1.0})
    # When the due sets are evaluated
    (done,) = evaluate_due(svc, clock=lambda: 1_700_000_000.0)
    # Then both questions hit on docs-v1, the result is kept and the gauges say so
    assert (done["snapshot_id"], done["passed"], done["hit_ratio"], done["passage_ratio"]) == ("docs-v1", True, 1.0,
                                                                                                1.0)
    row = svc.registry.list_golden_sets("docs")[0]
    assert (row.last_snapshot_id, row.last_passed, row.last_metrics["questions"]) == ("docs-v1", True, 2)
    assert svc.metrics.value("freshindex_eval_hit_ratio", kb="docs", golden="smoke") == 1.0
    assert svc.metrics.value("freshindex_eval_passed", kb="docs", golden="smoke") == 1.0
    assert svc.metrics.value("freshindex_eval_last_run_timestamp_seconds", kb="docs", golden="smoke") == 1_700_000_000
    # And nothing is due again until the next swap
    assert evaluate_due(svc) == []
    # When refunds.md goes from the source and the next sync swaps to docs-v2
    (tmp_path / "wiki" / "refunds.md").unlink()
    assert sync_inline(svc, "wiki").snapshot.id == "docs-v2"
    # Then the inline sync's own swap asked the set on docs-v2 (as a worker's build task sends it): half the
    # hits, the gate failed, the lost question counted by the stage that lost it
    assert evaluate_due(svc) == []
    row = svc.registry.list_golden_sets("docs")[0]
    assert (row.last_snapshot_id, row.last_passed, row.last_metrics["hit_ratio"]) == ("docs-v2", False, 0.5)
    assert svc.metrics.value("freshindex_eval_hit_ratio", kb="docs", golden="smoke") == 0.5
    assert svc.metrics.value("freshindex_eval_passed", kb="docs", golden="smoke") == 0.0
    (stage, n), = row.last_metrics["failures_by_stage"].items()
    assert (stage, n) == ("registry", 1)  # the document is gone from the source: not_synced
    assert svc.metrics.value("freshindex_eval_failures", kb="docs", golden="smoke", stage="registry") == 1.0
    # And a forced run says which gate failed
    (again,) = evaluate_due(svc, force=True)
    assert again["failed_gates"] == {"min_hit": {"minimum": 1.0, "value": 0.5}}


def test_serve_exports_the_recorded_results_from_the_registry(svc: Services, tmp_path: Path) -> None:
    # Given a set evaluated by another process (this one)
    svc.registry.register_golden_set("docs", "smoke", GOLDEN)
    evaluate_due(svc)
    # When a fresh process (serve) scrapes its metrics
    serve = Services(_settings(tmp_path))
    try:
        assert serve.registry  # serve opens its registry at start (its readiness check)
        text = serve.metrics.render().decode()
        assert 'freshindex_eval_hit_ratio{golden="smoke",kb="docs"} 1.0' in text
        assert 'freshindex_eval_passage_ratio{golden="smoke",kb="docs"} 1.0' in text
        # And a set removed since is gone at the next scrape
        serve.registry.remove_golden_set("docs", "smoke")
        assert "freshindex_eval_hit_ratio{" not in serve.metrics.render().decode()
    finally:
        serve.close()


def test_a_stage_that_no_longer_fails_is_set_back_to_zero() -> None:
    m = Metrics()
    m.record_eval("docs", "smoke", {"hit_ratio": 0.5, "failures_by_stage": {"recall": 1}, "passed": False}, at=1.0)
    # A pool child that never saw the "recall" failure writes it back to 0 from the set's previous figures
    m.record_eval("docs", "smoke", {"hit_ratio": 1.0, "passage_ratio": None, "failures_by_stage": {},
                                    "passed": True}, at=2.0, previous={"failures_by_stage": {"recall": 1}})
    assert m.registry.get_sample_value("freshindex_eval_failures", {"kb": "docs", "golden": "smoke",
                                                                     "stage": "recall"}) == 0.0
    assert m.registry.get_sample_value("freshindex_eval_passage_ratio", {"kb": "docs", "golden": "smoke"}) is None


def test_a_set_that_cannot_be_asked_is_recorded_failed_not_retried_each_tick(svc: Services) -> None:
    # A set registered before a format change: its text no longer parses
    info = svc.registry.register_golden_set("docs", "old", '{"question": ""}\n')
    (done,) = evaluate_due(svc)
    assert done["passed"] is False and "question is required" in done["error"]
    assert svc.registry.list_golden_sets()[0].last_error == done["error"] and info.id
    assert svc.metrics.value("freshindex_eval_passed", kb="docs", golden="old") == 0.0
    assert evaluate_due(svc) == []


def _cli(tmp_path: Path, *args: str) -> tuple[int, str]:
    env = {"FRESHINDEX_DATA_DIR": str(tmp_path / "data"), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    r = CliRunner().invoke(cli, list(args), env=env)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        found = failure(r.exception)  # what `freshindex` (cli.main) makes of it: its exit code and line
        assert found is not None, r.exception
        return found[0], found[1]
    return r.exit_code, r.output


def test_golden_sets_commands_register_list_run_remove(svc: Services, tmp_path: Path) -> None:
    svc.close()  # the commands open their own
    golden = tmp_path / "smoke.jsonl"
    golden.write_text('{"thresholds": {"min_hit": 0.9}}\n' + GOLDEN)
    code, out = _cli(tmp_path, "golden-sets", "register", "docs", str(golden), "--min-passage", "0.5", "--json")
    assert code == 0, out
    assert json.loads(out)["thresholds"] == {"min_hit": 0.9, "min_passage": 0.5}
    code, out = _cli(tmp_path, "golden-sets", "list")
    assert code == 0 and "smoke" in out and "not evaluated yet" in out
    code, out = _cli(tmp_path, "golden-sets", "show", "docs", "smoke")
    assert code == 0 and out == golden.read_text()  # as registered: `freshindex eval` can ask it again
    assert _cli(tmp_path, "golden-sets", "show", "docs", "nosuchset")[0] == 1
    code, out = _cli(tmp_path, "golden-sets", "run", "--json")
    assert code == 0, out
    assert [(d["golden"], d["snapshot_id"], d["passed"]) for d in json.loads(out)] == [("smoke", "docs-v1", True)]
    code, out = _cli(tmp_path, "golden-sets", "run")
    assert (code, out.strip()) == (0, "no golden set due")
    code, out = _cli(tmp_path, "golden-sets", "list", "--json")
    assert json.loads(out)[0]["last_metrics"]["hit_ratio"] == 1.0
    assert _cli(tmp_path, "golden-sets", "remove", "docs", "smoke")[0] == 0
    assert _cli(tmp_path, "golden-sets", "list")[1].strip() == "no golden sets"


def test_a_malformed_set_or_an_unknown_kb_is_refused_at_registration(svc: Services, tmp_path: Path) -> None:
    svc.close()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "no expected document", "answer": "must_answer"}\n')
    code, out = _cli(tmp_path, "golden-sets", "register", "docs", str(bad))
    assert code == 2 and "bad.jsonl:1" in out
    good = tmp_path / "good.jsonl"
    good.write_text(GOLDEN)
    code, out = _cli(tmp_path, "golden-sets", "register", "nosuchkb", str(good))
    assert code == 1 and "nosuchkb" in out
    assert _cli(tmp_path, "golden-sets", "list")[1].strip() == "no golden sets"
