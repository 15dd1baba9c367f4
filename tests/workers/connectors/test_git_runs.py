"""A git connector read by runs it did not list, and the locations and keys an attacker could hand it.

Given one :class:`GitConnector` object that stays alive across runs (as
``Services.connector_for`` keeps it in a long-lived worker process) and a
second one that lists (the planner, in another process), when the repository
moves on between runs, then every document read through ``for_run(run)``
comes from the commit that run planned: an edit is read as edited, a moved
file is found at its new path, never the first run's commit.  A run whose
commit is unknown fails retryably, and a commit the cache lacks is fetched.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from freshindex.core.errors import ConfigError, DocumentError, SourceError
from freshindex.registry.records import SourceSetup
from freshindex.workers.connectors import for_run
from freshindex.workers.connectors.git import GitConnector, check_location, redact

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@example.com"}


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**ENV, "PATH": "/usr/bin:/bin"}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


class Cursor:
    """The registry's cursor as both processes see it: one pending value per open run."""

    def __init__(self) -> None:
        self.pending: dict[int, dict[str, Any]] = {}
        self.run = 0

    def get(self) -> dict[str, Any] | None:
        return None

    def set_pending(self, value: dict[str, Any]) -> None:
        self.pending[self.run] = value

    def planned(self, run_id: int) -> dict[str, Any] | None:
        return self.pending.get(run_id)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    (path / "guide.md").write_text("# Guide\n\nThe timeout is 30 seconds.\n")
    (path / "notes.md").write_text("# Notes\n\nRotate the key every 90 days.\n")
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "first", date="2026-01-02T03:04:05+00:00")
    return path


def _planner_lists(repo: Path, tmp_path: Path, cursor: Cursor, run: int) -> dict[str, str]:
    """A fresh connector (another process's) lists for ``run``; the listed keys and etags."""
    cursor.run = run
    planner = GitConnector(str(repo), "main", tmp_path / f"planner-{run}", max_bytes=1 << 20, cursor=cursor)
    return {r.key: str(r.etag) for r in planner.list()}


def test_a_long_lived_connector_reads_each_run_at_the_commit_that_run_planned(repo: Path, tmp_path: Path) -> None:
    # Given a worker's connector that served run 1
    cursor = Cursor()
    worker = GitConnector(str(repo), "main", tmp_path / "worker", max_bytes=1 << 20, cursor=cursor)
    _planner_lists(repo, tmp_path, cursor, 1)
    assert b"30 seconds" in for_run(worker, 1).fetch("guide.md")
    # When the repository is edited and a file moved, and run 2 is planned in another process
    (repo / "guide.md").write_text("# Guide\n\nThe timeout is 45 seconds.\n")
    (repo / "docs").mkdir()
    _git(repo, "mv", "notes.md", "docs/notes.md")
    _git(repo, "commit", "-qam", "second", date="2026-02-03T04:05:06+00:00")
    listed = _planner_lists(repo, tmp_path, cursor, 2)
    # Then the same worker object reads run 2's commit: the edit, and the moved file at its new path
    second = for_run(worker, 2)
    assert b"45 seconds" in second.fetch("guide.md")
    assert b"90 days" in second.fetch("docs/notes.md")
    with pytest.raises(DocumentError) as gone:
        second.fetch("notes.md")
    assert gone.value.reason == DocumentError.VANISHED
    head = _git(repo, "rev-parse", "HEAD")
    assert second.chunk_meta("guide.md") == {"commit": head, "path": "guide.md",
                                             "modified": "2026-02-03T04:05:06+00:00"}
    assert set(listed) == {"guide.md", "docs/notes.md"}
    # And run 1's reads (a redelivered task) still see run 1's commit
    assert b"30 seconds" in for_run(worker, 1).fetch("guide.md")


