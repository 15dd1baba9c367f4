"""Progress through the whole sync: after the documents, the build's stages (building, verifying, swapping)
show on a terminal and as JSON progress lines, so the last part of a sync no longer goes quiet."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from freshindex.cli import sync as sync_commands
from tests.conftest import ROOT, distributed_env, worker_process


@pytest.fixture
def source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"doc{i}.md").write_text(f"# Doc {i}\n\nThe service number {i} restarts nightly.\n")
    monkeypatch.setenv("FRESHINDEX_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FRESHINDEX_EMBEDDING__PROVIDER", "hashing")
    return src


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]):
    """The console script's ``main()`` in this process: exit code, stdout, stderr."""
    from freshindex.cli import main

    def _run(*args: str) -> subprocess.CompletedProcess:
        capfd.readouterr()
        monkeypatch.setattr(sys, "argv", ["freshindex", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return _run


def _in_order(seen: list[str], wanted: list[str]) -> bool:
    it = iter(seen)
    return all(w in it for w in wanted)


def test_json_progress_names_the_build_verify_and_swap_stages(cli, source: Path) -> None:
    assert cli("sources", "add", "docs", "--kind", "folder", "--location", str(source)).returncode == 0
    proc = cli("sync", "docs", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["build"]["status"] == "built"  # stdout: the report alone
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    events = [line["event"] for line in lines]
    stages = [line for line in lines if line["event"] == "sync_stage"]
    names = [s["stage"] for s in stages]
    # Given the documents' progress first, then the stages of the build, then done.
    assert events.index("sync_stage") > max(i for i, e in enumerate(events) if e == "sync_progress")
    assert _in_order(names, ["building", "verifying", "swapping", "done"]) and names[-1] == "done", names
    assert all(s["source"] == "docs" for s in stages)
    at = [s["at_s"] for s in stages]
    assert at == sorted(at)


def test_a_terminal_shows_each_stage_with_its_duration(cli, source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync_commands, "_terminal", lambda: True)
    assert cli("sources", "add", "docs", "--kind", "folder", "--location", str(source)).returncode == 0
    proc = cli("sync", "docs")
    assert proc.returncode == 0, proc.stderr
    shown = re.findall(r"sync docs: (\w+)\.\.\. (\d+\.\d)s\n", proc.stderr)
    assert _in_order([name for name, _ in shown], ["building", "verifying", "swapping"]), proc.stderr
    assert "snapshot: default-v1 now active" in proc.stdout


def test_a_sync_that_builds_nothing_shows_no_stage(cli, source: Path) -> None:
    assert cli("sources", "add", "docs", "--kind", "folder", "--location", str(source)).returncode == 0
    proc = cli("sync", "docs", "--no-build", "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"sync_stage"' not in proc.stderr


def test_stage_durations_come_from_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a terminal and a clock at 0, 1, 3.5 and 4 s, each stage line ends with its own duration."""
    err = io.StringIO()
    err.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr(sys, "stderr", err)
    times = iter([0.0, 1.0, 3.5, 4.0])
    with sync_commands._Progress("sync s", source="s", clock=lambda: next(times)) as progress:
        progress.stage("building")
        progress.stage("building")  # the same stage again: no new line
        progress.stage("verifying")
    assert err.getvalue() == "sync s: building... 2.5s\nsync s: verifying... 0.5s\n"


def test_documents_after_a_stage_show_again_and_the_build_after_them_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync first builds what a crashed run staged (a stage), then reads its documents, then builds its own."""
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    times = iter(float(t) for t in range(10))
    with sync_commands._Progress("sync s", json_lines=True, source="s", clock=lambda: next(times)) as progress:
        progress.stage("building")
        progress(1, 1, "a.md")
        progress.stage("building")
    assert [(line["event"], line.get("stage")) for line in map(json.loads, err.getvalue().splitlines())] == [
        ("sync_stage", "building"), ("sync_progress", None), ("sync_stage", "building"), ("sync_stage", "done")]


def test_json_stage_lines_carry_the_seconds_since_the_sync_began(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    times = iter([10.0, 12.0, 13.5, 14.0])
    with sync_commands._Progress("sync s", json_lines=True, source="s", clock=lambda: next(times)) as progress:
        progress(2, 2, "b.md")
        progress.stage("building")
        progress.stage("swapping")
    lines = [json.loads(line) for line in err.getvalue().splitlines()]
    assert lines == [
        {"event": "sync_progress", "source": "s", "done": 2, "total": 2, "percent": 100.0},
        {"event": "sync_stage", "source": "s", "stage": "building", "at_s": 2.0},
        {"event": "sync_stage", "source": "s", "stage": "swapping", "at_s": 3.5},
        {"event": "sync_stage", "source": "s", "stage": "done", "at_s": 4.0},
    ]


def test_a_distributed_sync_shows_the_stages_the_registry_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a build worker works, the follower shows building, then swapping once the version is verified."""
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    snapshots: list[SimpleNamespace] = []
    registry = SimpleNamespace(list_snapshots=lambda kb: list(snapshots))
    clock = iter(float(t) for t in range(10))
    with sync_commands._Progress("sync s", json_lines=True, source="s", clock=lambda: next(clock)) as progress:
        observe = sync_commands._registry_stages(registry, progress)
        observe(SimpleNamespace(status="running", build_status=None, kb="default"))  # documents: the bar's
        observe(SimpleNamespace(status="succeeded", build_status="pending", kb="default"))  # queued for a builder
        snapshots.append(SimpleNamespace(id="default-v2", status="building"))
        observe(SimpleNamespace(status="succeeded", build_status="pending", kb="default"))
        snapshots[0] = SimpleNamespace(id="default-v2", status="verified")
        observe(SimpleNamespace(status="succeeded", build_status="pending", kb="default"))
        observe(SimpleNamespace(status="succeeded", build_status="built", kb="default"))
    assert [json.loads(line)["stage"] for line in err.getvalue().splitlines()] == ["building", "swapping", "done"]


def test_a_build_that_ends_between_two_polls_is_still_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower first sees the run already built (the build fell between polls): it shows building, then done;
    a run that built nothing shows no stage."""
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    registry = SimpleNamespace(list_snapshots=lambda kb: [])
    clock = iter(float(t) for t in range(10))
    with sync_commands._Progress("sync s", json_lines=True, source="s", clock=lambda: next(clock)) as progress:
        observe = sync_commands._registry_stages(registry, progress)
        observe(SimpleNamespace(status="running", build_status=None, kb="default"))
        observe(SimpleNamespace(status="succeeded", build_status="built", kb="default"))
    assert [json.loads(line)["stage"] for line in err.getvalue().splitlines()] == ["building", "done"]
    err.truncate(0), err.seek(0)
    with sync_commands._Progress("sync s", json_lines=True, source="s", clock=lambda: 0.0) as progress:
        sync_commands._registry_stages(registry, progress)(
            SimpleNamespace(status="succeeded", build_status="unchanged", kb="default"))
    assert err.getvalue() == ""


@pytest.mark.services
@pytest.mark.slow
def test_a_distributed_sync_followed_from_the_cli_shows_its_build(tmp_path: Path, source: Path, pg_url: str,
                                                                  redis_url: str) -> None:
    """Given a Celery worker on Redis and the registry on PostgreSQL, the CLI that follows the run shows the
    build the worker does as a stage (read from the registry through ``sync_distributed(on_poll=...)``)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")},
           **distributed_env(tmp_path, pg_url, redis_url, "fi-stages"),
           "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    subprocess.run([sys.executable, "-m", "freshindex", "sources", "add", "docs", "--kind", "folder", "--location",
                    str(source)], cwd=ROOT, env=env, check=True, capture_output=True)
    with worker_process(env, tmp_path / "worker.log", "stages"):
        proc = subprocess.run([sys.executable, "-m", "freshindex", "sync", "docs", "--json"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stderr[-2000:], (tmp_path / "worker.log").read_text()[-2000:])
    assert json.loads(proc.stdout)["build"]["status"] == "built"
    names = [json.loads(line)["stage"] for line in proc.stderr.splitlines() if line.startswith('{"event": "sync_stage"')]
    assert names[0] == "building" and names[-1] == "done" and set(names) <= {"building", "swapping", "done"}, names
