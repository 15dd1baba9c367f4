"""One rule for unknown names: every command that takes a source, knowledge base, snapshot or run fails (exit 1)
when the registry does not know it, with one ``error:`` line on stderr and, under ``--json``, one JSON error
object on stdout.

Every case runs the console script in a subprocess against one registry that
knows a synced source (``docs`` in kb ``default``, run 1, snapshot
``default-v1``) and a registered, never built one (``later`` in kb
``unbuilt``).  A walk of the click tree checks that the table below names
every command taking such a name, so a new command cannot skip the rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from tests.conftest import ROOT

SCRIPT = Path(sys.executable).parent / "freshindex"
MISSING = "nosuch"

SOURCE, KB, SNAPSHOT, RUN = "source", "knowledge base", "snapshot", "sync run"

#: (command path, the parameter that names the thing, argv with the unknown name, its kind, the name).
CASES: list[tuple[str, str, list[str], str, str | int]] = [
    ("sync", "source_id", ["sync", MISSING], SOURCE, MISSING),
    ("sources show", "source_id", ["sources", "show", MISSING], SOURCE, MISSING),
    ("sources pause", "source_id", ["sources", "pause", MISSING], SOURCE, MISSING),
    ("sources resume", "source_id", ["sources", "resume", MISSING], SOURCE, MISSING),
    ("sources remove", "source_id", ["sources", "remove", MISSING, "--yes"], SOURCE, MISSING),
    ("sources runs", "source_id", ["sources", "runs", MISSING], SOURCE, MISSING),
    ("sources policy", "source_id", ["sources", "policy", MISSING, "--poll", "60"], SOURCE, MISSING),
    ("sources confirm-deletions", "source_id", ["sources", "confirm-deletions", MISSING, "--count", "1"], SOURCE,
     MISSING),
    ("sources update", "source_id", ["sources", "update", MISSING, "--acl", "staff"], SOURCE, MISSING),
    ("sources lag", "kb", ["sources", "lag", "--kb", MISSING], KB, MISSING),
    ("errors", "source_id", ["errors", MISSING], SOURCE, MISSING),
    ("errors", "run_id", ["errors", "--run", "99"], RUN, 99),
    ("runs list", "source", ["runs", "list", "--source", MISSING], SOURCE, MISSING),
    ("runs list", "kb", ["runs", "list", "--kb", MISSING], KB, MISSING),
    ("runs show", "run_id", ["runs", "show", "99"], RUN, 99),
    ("documents list", "source", ["documents", "list", "--source", MISSING], SOURCE, MISSING),
    ("documents list", "kb", ["documents", "list", "--kb", MISSING], KB, MISSING),
    ("documents errors", "source", ["documents", "errors", "--source", MISSING], SOURCE, MISSING),
    ("documents errors", "kb", ["documents", "errors", "--kb", MISSING], KB, MISSING),
    ("documents failures", "source", ["documents", "failures", "--source", MISSING], SOURCE, MISSING),
    ("documents reprocess", "source_id", ["documents", "reprocess", MISSING, "--reason", "empty"], SOURCE, MISSING),
    ("changesets list", "kb", ["changesets", "list", "--kb", MISSING], KB, MISSING),
    ("tombstones pending", "kb", ["tombstones", "pending", "--kb", MISSING], KB, MISSING),
    ("kbs health", "kb", ["kbs", "health", MISSING], KB, MISSING),
    ("query", "kb", ["query", "anything", "--kb", MISSING], KB, MISSING),
    ("eval", "kb", ["eval", str(ROOT / "bench" / "goldens" / "structlog_repo" / "questions.jsonl"), "--kb", MISSING],
     KB, MISSING),
    ("audit denials", "kb", ["audit", "denials", "--kb", MISSING], KB, MISSING),
    ("audit refusals", "kb", ["audit", "refusals", "--kb", MISSING], KB, MISSING),
    ("ocr report", "kb", ["ocr", "report", "--kb", MISSING], KB, MISSING),
    ("snapshots list", "kb", ["snapshots", "list", "--kb", MISSING], KB, MISSING),
    ("snapshots build", "kb", ["snapshots", "build", MISSING], KB, MISSING),
    ("snapshots show", "snapshot_id", ["snapshots", "show", "default-v9"], SNAPSHOT, "default-v9"),
    ("snapshots calibrate", "snapshot_id", ["snapshots", "calibrate", "default-v9"], SNAPSHOT, "default-v9"),
    ("snapshots calibrate", "kb", ["snapshots", "calibrate", "--kb", MISSING], KB, MISSING),
    ("snapshots verify", "snapshot_id", ["snapshots", "verify", "default-v9"], SNAPSHOT, "default-v9"),
    ("snapshots verify", "kb", ["snapshots", "verify", "--kb", MISSING], KB, MISSING),
    ("snapshots reconcile", "kb", ["snapshots", "reconcile", "--kb", MISSING], KB, MISSING),
    ("snapshots swap", "snapshot_id", ["snapshots", "swap", "default-v9", "--reason", "x"], SNAPSHOT, "default-v9"),
    ("snapshots rollback", "to", ["snapshots", "rollback", "--to", "default-v9"], SNAPSHOT, "default-v9"),
    ("snapshots rollback", "kb", ["snapshots", "rollback", "--kb", MISSING], KB, MISSING),
    ("snapshots prune", "kb", ["snapshots", "prune", "--kb", MISSING], KB, MISSING),
    ("snapshots archive", "snapshot_id", ["snapshots", "archive", "default-v9"], SNAPSHOT, "default-v9"),
    ("snapshots archive", "kb", ["snapshots", "archive", "--kb", MISSING], KB, MISSING),
    ("snapshots held", "kb", ["snapshots", "held", "--kb", MISSING], KB, MISSING),
    ("snapshots history", "kb", ["snapshots", "history", "--kb", MISSING], KB, MISSING),
    ("canaries add", "kb", ["canaries", "add", "q", "--expect", "a.md", "--kb", MISSING, "--force"], KB, MISSING),
    ("canaries list", "kb", ["canaries", "list", "--kb", MISSING], KB, MISSING),
    ("golden-sets register", "kb", ["golden-sets", "register", MISSING,
                                    str(ROOT / "bench" / "goldens" / "structlog_repo" / "questions.jsonl")], KB, MISSING),
    ("golden-sets list", "kb", ["golden-sets", "list", "--kb", MISSING], KB, MISSING),
    ("golden-sets show", "kb", ["golden-sets", "show", MISSING, "smoke"], KB, MISSING),
    ("golden-sets remove", "kb", ["golden-sets", "remove", MISSING, "smoke"], KB, MISSING),
    ("golden-sets run", "kb", ["golden-sets", "run", "--kb", MISSING], KB, MISSING),
]

#: Commands that name something without the shared check, and why.
EXEMPT = {
    ("sources add", "source_id"): "it creates the source",
    ("sources add", "kb"): "a new source's kb comes into being with it",
    ("snapshots restore", "snapshot_id"): "it names an archived snapshot the registry may not have "
                                          "(an unknown one fails: no archive)",
    ("mcp", "kb"): "the MCP server's default kb is checked by the HTTP API on every call (404)",
}

#: Names of the parameters that name a source, kb, snapshot or run.
NAME_PARAMS = {"source_id", "source", "kb", "snapshot_id", "to", "run_id", "run"}


def _walk(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _walk(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A registry with source ``docs`` (kb default) synced once and source ``later`` (kb unbuilt) never built."""
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    root = tmp_path_factory.mktemp("names")
    src = root / "src"
    src.mkdir()
    (src / "a.md").write_text("# Alpha\n\nThe alpha service restarts nightly at two.\n")
    svc = Services(load_settings(data_dir=root / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("docs", kind="folder", location=str(src), owner="unknown", kb="default")
        svc.registry.add_source("later", kind="folder", location=str(src), owner="unknown", kb="unbuilt")
        assert sync_inline(svc, "docs").snapshot.id == "default-v1"
    finally:
        svc.close()
    return root / "data"


def _env(data_dir: Path, archive: Path) -> dict[str, str]:
    return {"FRESHINDEX_DATA_DIR": str(data_dir), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing",
            "FRESHINDEX_SNAPSHOTS__ARCHIVE_URI": str(archive)}


@pytest.fixture
def run(data_dir: Path, tmp_path: Path):
    """The console script in a subprocess, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env.update(_env(data_dir, tmp_path / "archive"))

    def _run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)

    return _run


@pytest.fixture
def run_here(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]):
    """The console script's ``main()`` in this process (the same code path as the script, ten times faster
    than a subprocess per case on two busy cores): exit code, stdout and stderr."""
    from freshindex.cli import main

    for key, value in _env(data_dir, tmp_path / "archive").items():
        monkeypatch.setenv(key, value)

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


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize(("path", "param", "argv", "kind", "name"), CASES,
                         ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_an_unknown_name_fails_with_exit_1(run_here, path: str, param: str, argv: list[str], kind: str,
                                           name: str | int, as_json: bool) -> None:
    shown = repr(name) if isinstance(name, str) else str(name)
    proc = run_here(*argv, *(["--json"] if as_json else []))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    line = _one_error_line(proc)
    assert line.startswith(f"error: no {kind} {shown} (see `freshindex "), line
    if not as_json:
        assert proc.stdout == ""
        return
    body = json.loads(proc.stdout)  # the whole of stdout is the one object: nothing half-formed before it
    assert body == {"error": "NotFoundError", "detail": line[len("error: "):], "exit_code": 1, "kind": kind,
                    "name": name}


def test_every_command_that_takes_a_name_is_in_the_table() -> None:
    from freshindex.cli import cli

    covered = {(c[0], c[1]) for c in CASES}
    taking = {(path, p.name) for path, command in _walk(cli) for p in command.params if p.name in NAME_PARAMS}
    assert taking - covered - set(EXEMPT) == set()
    assert covered | set(EXEMPT) <= taking  # the table names no parameter that is not there


def test_every_json_option_reports_failures_as_json() -> None:
    """Every ``--json`` is the shared option, whose flag makes a failure a JSON object (freshindex/cli.py)."""
    from freshindex.cli import cli
    from freshindex.cli.support import json_option

    @json_option
    def probe(as_json: bool) -> None: ...

    shared = probe.__click_params__[0].callback  # type: ignore[attr-defined]
    plain = [path for path, command in _walk(cli) for p in command.params
             if p.name == "as_json" and p.callback is not shared]
    assert plain == []


def test_query_tells_an_unknown_kb_from_one_not_built_yet(run) -> None:
    """As HTTP: an unknown kb is not found (404 there, exit 1 here); a registered kb with no snapshot yet
    answers insufficient evidence (no_snapshot) and exits 0."""
    unbuilt = run("query", "alpha", "--kb", "unbuilt", "--json")
    assert unbuilt.returncode == 0, unbuilt.stderr
    packet = json.loads(unbuilt.stdout)
    assert packet["insufficient_evidence"] is True and "no_snapshot" in packet["reason"]
    unknown = run("query", "alpha", "--kb", "unbuilt2", "--json")
    assert unknown.returncode == 1
    assert json.loads(unknown.stdout)["kind"] == "knowledge base"


@pytest.mark.parametrize("argv", [
    ["errors", "docs"], ["errors", "--run", "1"], ["documents", "list", "--source", "docs", "--kb", "default"],
    ["runs", "show", "1"], ["kbs", "health", "unbuilt"], ["snapshots", "show", "default-v1"],
    ["snapshots", "list", "--kb", "unbuilt"], ["sources", "runs", "later"], ["audit", "denials", "--kb", "default"],
    ["audit", "refusals", "--kb", "default"],
], ids=" ".join)
def test_a_known_name_passes_the_check(run_here, argv: list[str]) -> None:
    proc = run_here(*argv, "--json")
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)


def test_other_failures_under_json_are_one_json_object_too(run) -> None:
    """Not only unknown names: any failure of a --json command (here a usage error and a missing ticket)."""
    usage = run("sync", "--json")
    assert usage.returncode == 2
    assert json.loads(usage.stdout) == {"error": "UsageError", "detail": "give one SOURCE_ID or --all", "exit_code": 2}
    ticket = run("syncs", "show", "9", "--json")
    assert ticket.returncode == 1
    assert json.loads(ticket.stdout) == {"error": "NotFoundError", "detail": "no sync ticket 9", "exit_code": 1}


def test_the_rule_holds_when_the_group_runs_in_click_s_standalone_mode(data_dir: Path, tmp_path: Path) -> None:
    """``CliRunner`` (and ``cli()`` called by an application) run without ``main()``: same exit, line and JSON."""
    from click.testing import CliRunner

    from freshindex.cli import cli

    env = _env(data_dir, tmp_path / "archive")
    text = CliRunner().invoke(cli, ["documents", "list", "--source", MISSING], env=env)
    assert text.exit_code == 1 and text.output == f"error: no source {MISSING!r} (see `freshindex sources list`)\n"
    as_json = CliRunner().invoke(cli, ["documents", "list", "--source", MISSING, "--json"], env=env)
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["name"] == MISSING
