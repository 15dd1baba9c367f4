"""The console script, run as a user would (a subprocess per command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.fixture
def run(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env["FRESHINDEX_DATA_DIR"] = str(tmp_path / "data")

    def _run(*args: str, check: bool = True, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "freshindex", *args], cwd=ROOT, capture_output=True,
                              text=True, env={**env, **(extra_env or {})}, timeout=300)
        if check and proc.returncode != 0:
            raise AssertionError(f"exit {proc.returncode}\nstdout:{proc.stdout}\nstderr:{proc.stderr}")
        return proc

    return _run


def test_register_sync_query_and_inspect(run, sample_kb: Path) -> None:
    from freshindex.registry.db import head_revision

    assert json.loads(run("db", "upgrade", "--json").stdout)["to"] == head_revision()
    run("sources", "add", "docs", "--kind", "folder", "--location", str(sample_kb), "--owner", "platform")
    listed = json.loads(run("sources", "list", "--json").stdout)
    assert [s["id"] for s in listed] == ["docs"] and listed[0]["acl"] == ["public"]
    proc = run("sync", "docs", "--json")
    report = json.loads(proc.stdout)
    assert report["status"] == "succeeded" and report["active_snapshot"] == "default-v1"
    # --json keeps stdout for the report; progress goes to stderr as JSON lines, ending at 100 %.
    progress = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith('{"event": "sync_progress"')]
    assert progress and progress[-1] == {"event": "sync_progress", "source": "docs", "done": 8, "total": 8,
                                         "percent": 100.0}
    assert [p["done"] for p in progress] == sorted(p["done"] for p in progress)
    assert report["documents"]["added"] == 8 and report["chunks_embedded"] > 0
    again = json.loads(run("sync", "--all", "--json").stdout)
    assert again["chunks_embedded"] == 0 and again["build"]["status"] == "unchanged"
    packet = json.loads(run("query", "What is the monthly price of the Team plan?", "--json").stdout)
    assert packet["evidence"][0]["key"] == "reference/pricing.csv"
    assert "| Team | 199 |" in packet["evidence"][0]["text"]
    text = run("query", "How do I roll back a database migration?").stdout
    assert "[1]" in text and "guides/release.md#database-migration" in text
    snaps = json.loads(run("snapshots", "list", "--json").stdout)
    assert [(s["id"], s["status"]) for s in snaps] == [("default-v1", "active")]


def test_sync_exit_codes_and_error_listing(run, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.md").write_bytes(b"\x00\x01\x02" * 100)
    run("sources", "add", "bad", "--kind", "folder", "--location", str(bad))
    proc = run("sync", "bad", check=False)
    assert proc.returncode == 1
    assert "a.md: binary_content" in proc.stdout
    errors = json.loads(run("errors", "bad", "--json").stdout)
    assert errors[0]["reason"] == "binary_content"
    missing = run("sync", "nope", check=False)
    assert missing.returncode == 1 and "no source 'nope'" in missing.stderr
    usage = run("sync", check=False)
    assert usage.returncode == 2


def test_config_show_redacts_secrets(run) -> None:
    env = {"FRESHINDEX_BROKER__URL": "redis://:hunter2@127.0.0.1:6379/0", "FRESHINDEX_API__TOKEN": "tok-9"}
    shown = run("config", "show", "--json", extra_env=env).stdout
    assert "hunter2" not in shown and "tok-9" not in shown
    assert json.loads(shown)["broker"]["url"] == "redis://:***@127.0.0.1:6379/0"
    human = run("config", "show", extra_env=env).stdout
    assert "[broker]" in human and "hunter2" not in human


def test_bad_configuration_is_a_usage_error(run) -> None:
    proc = run("sources", "list", check=False, extra_env={"FRESHINDEX_VECTOR_STORE__KIND": "nope"})
    assert proc.returncode == 2 and "invalid configuration" in proc.stderr


def test_snapshot_commands(run, tmp_path: Path) -> None:
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    env = {"FRESHINDEX_EMBEDDING__PROVIDER": "hashing", "FRESHINDEX_SNAPSHOTS__ARCHIVE_URI": str(tmp_path / "arch")}
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# A\n\nthe first version")
    # Given two built syncs, made in this process: `sources add` and `sync` are run as commands above, the
    # snapshot commands are what this test runs
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("s", kind="folder", location=str(src), owner="unknown", kb="default")
        assert sync_inline(svc, "s").snapshot.id == "default-v1"
        (src / "a.md").write_text("# A\n\nthe second version")
        assert sync_inline(svc, "s").snapshot.id == "default-v2"
    finally:
        svc.close()
    shown = json.loads(run("snapshots", "show", "default-v2", "--json", extra_env=env).stdout)
    assert shown["serving"] is True and shown["parent_id"] == "default-v1" and shown["strategy"] == "incremental"
    assert json.loads(run("snapshots", "verify", "--json", extra_env=env).stdout)["ok"] is True
    back = json.loads(run("snapshots", "rollback", "--reason", "test", "--json", extra_env=env).stdout)
    assert back["snapshot_id"] == "default-v1" and back["direction"] == "back"
    fwd = json.loads(run("snapshots", "swap", "default-v2", "--reason", "ok", "--json", extra_env=env).stdout)
    assert fwd["direction"] == "forward"
    canary = json.loads(run("canaries", "add", "second version", "--expect", "a.md", "--json", extra_env=env).stdout)
    assert canary["expected_key"] == "a.md"
    archived = json.loads(run("snapshots", "archive", "--json", extra_env=env).stdout)
    assert archived["snapshot_id"] == "default-v2" and Path(archived["uri"]).exists()
    fresh = {**env, "FRESHINDEX_DATA_DIR": str(tmp_path / "fresh")}
    restored = json.loads(run("snapshots", "restore", "default-v2", "--json", extra_env=fresh).stdout)
    assert restored["status"] == "active"
    packet = json.loads(run("query", "second version", "--json", extra_env=fresh).stdout)
    assert packet["snapshot_id"] == "default-v2" and "second" in packet["evidence"][0]["text"]
    pruned = json.loads(run("snapshots", "prune", "--json", extra_env=env).stdout)
    assert pruned["pruned"] == []
    missing = run("snapshots", "swap", "default-v9", "--reason", "x", check=False, extra_env=env)
    assert missing.returncode == 1 and "no snapshot" in missing.stderr
