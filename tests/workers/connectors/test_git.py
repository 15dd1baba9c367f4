"""A git source through two real releases of requests, synced by a signed push webhook.

Given a local repository holding the package folder of requests 2.31.0 (the
PyPI sdist), registered as a ``git`` source on ``main`` and synced once;
when 2.32.0 is committed on top with a ``git mv requests src/requests`` (the
move that release made) and GitHub posts a signed push for ``main``, then the
webhook's sync embeds only what changed (far fewer chunks than the first
sync; moved files reuse their vectors), reports git's renames as moves so
the deletion guard does not hold, and every chunk carries the new commit and
its path; citations show the short commit.  A push to another branch syncs
nothing; credentials never reach a URL or a message.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bench.git_history import commit_release, fetch_sdist, git
from freshindex.api.app import create_app
from freshindex.api.routes_webhooks import ref_matches, sign_github
from freshindex.core.errors import ConfigError, SourceError
from freshindex.dispatch import start_dispatcher
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.connectors.git import GitConnector, check_location, parse_name_status, redact
from freshindex.workers.runner import sync_inline
from tests.api.served import app_in_thread

SECRET = "git-hook-s3cret"
KEEP = ("README.md",)
#: A third of the package (the request path): enough symbols and moves, a test that stays quick.
MODULES = ("__init__.py", "api.py", "sessions.py", "hooks.py", "exceptions.py", "status_codes.py", "structures.py",
           "__version__.py")


@dataclass
class Repo:
    path: Path
    svc: Services
    url: str
    first: dict
    commits: list[str]


def _sdists() -> tuple[Path, Path]:
    old, new = fetch_sdist("requests", "2.31.0"), fetch_sdist("requests", "2.32.0")
    if old is None or new is None:
        pytest.skip("requests 2.31.0/2.32.0 sdists cannot be downloaded (package mirror unreachable)")
    return old, new


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Repo]:
    old, _ = _sdists()
    root = tmp_path_factory.mktemp("git")
    path = root / "requests"
    first = commit_release(path, old, "requests", "2.31.0", keep=KEEP, modules=MODULES)
    settings = load_settings(data_dir=root / "data", embedding={"provider": "hashing"},
                             webhooks={"secrets": {"requests": SECRET}, "debounce_s": 0.2})
    svc = Services(settings)
    svc.registry.add_source("requests", kind="git", location=str(path), owner="t", kb="default",
                            setup=SourceSetup(options={"ref": "main"}))
    report = sync_inline(svc, "requests")
    dispatcher = start_dispatcher(svc)
    try:
        with app_in_thread(create_app(svc)) as url:
            yield Repo(path, svc, url, {"report": report, **first}, [first["commit"]])
    finally:
        dispatcher.stop()
        svc.close()


def _push(http: httpx.Client, ref: str, after: str) -> httpx.Response:
    body = json.dumps({"ref": ref, "after": after, "commits": []}).encode()
    return http.post("/v1/webhooks/github/requests", content=body, headers={
        "X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": sign_github(SECRET, body), "Content-Type": "application/json"})


def _wait_run(svc: Services, after_run: int, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in svc.registry.sync_runs("requests", limit=5) if r.id > after_run and r.status != "running"]
        if runs and runs[0].build_status not in (None, "pending", "running"):  # its snapshot built and swapped
            return {"status": runs[0].status, "summary": runs[0].summary, "id": runs[0].id}
        time.sleep(0.2)
    raise AssertionError("the push did not sync the source")


def test_first_sync_indexes_the_release_with_commit_and_path(repo: Repo) -> None:
    report = repo.first["report"]
    assert report.run.status == "succeeded", report.errors
    assert report.run.summary["chunks_embedded"] > 100
    rows = repo.svc.registry.chunk_rows(sorted(repo.svc.registry.live_chunk_ids_for_kb("default")))
    api = [r for r in rows if r.key == "requests/api.py"]
    assert api and all(r.meta["commit"] == repo.first["commit"] and r.meta["path"] == "requests/api.py" for r in api)
    prov = repo.svc.registry.document_provenance(api[0].document_id)
    assert prov is not None and prov["source_uri"] == f"{repo.path}#requests/api.py"


def test_a_push_syncs_the_moved_release_embedding_only_what_changed(repo: Repo, tmp_path: Path) -> None:
    _, new = _sdists()
    last = repo.svc.registry.sync_runs("requests", limit=1)[0].id
    with httpx.Client(base_url=repo.url, timeout=30) as http:
        # A push to another branch: verified, answered 200, nothing synced.
        other = _push(http, "refs/heads/feature", "0" * 40)
        assert other.status_code == 200 and "follows main" in other.text
        second = commit_release(repo.path, new, "requests", "2.32.0", keep=KEEP, modules=MODULES)
        assert second["moved"] == ("requests", "src/requests")
        r = _push(http, "refs/heads/main", second["commit"])
        assert r.status_code == 202, r.text
    run = _wait_run(repo.svc, last)
    summary = run["summary"]
    assert run["status"] == "succeeded", summary
    assert not summary.get("held"), summary  # renames are moves, not deletions
    moves = {m["from"]: m["to"] for m in summary.get("moves") or []}
    assert moves.get("requests/api.py") == "src/requests/api.py" and len(moves) == len(MODULES)
    first_embedded = repo.first["report"].run.summary["chunks_embedded"]
    # Only changed symbols embed: 2.32.0 changed a few dozen functions, the release has hundreds of chunks.
    assert 0 < summary["chunks_embedded"] < first_embedded / 3, (summary, first_embedded)
    assert summary["chunks_reused"] > summary["chunks_embedded"]
    rows = [r for r in repo.svc.registry.chunk_rows(sorted(repo.svc.registry.live_chunk_ids_for_kb("default")))
            if not r.tombstoned]
    assert not [r for r in rows if r.key.startswith("requests/")]
    moved = [r for r in rows if r.key == "src/requests/api.py"]
    assert moved and all(r.meta["commit"] == second["commit"] and r.meta["path"] == r.key for r in moved)
    packet = repo.svc.client.retrieve("Sends a GET request. url: URL for the new Request object. params",
                                      kb="default")
    cited = [e for e in packet.evidence if e.key.startswith("src/requests/")]
    assert cited, packet.as_dict()
    assert f"commit {second['commit'][:10]}" in cited[0].citation
    assert f"commit {second['commit'][:10]}" in packet.render()


def test_plain_functions_redact_and_parse() -> None:
    assert redact("fatal: https://bot:t0ken@git.example.com/org/r.git not found") == \
        "fatal: https://***@git.example.com/org/r.git not found"
    with pytest.raises(ConfigError, match="token_file"):
        check_location("https://bot:t0ken@github.com/org/repo.git")
    assert check_location("git@github.com:org/repo.git") == "git@github.com:org/repo.git"
    assert parse_name_status(b"M\0a.py\0R100\0old/b.py\0new/b.py\0D\0c.md\0") == [
        ("M", "a.py", None), ("R", "new/b.py", "old/b.py"), ("D", "c.md", None)]
    assert ref_matches("main", "refs/heads/main") and ref_matches("v2.0", "refs/tags/v2.0")
    assert not ref_matches("main", "refs/heads/main-old")


def test_a_token_goes_through_askpass_never_the_url(tmp_path: Path) -> None:
    """An HTTPS remote that asks for credentials gets the token from the file; failures name no secret."""
    token = tmp_path / "token"
    token.write_text("s3cr3t-t0ken\n")
    conn = GitConnector("https://127.0.0.1:9/org/repo.git", "main", tmp_path / "cache", max_bytes=1 << 20,
                        token_file=token, timeout_s=20)
    with pytest.raises(SourceError) as err:
        list(conn.list())
    assert "s3cr3t" not in str(err.value)
    env = conn._env()
    assert "s3cr3t" not in json.dumps(env) and env["FRESHINDEX_GIT_TOKEN_FILE"] == str(token)
    asked = subprocess.run([env["GIT_ASKPASS"], "Password for 'https://x-access-token@host': "], env=env,
                           capture_output=True, text=True, check=True)
    assert asked.stdout.strip() == "s3cr3t-t0ken"
    config = (tmp_path / "cache/repo.git/config").read_text()
    assert "s3cr3t" not in config and "https://127.0.0.1:9/org/repo.git" in config
    assert git(tmp_path / "cache/repo.git", "config", "--get", "remote.origin.url").strip().endswith("repo.git")
