"""Loud configuration: the console script says what is wrong, on one line, with the right exit code.

Every test runs the real console script (``.venv/bin/freshindex``) in a
subprocess.  File permissions are tested with root's permission-override
capabilities dropped (``setpriv``): the tests run as root, who reads and
writes a mode-000 folder anyway, and a root process without
CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH is refused like any user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = Path(sys.executable).parent / "freshindex"
#: Run as root without the capabilities that bypass file permissions.
NO_DAC = ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


@pytest.fixture
def run(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env.update({"FRESHINDEX_DATA_DIR": str(tmp_path / "data"), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"})

    def _run(*args: str, env_: dict[str, str] | None = None, unset: tuple[str, ...] = (),
             prefix: list[str] | None = None) -> subprocess.CompletedProcess:
        full = {k: v for k, v in {**env, **(env_ or {})}.items() if k not in unset}
        return subprocess.run([*(prefix or []), str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True,
                              env=full, timeout=300)

    return _run


def _one_error(proc: subprocess.CompletedProcess) -> str:
    """The one line on stderr (no traceback), which starts with ``error:``."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    return lines[0]


# -- a data dir that does not exist -------------------------------------------------------


READERS = [
    ("query", "what is the price?"), ("errors",), ("documents", "list"), ("snapshots", "list"),
    ("snapshots", "show", "default-v1"), ("sources", "list"), ("sources", "show", "docs"), ("kbs", "health"),
    ("runs", "list"), ("keys", "list"), ("canaries", "list"), ("audit", "denials"), ("sources", "lag"),
]


@pytest.mark.parametrize("args", READERS, ids=lambda a: " ".join(a[:2]))
def test_a_reading_command_on_a_missing_data_dir_fails_and_says_where_it_looked(run, tmp_path: Path,
                                                                                args: tuple[str, ...]) -> None:
    typo = tmp_path / "dta"
    proc = run(*args, env_={"FRESHINDEX_DATA_DIR": str(typo)})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    line = _one_error(proc)
    assert f"data dir {typo} does not exist (looked for the " in line and "FRESHINDEX_DATA_DIR" in line
    assert not typo.exists()  # nothing was created on the way
    assert proc.stdout == ""


