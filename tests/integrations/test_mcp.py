"""``freshindex mcp`` through the MCP SDK's own client, over stdio and over streamable HTTP, against a real serve.

The MCP server runs as the command a host would start (a subprocess), and asks the session's
``freshindex serve``; each transport is shown to use the caller's credential and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.conftest import ROOT, free_port, port_open
from tests.integrations.conftest import ANSWERABLE, UNANSWERABLE, KbServer
from tests.integrations.test_async_client import _supported_by


def _stdio(kb_server: KbServer, **env: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "freshindex", "mcp", "--url", kb_server.url],
                                 env=env, cwd=str(ROOT))


async def _session(server: Any, token: str | None) -> dict[str, Any]:
    """List the tools, search an answerable and an unanswerable question, check two answers."""
    async with Client(server, read_timeout_seconds=60) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        found = await client.call_tool("search_knowledge", {"question": ANSWERABLE, "kb": "default", "limit": 3})
        refused = await client.call_tool("search_knowledge", {"question": UNANSWERABLE})
        out: dict[str, Any] = {"tools": tools, "found": found, "refused": refused}
        if not found.is_error:
            sources = found.structured_content["sources"]
            out["good"] = await client.call_tool("check_citations", {
                "answer": _supported_by(sources[0]["text"]), "sources": sources})
            out["bad"] = await client.call_tool("check_citations", {"answer": "It is in [9].", "sources": sources})
        return out


def _assert_answers(got: dict[str, Any]) -> None:
    assert set(got["tools"]) == {"search_knowledge", "check_citations"}
    assert set(got["tools"]["search_knowledge"].input_schema["properties"]) == {"question", "kb", "limit"}
    assert "sources" in got["tools"]["search_knowledge"].output_schema["properties"]
    found = got["found"]
    assert not found.is_error
    block = found.content[0].text  # the fenced, numbered, cited block
    assert block.startswith('<context kb="default" snapshot="default-v1">') and "guides/release.md" in block
    data = found.structured_content
    assert data["insufficient"] is False and data["snapshot_id"] == "default-v1" and 1 <= len(data["sources"]) <= 3
    # The hashing embedder ties the page's deployment and migration sections (first dense vs first lexical).
    assert data["sources"][0]["citation"].startswith("[1] guides/release.md#")
    assert any("guides/release.md#database-migration" in s["citation"] for s in data["sources"][:2])
    refused = got["refused"].structured_content
    assert not got["refused"].is_error and refused["insufficient"] is True and refused["sources"] == []
    assert refused["reason"].startswith("insufficient evidence")
    assert got["good"].structured_content["ok"] is True
    assert got["bad"].structured_content["ok"] is False and got["bad"].structured_content["missing"] == [9]


def test_stdio_uses_the_callers_own_key(kb_server: KbServer, tmp_path: Path) -> None:
    # Given the key in a file only the caller holds, When an MCP host starts `freshindex mcp` over stdio
    key_file = tmp_path / "key"
    key_file.write_text(kb_server.key + "\n")
    params = _stdio(kb_server)
    params.args += ["--token-file", str(key_file)]
    got = asyncio.run(_session(params, kb_server.key))
    # Then the tools answer from the knowledge base, cited, and refuse what it cannot answer
    _assert_answers(got)


def test_stdio_without_a_credential_is_refused_by_the_api(kb_server: KbServer) -> None:
    got = asyncio.run(_session(_stdio(kb_server), None))
    assert got["found"].is_error and "401" in got["found"].content[0].text


@contextlib.contextmanager
def _mcp_http(kb_server: KbServer, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "mcp-http.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "freshindex", "mcp", "--http", "--port", str(port), "--url",
                             kb_server.url], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            if port_open("127.0.0.1", port):  # (a GET of /mcp is a stream that stays open)
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError((tmp_path / "mcp-http.log").read_text())
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()


def test_http_forwards_each_callers_authorization(kb_server: KbServer, tmp_path: Path) -> None:
    with _mcp_http(kb_server, tmp_path) as url:
        # Given the caller's own key in its Authorization header, When it uses the tools over streamable HTTP
        auth = create_mcp_http_client(headers={"Authorization": f"Bearer {kb_server.key}"})
        got = asyncio.run(_session(streamable_http_client(url, http_client=auth), kb_server.key))
        _assert_answers(got)
        # And a caller without one, or with a wrong one, is refused by the API: the server holds no key of its own
        anonymous = asyncio.run(_session(streamable_http_client(url), None))
        assert anonymous["found"].is_error and "401" in anonymous["found"].content[0].text
        wrong = create_mcp_http_client(headers={"Authorization": "Bearer fik_nobody_secret"})
        refused = asyncio.run(_session(streamable_http_client(url, http_client=wrong), None))
        assert refused["found"].is_error and "401" in refused["found"].content[0].text


def test_http_refuses_a_server_side_token(kb_server: KbServer, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(kb_server.key)
    out = subprocess.run([sys.executable, "-m", "freshindex", "mcp", "--http", "--token-file", str(key_file)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Authorization" in out.stderr


pytestmark = pytest.mark.timeout(120)
