"""The deletion guard: a sync that would tombstone too much of a source is held.

Given a folder source of 10 indexed documents, when half of them (or all of
them, the folder emptied) disappear, then the sync stages no deletion, the
documents keep serving, the run ends ``held`` and the CLI exits 4; after
``freshindex sources confirm-deletions`` the next sync applies them.  A small
deletion (1 of 10) goes through at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.planner import deletion_hold
from freshindex.workers.runner import EXIT_DELETIONS_HELD, EXIT_OK, sync_inline
from tests.conftest import ROOT


def _write_docs(folder: Path, n: int = 10) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"topic-{i:02d}.md").write_text(
            f"# Topic {i}\n\nThe codeword of topic number {i} is zebra{i}quartz. "
            f"Only document {i} mentions zebra{i}quartz.\n"
        )


def _keys(packet) -> list[str]:
    return [e.key for e in packet.evidence]


@pytest.mark.parametrize(
    ("deleting", "live", "listed", "held"),
    [
        (1, 2, 1, False),   # a small source losing one of two documents
        (1, 1, 1, False),   # renaming the only document of a source
        (1, 1, 0, True),    # the listing came back empty: always held
        (2, 3, 1, False),   # 67 %, but under the minimum of 3 deletions
        (3, 10, 7, False),  # exactly the 30 % limit is allowed
        (4, 10, 6, True),   # 40 % > 30 %
        (10, 10, 3, True),  # every document gone, new unrelated ones listed
        (0, 10, 10, False),
    ],
)
def test_the_hold_rule(deleting: int, live: int, listed: int, held: bool) -> None:
    why = deletion_hold(deleting=deleting, live=live, listed=listed, max_share=0.3, min_held=3)
    assert (why is not None) == held
    if held:
        assert f"would delete {deleting} of {live} documents" in why and "limit 30 %" in why


@pytest.fixture
def svc(tmp_path: Path):
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        yield services
    finally:
        services.close()


def test_an_emptied_folder_is_held_and_a_small_deletion_is_applied(svc: Services, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    _write_docs(kb)
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    assert sync_inline(svc, "docs").run.status == "succeeded"

    # Small deletion: 1 of 10 goes through.
    (kb / "topic-09.md").unlink()
    small = sync_inline(svc, "docs")
    assert small.run.status == "succeeded" and small.exit_code == EXIT_OK
    assert small.run.summary["documents"]["deleted"] == 1 and small.run.held_reason is None

    # The folder is emptied (a mount that came back empty): nothing is tombstoned.
    for path in kb.iterdir():
        path.unlink()
    held = sync_inline(svc, "docs")
    print("held reason:", held.run.held_reason)
    assert held.run.status == "held" and held.exit_code == EXIT_DELETIONS_HELD
    assert held.as_dict()["held_reason"] == held.run.held_reason
    assert "would delete 9 of 9 documents (100 %, limit 30 %)" in held.run.held_reason
    assert "freshindex sources confirm-deletions docs" in held.run.held_reason
    assert held.run.summary["documents"]["deleted"] == 0 and held.run.summary["tombstones"] == 0
    assert held.run.summary["held"]["deletions"] == 9
    states = {d.key: d.state for d in svc.registry.documents_for_source("docs").values()}
    assert states["topic-03.md"] == "active"
    assert "topic-03.md" in _keys(svc.client.retrieve("codeword zebra3quartz", kb="default"))
    # The per-process counter and the registry-derived gauge an alert reads.
    assert svc.metrics.value("freshindex_deletions_held_total", source="docs") == 1
    svc.metrics.render()  # a scrape runs the health collector
    assert svc.metrics.value("freshindex_deletions_held", kb="default", source="docs") == 9
    assert svc.registry.health("default")["deletions_held_by_source"] == {"docs": 9}

    # Without a confirmation the next sync holds again.
    assert sync_inline(svc, "docs").run.status == "held"
    # The documents come back: nothing to delete, the gauge returns to 0.
    _write_docs(kb, 9)
    back = sync_inline(svc, "docs")
    assert back.run.status == "succeeded" and back.run.summary["documents"]["deleted"] == 0
    assert svc.registry.held_deletions("default") == {"docs": 0}


def test_a_confirmation_covers_only_its_count_and_is_used_once(svc: Services, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    _write_docs(kb)
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    for i in range(5):
        (kb / f"topic-{i:02d}.md").unlink()
    svc.registry.confirm_deletions("docs", 4, actor="test")
    short = sync_inline(svc, "docs")
    assert short.run.status == "held" and "the confirmation covered only 4" in short.run.held_reason
    assert "confirmed_deletions" not in svc.registry.get_source("docs").options  # used up
    svc.registry.confirm_deletions("docs", 5, actor="test")
    applied = sync_inline(svc, "docs")
    assert applied.run.status == "succeeded" and applied.run.summary["documents"]["deleted"] == 5
    assert "topic-00.md" not in _keys(svc.client.retrieve("codeword zebra0quartz", kb="default"))


@pytest.fixture
def cli(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env.update(FRESHINDEX_DATA_DIR=str(tmp_path / "data"), FRESHINDEX_EMBEDDING__PROVIDER="hashing")

    def run(*args: str, code: int = 0) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "freshindex", *args], cwd=ROOT, capture_output=True, text=True,
                              env=env, timeout=120)
        assert proc.returncode == code, f"exit {proc.returncode}\nstdout:{proc.stdout}\nstderr:{proc.stderr}"
        return proc

    return run


@pytest.mark.slow  # nine CLI processes: 25 s on an idle 2-core machine
def test_half_the_documents_deleted_is_held_until_confirmed_on_the_cli(cli, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    _write_docs(kb)
    cli("sources", "add", "docs", "--kind", "folder", "--location", str(kb))
    assert json.loads(cli("sync", "docs", "--json").stdout)["documents"]["added"] == 10

    # Given 5 of 10 deleted and one edited.
    for i in range(5):
        (kb / f"topic-{i:02d}.md").unlink()
    (kb / "topic-07.md").write_text("# Topic 7\n\nTopic seven now speaks of walrus7amber only.\n")
    held = json.loads(cli("sync", "docs", "--json", code=EXIT_DELETIONS_HELD).stdout)
    # Then the deletions wait, the edit is indexed and built.
    assert held["status"] == "held"
    assert "would delete 5 of 10 documents (50 %, limit 30 %)" in held["held_reason"]
    assert held["documents"]["deleted"] == 0 and held["tombstones_written"] == 1  # the edit's old chunk
    assert held["documents"]["modified"] == 1 and held["build"]["status"] == "built"
    text = cli("sync", "docs", code=EXIT_DELETIONS_HELD).stdout
    assert "deletions HELD: would delete 5 of 10" in text
    packet = json.loads(cli("query", "codeword zebra2quartz", "--json").stdout)
    assert "topic-02.md" in [e["key"] for e in packet["evidence"]]
    edited = json.loads(cli("query", "walrus7amber", "--json").stdout)
    assert any(e["key"] == "topic-07.md" and "walrus7amber" in e["text"] for e in edited["evidence"])

    # When confirmed, the next sync applies them.
    confirmed = json.loads(cli("sources", "confirm-deletions", "docs", "--json").stdout)
    assert confirmed["confirmed_deletions"] == 5 and "topic-00.md" in confirmed["held_keys"]
    applied = json.loads(cli("sync", "docs", "--json").stdout)
    assert applied["status"] == "succeeded" and applied["documents"]["deleted"] == 5
    assert applied["tombstones_written"] >= 5 and applied["held_reason"] is None
    packet = json.loads(cli("query", "codeword zebra2quartz", "--json").stdout)
    assert "topic-02.md" not in [e["key"] for e in packet["evidence"]]
    # Nothing is held any more: confirming without --count is a usage error.
    cli("sources", "confirm-deletions", "docs", code=2)
