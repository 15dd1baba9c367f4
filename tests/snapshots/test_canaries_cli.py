"""`freshindex canaries add` refuses a document that is not indexed; the registry reports work on both engines.

Run as a user would: one subprocess per command, after a real sync of the
example knowledge base (SQLite, then PostgreSQL for the reports).  Each
subprocess gets the default build strategy: these commands record and report,
and neither strategy changes what they print.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.fixture(autouse=True)
def build_strategy() -> None:
    """Overrides the both-strategies fixture of the conftest.  Its variable never reached these commands (``run``
    hands them no FRESHINDEX_* variable of this process): its two parameters ran the very same commands twice."""


@pytest.fixture
def run(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env["FRESHINDEX_DATA_DIR"] = str(tmp_path / "data")
    env["FRESHINDEX_EMBEDDING__PROVIDER"] = "hashing"  # the commands are under test, not the model

    def _run(*args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "freshindex", *args], cwd=ROOT, capture_output=True, text=True,
                              env={**env, **(extra or {})}, timeout=300)

    return _run


def test_canary_for_a_missing_document_is_refused(run, sample_kb: Path) -> None:
    assert run("sources", "add", "docs", "--kind", "folder", "--location", str(sample_kb)).returncode == 0
    # Before any sync nothing is indexed: refused
    early = run("canaries", "add", "How do I roll back?", "--expect", "guides/release.md")
    assert early.returncode == 1 and "no indexed document" in early.stderr
    assert run("sync", "docs", "--json").returncode == 0
    # The README's old example names a document the example kb does not have
    refused = run("canaries", "add", "Who approves refunds?", "--expect", "guides/faq.md")
    assert refused.returncode == 1
    assert "'guides/faq.md'" in refused.stderr and "hold every build" in refused.stderr
    assert json.loads(run("canaries", "list", "--json").stdout) == []
    # The README's example now names a real document
    ok = run("canaries", "add", "How do I roll back a database migration?", "--expect", "guides/release.md",
             "--json")
    assert ok.returncode == 0, ok.stderr
    # --force registers it anyway, with a warning
    forced = run("canaries", "add", "Who approves refunds?", "--expect", "guides/faq.md", "--force")
    assert forced.returncode == 0 and "warning:" in forced.stderr
    keys = sorted(c["expected_key"] for c in json.loads(run("canaries", "list", "--json").stdout))
    assert keys == ["guides/faq.md", "guides/release.md"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_registry_reports_and_reprocess(run, sample_kb: Path, engine: str, request: pytest.FixtureRequest) -> None:
    extra = {}
    if engine == "postgresql":
        extra["FRESHINDEX_REGISTRY__URL"] = request.getfixturevalue("pg_url")
        assert run("db", "upgrade", extra=extra).returncode == 0
    run("sources", "add", "docs", "--kind", "folder", "--location", str(sample_kb), extra=extra)
    (sample_kb / "bad.md").write_bytes(b"\x00\x01\x02" * 100)
    assert run("sync", "docs", "--json", extra=extra).returncode == 0

    def j(*args: str):
        proc = run(*args, "--json", extra=extra)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    runs = j("runs", "list", "--source", "docs")
    assert [r["status"] for r in runs] == ["partial"] and runs[0]["documents"]["failed"] == 1
    assert j("runs", "show", str(runs[0]["id"]))["outcomes"]["failed"] == 1
    assert j("sources", "lag")[0]["source"] == "docs"
    errors = j("documents", "errors")
    assert errors == [{"kb": "default", "source": "docs", "reason": "binary_content", "state": "error",
                       "documents": 1, "last_updated": errors[0]["last_updated"]}]
    assert [f["reason"] for f in j("documents", "failures")] == ["binary_content"]
    assert [d["key"] for d in j("documents", "list", "--state", "error")] == ["bad.md"]
    assert j("changesets", "list") == []
    assert j("changesets", "list", "--status", "applied")[0]["upserts"] > 0
    assert j("tombstones", "pending") == []
    assert j("snapshots", "held") == {"by_check": [], "recent": []}
    assert j("snapshots", "history")[0]["to"] == "default-v1"
    assert j("kbs", "list") == [{"kb": "default", "sources": ["docs"], "snapshots": 1}]
    assert j("kbs", "health")["live_chunks"] > 0
    assert j("locks", "list", "--name", "build:default")[0]["held"] is False
    dry = j("documents", "reprocess", "docs", "--reason", "binary_content", "--dry-run")
    assert dry["documents"] == ["bad.md"]
    assert j("documents", "list", "--key", "bad.md")[0]["etag"] is not None
    j("documents", "reprocess", "docs", "--reason", "binary_content")
    assert j("documents", "list", "--key", "bad.md")[0]["etag"] is None
    assert run("documents", "reprocess", "docs", extra=extra).returncode == 2  # neither --reason nor --key