def test_commands_that_create_state_still_create_the_data_dir(run, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.md").write_text("# Alpha\n\nThe alpha service restarts nightly at two.\n")
    assert run("sources", "add", "docs", "--kind", "folder", "--location", str(tmp_path / "src")).returncode == 0
    assert (tmp_path / "data" / "registry.db").is_file()
    # Registered but never synced: reading is an answer now, not an error.
    packet = json.loads(run("query", "alpha", "--json").stdout)
    assert packet["insufficient_evidence"] is True and "no_snapshot" in packet["reason"]
    assert run("sync", "docs").returncode == 0
    assert run("query", "when does alpha restart?").returncode == 0


# -- file-system misconfiguration: one line, exit 2 ------------------------------------------


def test_a_data_dir_that_is_a_file_is_one_line_for_readers_and_writers(run, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a folder")
    env = {"FRESHINDEX_DATA_DIR": str(tmp_path / "afile")}
    for args in (("sources", "list"), ("sources", "add", "x", "--kind", "folder", "--location", str(tmp_path)),
                 ("query", "anything")):
        proc = run(*args, env_=env)
        assert proc.returncode == 2
        assert _one_error(proc) == (f"error: data dir {tmp_path / 'afile'} is a file, not a folder; "
                                    "set FRESHINDEX_DATA_DIR (or data_dir in the --config file)")
    below = run("sources", "add", "x", "--kind", "folder", "--location", str(tmp_path),
                env_={"FRESHINDEX_DATA_DIR": str(tmp_path / "afile" / "data")})
    assert below.returncode == 2
    assert _one_error(below) == (f"error: data dir {tmp_path / 'afile' / 'data'} cannot be created: "
                                 f"{tmp_path / 'afile'} is a file, not a folder")


def test_a_registry_file_in_a_missing_folder_is_not_created(run, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/registry.db"
    proc = run("sources", "add", "x", "--kind", "folder", "--location", str(tmp_path),
               env_={"FRESHINDEX_REGISTRY__URL": url})
    assert proc.returncode == 2
    assert _one_error(proc) == (f"error: registry {tmp_path}/no/such/registry.db: its folder {tmp_path}/no/such "
                                "does not exist (registry.url, FRESHINDEX_REGISTRY__URL)")
    assert not (tmp_path / "no").exists()


def test_an_unwritable_data_dir_is_one_line(run, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    assert run("sources", "add", "x", "--kind", "folder", "--location", str(tmp_path / "src")).returncode == 0
    os.chown(tmp_path / "data", 65534, 65534)  # someone else's folder, mode 755
    proc = run("sources", "list", prefix=NO_DAC)
    assert proc.returncode == 2
    line = _one_error(proc)
    assert line.startswith(f"error: data dir {tmp_path / 'data'} is not writable by this user (uid 0), and the "
                           f"registry at {tmp_path / 'data' / 'registry.db'} writes there")
    inside = run("sources", "add", "y", "--kind", "folder", "--location", str(tmp_path / "src"), prefix=NO_DAC,
                 env_={"FRESHINDEX_DATA_DIR": str(tmp_path / "data" / "sub")})
    assert inside.returncode == 2
    assert _one_error(inside) == (f"error: data dir {tmp_path / 'data' / 'sub'} cannot be created: "
                                  f"{tmp_path / 'data'} is not writable by this user (uid 0)")


# -- unknown settings ------------------------------------------------------------------------


def test_an_unknown_variable_is_a_warning_naming_the_closest_setting(run, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    env = {"FRESHINDEX_CONTEXT__REFUSL": "false", "FRESHINDEX_CELERY__BROKER_URL": "redis://127.0.0.1:1",
           "FRESHINDEX_TEST_PG": "documented: read by the test suite", "FRESHINDEX_CONFIG_": "x"}
    proc = run("config", "show", "--json", env_=env)
    assert proc.returncode == 0
    assert proc.stderr.splitlines() == [
        "warning: unknown setting FRESHINDEX_CELERY__BROKER_URL (environment): did you mean FRESHINDEX_BROKER__URL?",
        "warning: unknown setting FRESHINDEX_CONFIG_ (environment): no known setting is close "
        "(`freshindex config show` lists them)",
        "warning: unknown setting FRESHINDEX_CONTEXT__REFUSL (environment): did you mean "
        "FRESHINDEX_CONTEXT__REFUSAL?",
    ]
    assert json.loads(proc.stdout)["context"]["refusal"] is True  # the misspelt one changed nothing
    # Known nested names, a mapping's free keys and the documented direct variables say nothing.
    quiet = run("config", "show", env_={"FRESHINDEX_VECTOR_STORE__CLUSTER__SIZE": "10m",
                                        "FRESHINDEX_WEBHOOKS__SECRETS__DOCS": "s3cret",
                                        "FRESHINDEX_STRICT": "0", "FRESHINDEX_BENCH_CACHE": "/tmp/x"})
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.parametrize("how", ["flag", "env"])
def test_strict_makes_an_unknown_setting_an_error(run, tmp_path: Path, how: str) -> None:
    env = {"FRESHINDEX_DATA_DIRR": str(tmp_path / "data")}
    args = ("--strict", "sources", "list") if how == "flag" else ("sources", "list")
    if how == "env":
        env["FRESHINDEX_STRICT"] = "1"
    proc = run(*args, env_=env)
    assert proc.returncode == 2
    assert _one_error(proc) == ("error: unknown setting FRESHINDEX_DATA_DIRR (environment): did you mean "
                                "FRESHINDEX_DATA_DIR? (strict: unknown settings are errors)")


def test_unknown_keys_in_the_config_file_are_named_with_their_table(run, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    config = tmp_path / "freshindex.toml"
    config.write_text('data_dir = "data"\n[context]\nrefusal_biass = 1.0\n[brokr]\nurl = "redis://x"\n'
                      '[vector_store.cluster]\nsize = "10m"\n[webhooks.secrets]\ndocs = "s"\n')
    proc = run("--config", str(config), "config", "show")
    assert proc.returncode == 0
    assert proc.stderr.splitlines() == [
        f"warning: unknown setting context.refusal_biass ({config}): did you mean context.refusal_bias?",
        f"warning: unknown setting brokr ({config}): did you mean broker?",
    ]
    strict = run("--strict", "--config", str(config), "config", "show")
    assert strict.returncode == 2 and "unknown setting context.refusal_biass" in _one_error(strict)


# -- a broker that is down ---------------------------------------------------------------------


def test_a_distributed_sync_with_the_broker_down_fails_in_one_line(run, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.md").write_text("# A\n\nalpha\n")
    assert run("sources", "add", "docs", "--kind", "folder", "--location", str(tmp_path / "src")).returncode == 0
    proc = run("sync", "docs", env_={"FRESHINDEX_BROKER__URL": "redis://:pw@127.0.0.1:1/0"})
    assert proc.returncode == 1
    assert _one_error(proc).startswith("error: broker redis://:***@127.0.0.1:1/0 is unreachable (")
    assert "Retry" not in proc.stderr and proc.stdout == ""
    backend = run("sync", "docs", env_={"FRESHINDEX_BROKER__URL": "redis://127.0.0.1:6379/0",
                                         "FRESHINDEX_BROKER__RESULT_BACKEND": "redis://127.0.0.1:1/0"})
    assert backend.returncode == 1
    line = _one_error(backend)
    assert line.startswith("error: result backend redis://127.0.0.1:1/0 is unreachable (")
    assert "FRESHINDEX_BROKER__RESULT_BACKEND" in line


# -- control characters in names ---------------------------------------------------------------


def test_tables_escape_control_characters_and_json_keeps_them(run, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.md").write_text("# Ok\n\nA plain page about the release train.\n")
    (src / "line\nbreak.md").write_text("x")
    (src / "esc\x1b[31mred.md").write_text("x")
    assert run("sources", "add", "docs", "--kind", "folder", "--location", str(src)).returncode == 0
    synced = run("sync", "docs")
    assert synced.returncode == 0
    assert "    line\\nbreak.md: unsafe_key: " in synced.stdout and "\x1b" not in synced.stdout

    errors = run("errors").stdout
    assert "\x1b" not in errors and errors.count("\n") == 2  # one row per document error
    assert "docs:line\\nbreak.md (run 1): unsafe_key:" in errors and "docs:esc\\x1b[31mred.md (run 1)" in errors
    table = run("documents", "list").stdout.splitlines()
    assert len(table) == 4 and "\x1b" not in "".join(table)
    assert [row.split()[1] for row in table[1:]] == ["esc\\x1b[31mred.md", "line\\nbreak.md", "ok.md"]
    failures = run("documents", "failures").stdout
    assert "\x1b" not in failures and len(failures.strip().splitlines()) == 2  # a header, one row per reason

    keys = {d["key"] for d in json.loads(run("documents", "list", "--json").stdout)}
    assert keys == {"ok.md", "line\nbreak.md", "esc\x1b[31mred.md"}  # --json stays exact
    assert {e["key"] for e in json.loads(run("errors", "--json").stdout)} == {"line\nbreak.md", "esc\x1b[31mred.md"}


def test_source_names_and_owners_are_escaped_in_every_table(run, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    assert run("sources", "add", "docs", "--kind", "folder", "--location", str(src),
               "--owner", "ops\nteam\x1b]0;pwned\x07").returncode == 0
    key = run("keys", "create", "bot\r\nadmin", "--json")
    assert key.returncode == 0
    for args in (("sources", "list"), ("sources", "show", "docs"), ("keys", "list"), ("kbs", "list")):
        out = run(*args)
        assert out.returncode == 0, out.stderr
        assert not any(c in out.stdout for c in "\x1b\x07\r"), (args, out.stdout)
    assert "bot\\r\\nadmin" in run("keys", "list").stdout
    assert json.loads(run("sources", "list", "--json").stdout)[0]["owner"] == "ops\nteam\x1b]0;pwned\x07"


# -- an unreadable folder in a folder source ----------------------------------------------------


def test_an_unreadable_sub_folder_is_recorded_and_the_rest_is_indexed(run, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "team").mkdir(parents=True)
    (src / "locked").mkdir()
    (src / "index.md").write_text("# Index\n\nThe index page lists the team pages.\n")
    (src / "team" / "oncall.md").write_text("# On call\n\nThe on-call rota changes every Monday.\n")
    (src / "locked" / "plan.md").write_text("# Plan\n\nThe plan is kept in a locked folder.\n")
    assert run("sources", "add", "docs", "--kind", "folder", "--location", str(src)).returncode == 0
    assert run("sync", "docs").returncode == 0
    try:
        (src / "team").chmod(0)  # nothing readable
        (src / "locked").chmod(0o644)  # names readable, entries not (no search permission)
        (src / "new.md").write_text("# New\n\nA page added while two folders are unreadable.\n")
        proc = run("sync", "docs", prefix=NO_DAC)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr and "internal_error" not in proc.stdout
        errors = run("errors", "--json", "--run", "2").stdout
        assert {(e["key"], e["reason"]) for e in json.loads(errors)} == {("team/", "unreadable"),
                                                                        ("locked/", "unreadable")}
        assert (run("errors", "--run", "2").stdout.splitlines()[-1]
                == "docs:team/ (run 2): unreadable: folder team/ cannot be read (Permission denied); the documents "
                   "under it keep their last indexed state until it can be read")
        states = {d["key"]: d["state"] for d in json.loads(run("documents", "list", "--json").stdout)}
        assert states == {"index.md": "active", "new.md": "active", "team/oncall.md": "active",
                          "locked/plan.md": "active", "team/": "error", "locked/": "error"}
        # A listed document whose folder became unreadable before its fetch (another worker, another user).
        fetch = subprocess.run(
            [*NO_DAC, sys.executable, "-c",
             "import sys\nfrom freshindex.core.errors import DocumentError\n"
             "from freshindex.workers.connectors.folder import FolderConnector\n"
             "try:\n    FolderConnector(sys.argv[1], max_bytes=10**6).fetch('team/oncall.md')\n"
             "except DocumentError as exc:\n    print(exc.reason, exc)\n",
             str(src)], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert fetch.stdout.startswith("unreadable "), fetch.stdout + fetch.stderr
        assert "permission denied: team/oncall.md cannot be reached" in fetch.stdout
    finally:
        (src / "team").chmod(0o755)
        (src / "locked").chmod(0o755)
    again = run("sync", "docs")
    assert again.returncode == 0 and "errors" not in again.stdout
    states = {d["key"]: d["state"] for d in json.loads(run("documents", "list", "--json").stdout)}
    assert states["team/oncall.md"] == "active" and states["team/"] == "deleted"
