"""Every command in a runbook is real, no runbook needs SQL, and the queue runbooks name every queue.

Reads every fenced code block of runbooks/*.md, takes each `freshindex ...`
command line (also inside `docker compose exec` / `kubectl exec`), and walks
the click group: each subcommand must exist and each option it uses must be
an option of that command. No code block may hold SQL. The runbooks about
queues and workers name every queue the Celery app declares (as
`freshindex.<queue>`, the default prefix); whether the prose about each
queue is right is not checked.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from freshindex.cli import cli
from freshindex.settings import Settings
from tests.conftest import ROOT

RUNBOOKS = sorted((ROOT / "runbooks").glob("*.md"))
FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
SQL = re.compile(r"\b(SELECT\b.*\bFROM|UPDATE\s+\w+\s+SET|INSERT\s+INTO|DELETE\s+FROM)\b|\bpsql\b", re.I | re.S)


def code_blocks(path: Path) -> list[str]:
    return [m.group(1) for m in FENCE.finditer(path.read_text())]


def freshindex_commands(block: str) -> list[list[str]]:
    """The argv after `freshindex` for every command line of a block (continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in text.splitlines():
        line = line.split(" | ", 1)[0].strip()
        if "freshindex " not in line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        if "freshindex" in words:
            out.append(words[words.index("freshindex") + 1:])
    return out


def check_command(argv: list[str]) -> list[str]:
    """Problems with one command line against the click tree (empty when it resolves)."""
    problems: list[str] = []
    command: click.Command = cli
    path = ["freshindex"]
    words = list(argv)
    while words:
        word = words.pop(0)
        if word.startswith("-"):
            name = word.split("=", 1)[0]
            opt = next((p for p in command.params if isinstance(p, click.Option)
                        and name in p.opts + p.secondary_opts), None)
            if opt is None and name not in ("-h", "--help"):
                problems.append(f"{' '.join(path)}: no option {name}")
            elif opt is not None and not opt.is_flag and not opt.count and "=" not in word and words:
                words.pop(0)  # the option's value
            continue
        if isinstance(command, click.Group):
            sub = command.get_command(click.Context(command), word)
            if sub is None:
                problems.append(f"{' '.join(path)}: no command {word!r}")
                return problems
            command, path = sub, [*path, word]
        # else: a positional argument of a leaf command
    if isinstance(command, click.Group):
        problems.append(f"{' '.join(path)} is a group, not a command")
    return problems


def all_commands() -> list[tuple[str, list[str]]]:
    return [(p.name, argv) for p in RUNBOOKS for block in code_blocks(p) for argv in freshindex_commands(block)]


def test_the_extractor_sees_the_runbooks() -> None:
    commands = all_commands()
    assert len(RUNBOOKS) >= 7
    assert len(commands) > 50
    assert ["snapshots", "verify", "--kb", "KB", "--json"] in [argv for _, argv in commands]
    # and the checker rejects what does not exist
    assert check_command(["snapshots", "explode", "--kb", "KB"]) == ["freshindex snapshots: no command 'explode'"]
    assert check_command(["runs", "list", "--colour", "red"]) == ["freshindex runs list: no option --colour"]
    assert check_command(["runs"]) == ["freshindex runs is a group, not a command"]


@pytest.mark.parametrize("runbook", RUNBOOKS, ids=lambda p: p.name)
def test_every_freshindex_command_exists(runbook: Path) -> None:
    problems = [f"{' '.join(argv)}: {p}" for block in code_blocks(runbook) for argv in freshindex_commands(block)
                for p in check_command(argv)]
    assert problems == []


@pytest.mark.parametrize("runbook", RUNBOOKS, ids=lambda p: p.name)
def test_no_runbook_needs_sql(runbook: Path) -> None:
    text = runbook.read_text()
    assert "```sql" not in text
    offending = [b.strip()[:120] for b in code_blocks(runbook) if SQL.search(b)]
    assert offending == []


def test_the_sql_detector_catches_sql() -> None:
    assert SQL.search("SELECT id FROM sync_runs")
    assert SQL.search("UPDATE documents SET etag = NULL")
    assert SQL.search("docker compose exec postgres psql -U freshindex")
    assert not SQL.search("freshindex runs list --status running --json")


# -- queues ----------------------------------------------------------------------------------------------------

#: The runbooks an operator reads about queues and the workers that consume them.
QUEUE_RUNBOOKS = ["README.md", "freshindex-queue-backlog.md", "freshindex-workers-down.md"]


def declared_queues() -> set[str]:
    """Every queue the Celery app declares, routes to or sends beat's jobs to, without its prefix.

    Built with stage queues off and on, so a queue only one of them uses is counted; the broker URL is
    never connected to.
    """
    from freshindex.workers.app import create_app

    queues: set[str] = set()
    for stage_queues in (False, True):
        settings = Settings.model_validate({"broker": {"url": "redis://127.0.0.1:1/0", "queue_prefix": "pfx",
                                                       "stage_queues": stage_queues}})
        conf = create_app(settings).conf
        names = {q.name for q in conf.task_queues} | {conf.task_default_queue}
        names |= {r["queue"] for r in conf.task_routes.values()}
        names |= {e["options"]["queue"] for e in conf.beat_schedule.values() if "queue" in e.get("options", {})}
        assert all(n.startswith("pfx.") for n in names), names
        queues |= {n.removeprefix("pfx.") for n in names}
    return queues


def unnamed_queues(text: str, queues: set[str]) -> list[str]:
    """The queues ``text`` never names as `freshindex.<queue>` (the default ``broker.queue_prefix``)."""
    return sorted(q for q in queues if not re.search(rf"`freshindex\.{re.escape(q)}`", text))


def test_the_app_declares_the_stage_queues() -> None:
    assert declared_queues() == {"sync", "parse", "ocr", "embed", "build"}


@pytest.mark.parametrize("name", QUEUE_RUNBOOKS)
def test_the_queue_runbooks_name_every_queue(name: str) -> None:
    assert unnamed_queues((ROOT / "runbooks" / name).read_text(), declared_queues()) == []


def test_a_queue_left_out_of_a_runbook_is_caught() -> None:
    # Given a runbook listing three of five queues the old way, and one that names each as `freshindex.<q>`
    old = "queue names are `broker.queue_prefix` plus `.sync`, `.parse`, `.build`: `freshindex.parse` waits"
    new = "`freshindex.sync`, `freshindex.parse`, `freshindex.ocr`, `freshindex.embed`, `freshindex.build`"
    queues = {"sync", "parse", "ocr", "embed", "build"}
    # Then the first misses all but the queue it names in full; the second misses none
    assert unnamed_queues(old, queues) == ["build", "embed", "ocr", "sync"]
    assert unnamed_queues(new, queues) == []