def test_a_run_without_a_planned_commit_fails_retryably(repo: Path, tmp_path: Path) -> None:
    cursor = Cursor()
    worker = GitConnector(str(repo), "main", tmp_path / "worker", max_bytes=1 << 20, cursor=cursor)
    with pytest.raises(SourceError, match="no planned commit"):
        for_run(worker, 7)
    # A planned commit the remote no longer has (force-pushed away) is retryable too, never another revision.
    cursor.pending[8] = {"commit": "0" * 40, "ref": "main"}
    with pytest.raises(SourceError, match="cannot be fetched"):
        for_run(worker, 8)


def test_a_symlink_named_like_a_pathspec_is_not_read_as_a_file(repo: Path, tmp_path: Path) -> None:
    (repo / ":(literal)guide.md").symlink_to("/etc/passwd")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "link")
    cursor = Cursor()
    _planner_lists(repo, tmp_path, cursor, 1)
    worker = GitConnector(str(repo), "main", tmp_path / "worker", max_bytes=1 << 20, cursor=cursor)
    with pytest.raises(DocumentError) as err:
        for_run(worker, 1).fetch(":(literal)guide.md")
    assert err.value.reason == DocumentError.UNSUPPORTED


@pytest.mark.parametrize("location", [
    "ext::sh -c touch% /tmp/pwned #://",
    "ext::sh -c touch% /tmp/pwned",
    "fd::7",
    "http://git.example.com/org/repo.git",
    "https://git.example.com/org/repo.git?access_token=s3cr3t",
    "https://git.example.com/org/repo.git#token=s3cr3t",
    "https://bot@git.example.com/org/repo.git",
    "--upload-pack=touch /tmp/pwned",
])
def test_locations_outside_the_transport_allow_list_or_with_credentials_are_refused(location: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_location(location)
    assert "s3cr3t" not in str(err.value)


def test_allowed_transports_pass_and_git_itself_is_held_to_them(repo: Path, tmp_path: Path) -> None:
    for ok in ("https://git.example.com/org/repo.git", "ssh://git@host/org/repo.git", "git://host/repo.git",
               "git@github.com:org/repo.git", f"file://{repo}"):
        assert check_location(ok)
    conn = GitConnector(str(repo), "main", tmp_path / "c", max_bytes=1 << 20)
    assert conn._env()["GIT_ALLOW_PROTOCOL"] == "https:ssh:git:file"


def test_a_token_in_a_query_or_fragment_is_redacted_from_messages() -> None:
    text = "fatal: unable to access 'https://host/org/r.git?access_token=s3cr3t&x=1': 403"
    assert "s3cr3t" not in redact(text) and "https://host/org/r.git?***" in redact(text)
    assert "s3cr3t" not in redact("see https://host/r.git#tok=s3cr3t now")


def test_a_packet_cites_one_commit_per_repository_with_where_each_text_last_changed(repo: Path,
                                                                                     tmp_path: Path) -> None:
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    # Given a git source synced at its first commit, then again after only guide.md changed
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("repo", kind="git", location=str(repo), owner="t", kb="default",
                                setup=SourceSetup(options={"ref": "main"}))
        assert sync_inline(svc, "repo").run.status == "succeeded"
        first = _git(repo, "rev-parse", "HEAD")
        (repo / "guide.md").write_text("# Guide\n\nThe timeout is 45 seconds.\n")
        _git(repo, "commit", "-qam", "second", date="2026-02-03T04:05:06+00:00")
        second = _git(repo, "rev-parse", "HEAD")
        assert sync_inline(svc, "repo").run.status == "succeeded"

        # When both files are retrieved
        packet = svc.client.retrieve("How often is the key rotated, and what is the timeout?", kb="default",
                                     limit=5)
        by_key = {e.key: e for e in packet.evidence}

        # Then both cite the snapshot's commit; the unchanged file says where its text last changed
        assert set(by_key) == {"guide.md", "notes.md"}, packet.as_dict()
        assert {e.commit for e in by_key.values()} == {second[:10]}
        assert by_key["guide.md"].changed_in == second[:10] and by_key["notes.md"].changed_in == first[:10]
        assert by_key["notes.md"].date == "2026-01-02T03:04:05+00:00"
        assert by_key["guide.md"].date == "2026-02-03T04:05:06+00:00"
        assert f"changed_in=\"{first[:10]}\"" in packet.render() and f"commit {second[:10]}" in packet.render()
    finally:
        svc.close()


def test_a_plain_read_never_moves_an_open_runs_planned_commit(repo: Path, tmp_path: Path) -> None:
    # Given run 1 planned at the first commit, then a new commit on the branch
    cursor = Cursor()
    _planner_lists(repo, tmp_path, cursor, 1)
    planned = dict(cursor.pending[1])
    (repo / "guide.md").write_text("# Guide\n\nThe timeout is 60 seconds.\n")
    _git(repo, "commit", "-qam", "later")
    # When a fresh connector in the same run's process is read outside for_run
    other = GitConnector(str(repo), "main", tmp_path / "other", max_bytes=1 << 20, cursor=cursor)
    cursor.run = 1
    assert b"60 seconds" in other.fetch("guide.md")
    # Then run 1's plan is untouched
    assert cursor.pending[1] == planned


def _list_in_a_process(args: tuple[str, str]) -> str:
    location, cache = args
    conn = GitConnector(location, "main", Path(cache), max_bytes=1 << 20)
    return ",".join(sorted(r.key for r in conn.list()))


def test_processes_sharing_one_cache_fetch_one_at_a_time(repo: Path, tmp_path: Path) -> None:
    import multiprocessing

    # Given a cache shared by four processes (prefork children of one worker), each listing at once, three times
    cache = tmp_path / "shared"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        for n in range(3):
            (repo / f"page{n}.md").write_text(f"# Page {n}\n")
            _git(repo, "add", ".")
            _git(repo, "commit", "-qm", f"page {n}")
            # Then every listing succeeds (none trips over another's git locks) and sees the new file
            got = pool.map(_list_in_a_process, [(str(repo), str(cache))] * 4)
            assert all(f"page{n}.md" in keys for keys in got), got


def test_a_repositorys_hidden_documentation_is_listed_and_no_other_hidden_file(repo: Path, tmp_path: Path) -> None:
    # Given a repository that commits its contributor guide under .github/ and its tool configuration as dotfiles
    (repo / ".github").mkdir()
    (repo / ".github" / "CONTRIBUTING.md").write_text("# Contributing\n\nRun the tests before a pull request.\n")
    (repo / ".readthedocs.yaml").write_text("build:\n  tools:\n    python: '3.12'\n")
    (repo / ".gitignore").write_text("*.pyc\n")
    (repo / "tox.ini").write_text("[tox]\nenv_list = py312\n")
    # and, committed by mistake or by a dotfiles repository, credentials and generated bundles
    for path, text in ((".aws/credentials", "[default]\naws_secret_access_key = x\n"), (".ssh/id_rsa", "KEY\n"),
                       (".yarn/releases/yarn.cjs", "module.exports = 1;\n"), (".github/.hidden/x.md", "x\n")):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _git(repo, "add", "-f", ".")
    _git(repo, "commit", "-qm", "community files")
    # When the source is listed
    keys = _planner_lists(repo, tmp_path, Cursor(), 1)
    # Then the project's documentation and configuration are listed, hidden or not ...
    assert {".github/CONTRIBUTING.md", ".readthedocs.yaml", "tox.ini"} <= set(keys)
    # ... and no other hidden folder, nor a hidden file that is not documentation or configuration by its type
    assert not {".aws/credentials", ".ssh/id_rsa", ".yarn/releases/yarn.cjs", ".github/.hidden/x.md",
                ".gitignore"} & set(keys)
    # ... and the configuration formats have a parser, while a file without one is skipped as before
    from freshindex.workers.parsing.registry import spec_for

    assert spec_for(".readthedocs.yaml") is not None and spec_for("tox.ini") is not None
