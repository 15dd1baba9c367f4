"""``POST /v1/citations/check`` and ``freshindex check-citations`` on hostile input.

Review findings 3 (the check ran on the event loop), 4 (a bracketed date
was a 500), 5 (deeply nested JSON was a 500) and 9 (the CLI built the full
services to count into a registry no one scrapes).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from freshindex import cli as cli_module
from freshindex.api.app import create_app
from freshindex.injection import citations
from freshindex.services import Services
from freshindex.settings import load_settings

EVIDENCE = {"n": 1, "chunk_id": "c1", "score": 0.9, "text": "Releases are cut every Tuesday from main.",
            "key": "release.md", "snapshot_id": "default-v1"}
PACKET = {"evidence": [EVIDENCE]}


@pytest.fixture
def http(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], Services]]:
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 auth={"mode": "keys"}, api={"max_check_bytes": 64 * 1024}))
    key = svc.registry.create_api_key("bob", ["eng"]).key
    try:
        with TestClient(create_app(svc), raise_server_exceptions=False) as client:
            yield client, {"Authorization": f"Bearer {key}"}, svc
    finally:
        svc.close()


def _check(client: TestClient, auth: dict[str, str], body: Any) -> Any:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/v1/citations/check", content=content, headers={**auth, "Content-Type": "application/json"})


def test_a_bracketed_date_in_an_answer_is_checked_not_a_server_error(http: Any) -> None:
    client, auth, _svc = http
    r = _check(client, auth, {"answer": "Releases are cut every Tuesday [1]. Changed on [2024-01-15].",
                              "packet": PACKET})
    assert r.status_code == 200, r.text
    assert r.json()["cited"] == [1] and r.json()["missing"] == []


def test_deeply_nested_json_is_bad_json(http: Any) -> None:
    client, auth, svc = http
    for body in (b"[" * 50_000, b'{"answer": "x [1]", "packet": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"):
        r = _check(client, auth, body)
        assert r.status_code == 400 and r.json()["error"] == "bad_json", r.text
    assert svc.metrics.value("freshindex_invalid_citations_total", kind="missing") == 0.0


def test_an_answer_of_chained_ranges_is_a_400_and_nothing_is_counted(http: Any) -> None:
    client, auth, svc = http
    answer = "Releases are cut " + "".join(f"[{lo}-{lo + 100}]" for lo in range(0, 9999, 101))
    answer += "[9899-9999]" * ((citations.MAX_ANSWER_CHARS - len(answer) - 20) // 11)
    r = _check(client, auth, {"answer": answer, "packet": PACKET})
    assert r.status_code == 400 and r.json()["error"] == "CitationInputError", r.text
    assert svc.metrics.value("freshindex_invalid_citations_total", kind="missing") == 0.0


def test_the_check_runs_off_the_event_loop(http: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    client, auth, _svc = http
    loops: list[bool] = []
    real = citations.check_answer

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            loops.append(True)  # called on the event loop's thread: every other request waits for it
        except RuntimeError:
            loops.append(False)
        return real(*args, **kwargs)

    monkeypatch.setattr(citations, "check_answer", spy)
    r = _check(client, auth, {"answer": "Releases are cut every Tuesday from main [1].", "packet": PACKET})
    assert r.status_code == 200 and r.json()["ok"] is True
    assert loops == [False]


def test_check_citations_on_the_cli_builds_no_services_and_reads_hostile_json(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import freshindex.services as services_module

    def refuse(_settings: Any) -> Any:
        raise AssertionError("check-citations must not build the services (registry, store, metrics)")

    monkeypatch.setattr(services_module, "Services", refuse)
    config = tmp_path / "freshindex.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n')
    packet, answer = tmp_path / "packet.json", tmp_path / "answer.txt"
    packet.write_text(json.dumps(PACKET))
    answer.write_text("Releases are cut every Tuesday from main [1]. Changed on [2024-01-15].")
    runner = CliRunner()
    ok = runner.invoke(cli_module.cli, ["--config", str(config), "check-citations", str(answer), "--packet",
                                        str(packet), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["cited"] == [1]
    bad = runner.invoke(cli_module.cli, ["--config", str(config), "check-citations", "-", "--packet", str(packet)],
                        input="Releases are cut every Tuesday from main [1]. See [7].")
    assert bad.exit_code == 3 and "[7]" in bad.output
    packet.write_text("[" * 50_000)
    deep = runner.invoke(cli_module.cli, ["--config", str(config), "check-citations", str(answer), "--packet",
                                          str(packet)])
    assert deep.exit_code == 2 and "nested too deeply" in deep.output


def test_the_installed_command_exits_3_on_an_invalid_citation(tmp_path: Path) -> None:
    # Given a packet and an answer citing a source it does not hold
    import subprocess
    import sys

    packet, answer = tmp_path / "packet.json", tmp_path / "answer.txt"
    packet.write_text(json.dumps(PACKET))
    answer.write_text("Releases are cut every Tuesday from main [1]. See [7].")
    env = {"PATH": "/usr/bin:/bin", "FRESHINDEX_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path)}
    # When the real console entry point runs (not CliRunner, which does not go through main())
    code = "from freshindex.cli import main; main()"
    run = subprocess.run([sys.executable, "-c", code, "check-citations", str(answer), "--packet", str(packet)],
                         env=env, capture_output=True, text=True, timeout=120)
    # Then the exit code says a citation is invalid, as the help promises a script
    assert run.returncode == 3, (run.stdout, run.stderr)
    assert "[7]" in run.stdout
