"""Operator controls from the CLI and over HTTP, and beat's schedule (every job mapped to a registered task)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from freshindex.api.app import create_app
from freshindex.cli import cli
from freshindex.registry.records import SourceSetup
from freshindex.schedules.beat import Job, beat_schedule
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline


@pytest.fixture
def data(tmp_path: Path) -> Path:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "a.md").write_text("# A\n\nThe backup window opens at two otter5.\n")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default",
                                setup=SourceSetup(poll_interval_s=60))
        sync_inline(svc, "docs")
    finally:
        svc.close()
    return tmp_path / "data"


def _cli(data: Path, *args: str) -> dict | list:
    env = {"FRESHINDEX_DATA_DIR": str(data), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    result = CliRunner().invoke(cli, [*args, "--json"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_cli_pauses_resumes_sets_policy_lists_runs_and_removes(data: Path) -> None:
    assert _cli(data, "sources", "pause", "docs")["paused"] is True
    shown = _cli(data, "sources", "show", "docs")
    assert shown["paused"] and shown["last_verified_at"] and not shown["stale"]
    assert _cli(data, "sources", "resume", "docs")["paused"] is False
    policy = _cli(data, "sources", "policy", "docs", "--stale-after", "600", "--hard-expiry", "86400", "--poll", "0")
    assert (policy["poll_interval_s"], policy["stale_after_s"], policy["hard_expiry_s"]) == (None, 600, 86400)
    runs = _cli(data, "sources", "runs", "docs")
    assert [r["status"] for r in runs] == ["succeeded"] and runs[0]["lag_s"] is not None
    assert _cli(data, "sources", "sweep") == {"stale": [], "withdrawn": [], "rehomed": [], "resync": []}
    env = {"FRESHINDEX_DATA_DIR": str(data), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    refused = CliRunner().invoke(cli, ["sources", "remove", "docs"], env=env)
    assert refused.exit_code == 2 and "--yes" in refused.output
    assert _cli(data, "sources", "remove", "docs", "--yes") == {"source": "docs", "documents": 1, "chunks": 1}
    unknown = CliRunner().invoke(cli, ["sources", "pause", "nope"], env=env)
    assert unknown.exit_code == 1 and "no source 'nope'" in unknown.output


def _http(data: Path, **auth: str):
    settings = load_settings(data_dir=data, embedding={"provider": "hashing"}, auth={"mode": "keys", **auth})
    svc = Services(settings)
    return svc, TestClient(create_app(svc))


def test_http_operator_api_needs_the_admin_group(data: Path) -> None:
    svc, http = _http(data, admin_group="ops")
    try:
        with http:
            ops = {"Authorization": f"Bearer {svc.registry.create_api_key('olga', ['ops']).key}"}
            eng = {"Authorization": f"Bearer {svc.registry.create_api_key('bob', ['eng']).key}"}
            assert http.get("/v1/sources").status_code == 401
            assert http.get("/v1/sources", headers=eng).status_code == 403
            listed = http.get("/v1/sources", headers=ops)
            assert listed.status_code == 200 and [s["source_id"] for s in listed.json()["sources"]] == ["docs"]
            assert http.post("/v1/sources/docs/pause", headers=ops).json()["paused"] is True
            # A trigger while paused is queued behind the pause (a webhook ticket), not run
            trig = http.post("/v1/sources/docs/sync", headers=ops)
            assert trig.status_code == 202 and trig.json()["paused"] is True
            again = http.post("/v1/sources/docs/sync", headers=ops).json()
            assert again["ticket"] == trig.json()["ticket"] and again["coalesced"] is True
            assert svc.registry.get_ticket(trig.json()["ticket"]).status == "queued"
            assert http.post("/v1/sources/docs/resume", headers=ops).json()["paused"] is False
            runs = http.get("/v1/sources/docs/runs", headers=ops).json()["runs"]
            assert [r["status"] for r in runs] == ["succeeded"]
            put = http.put("/v1/sources/docs/policy", headers=ops, json={"stale_after_s": 60})
            assert put.status_code == 200 and put.json()["stale_after_s"] == 60 and put.json()["poll_interval_s"] == 60
            assert http.get("/v1/sources/nope", headers=ops).status_code == 404
            assert http.delete("/v1/sources/docs", headers=ops).status_code == 400
            assert http.delete("/v1/sources/docs?confirm=true", headers=ops).json()["documents"] == 1
            assert http.post("/v1/sources/docs/sync", headers=ops).status_code == 409
    finally:
        svc.close()


def test_http_operator_api_is_off_without_an_admin_group(data: Path) -> None:
    svc, http = _http(data)
    try:
        with http:
            key = svc.registry.create_api_key("olga", ["ops"]).key
            refused = http.get("/v1/sources", headers={"Authorization": f"Bearer {key}"})
            assert refused.status_code == 403 and "admin_group" in refused.text
    finally:
        svc.close()


def test_beat_schedules_every_job_on_a_registered_task(tmp_path: Path) -> None:
    from freshindex.workers.app import BEAT_TASKS
    from freshindex.workers.app import create_app as create_celery

    settings = load_settings(data_dir=tmp_path / "d", broker={"url": "redis://127.0.0.1:6379/0"},
                             schedules={"poll_tick_s": 2, "sweep_interval_s": 5})
    app = create_celery(settings)
    schedule = app.conf.beat_schedule
    assert set(BEAT_TASKS) == set(Job) and set(schedule) == {str(j) for j in Job}
    assert all(entry["task"] in app.tasks for entry in schedule.values())
    assert schedule[str(Job.POLL_SOURCES)]["schedule"] == 2
    assert schedule[str(Job.SWEEP_FRESHNESS)]["schedule"] == 5
    assert beat_schedule(settings, task_for=str, queue="q")[str(Job.COLLECT_TOMBSTONES)]["schedule"] == 3600
    assert app.conf.beat_schedule_filename == str(tmp_path / "d" / "celerybeat-schedule")
