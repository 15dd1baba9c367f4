"""``freshindex eval`` run as a user would: a knowledge base synced by the CLI, a golden set, the exit code as a gate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def cli(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env.update(FRESHINDEX_DATA_DIR=str(tmp_path / "data"), FRESHINDEX_EMBEDDING__PROVIDER="hashing")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "freshindex", *args], cwd=tmp_path, capture_output=True,
                              text=True, env=env, timeout=300)

    src = tmp_path / "src"
    src.mkdir()
    (src / "install.md").write_text("# Install\n\nTo install freshindex run pip install freshindex on Python 3.11.\n")
    (src / "backup.md").write_text("# Backup\n\nThe backup window opens at 02:00 UTC every night.\n")
    assert run("sources", "add", "wiki", "--kind", "folder", "--location", str(src), "--kb", "docs").returncode == 0
    assert run("sync", "wiki").returncode == 0
    return run


def _golden(path: Path, *lines: dict) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


OK = {"id": "install", "question": "How do I install freshindex with pip?", "expected": "install.md",
      "required_passage": "pip install freshindex", "tags": ["setup"]}
REFUSE = {"id": "flux", "question": "What is the zorblax quantum flux setting of the install?",
          "answer": "must_refuse"}
LOST = {"id": "lost", "question": "When does the backup window open?", "expected": "backup.md",
        "required_passage": "the backup window opens at 03:00 UTC"}


def test_the_exit_code_is_the_thresholds_gate(cli, tmp_path: Path) -> None:
    # Given a golden set whose header asks hit@k 1.0, and whose questions all pass
    golden = _golden(tmp_path / "g.jsonl", {"thresholds": {"min_hit": 1.0}}, OK, REFUSE)
    ran = cli("eval", str(golden), "--kb", "docs", "--json", "--report", str(tmp_path / "r.md"))
    # Then it exits 0 with the figures, and writes the Markdown report
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert out["figures"]["hit_at_k"] == 1.0 and out["figures"]["refusal_recall"] == 1.0
    assert out["by_verdict"] == {"ok": 2} and out["by_tag"]["setup"]["passed"] == 1 and out["passed"] is True
    assert "| install | must_answer | ok |" in (tmp_path / "r.md").read_text()
    # When a question's passage is not in its document and the command line asks passage@k 1.0
    golden = _golden(tmp_path / "g2.jsonl", {"thresholds": {"min_hit": 1.0}}, OK, LOST)
    failed = cli("eval", str(golden), "--kb", "docs", "--min-passage", "1.0", "--report", str(tmp_path / "r.html"))
    # Then it exits 1, naming the gate and the question's verdict
    assert failed.returncode == 1, failed.stderr
    assert "gate min_passage 1.0 not met: 0.500" in failed.stdout and "lost: parse_lost at parse" in failed.stdout
    assert "<td>parse_lost</td>" in (tmp_path / "r.html").read_text()
    # and a gate a lower command-line threshold meets exits 0 again
    assert cli("eval", str(golden), "--kb", "docs", "--min-passage", "0.5").returncode == 0


def test_a_malformed_golden_set_or_unknown_kb_is_refused_in_one_line(cli, tmp_path: Path) -> None:
    bad = _golden(tmp_path / "bad.jsonl", {"id": "x", "question": "q?", "answer": "maybe"})
    ran = cli("eval", str(bad), "--kb", "docs")
    assert ran.returncode == 2 and "bad.jsonl:1: answer must be one of" in ran.stderr
    assert cli("eval", str(bad), "--kb", "nope").returncode == 1


def test_stages_prints_the_ablation_side_by_side(cli, tmp_path: Path) -> None:
    golden = _golden(tmp_path / "g.jsonl", OK, REFUSE)
    out = json.loads(cli("eval", str(golden), "--kb", "docs", "--stages", "--json").stdout)
    rows = {r["row"]: r for r in out["ablation"]}
    assert list(rows) == ["dense+lexical", "+filters", "+rerank", "+group", "+refusal (all)"]
    assert rows["dense+lexical"]["disabled_stages"] == ["filter", "group", "refuse", "rerank"]
    # without the refusal stage the question that must be refused is answered; with it, refused
    assert rows["+group"]["refusal_recall"] == 0.0 and rows["+refusal (all)"]["refusal_recall"] == 1.0
    text = cli("eval", str(golden), "--kb", "docs", "--stages", "--report", str(tmp_path / "a.md")).stdout
    assert text.splitlines()[0].startswith("| row | stages off | hit_at_k")
    assert (tmp_path / "a.md").read_text().startswith("# Ablation\n\n| row | stages off |")
