"""The thin HTTP client: request shape, errors, retries, and a real install without the server extra.

Unit tests talk to ``httpx.MockTransport``; the slow test installs the
repository without extras into a fresh virtualenv (so pip resolves only the
base dependencies) and asks a real ``freshindex serve`` for a packet.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from freshindex.core.errors import NotFoundError, RetryableError
from freshindex.injection.http import (
    BadRequest,
    BadResponse,
    ClientError,
    FreshIndexClient,
    NotFound,
    RateLimited,
    RetrySettings,
    ServerError,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from freshindex.injection.types import ContextPacket, Evidence, render_context
from tests.api.served import serving
from tests.conftest import EXAMPLES, ROOT

HEAVY = ("fitz", "pymupdf", "sqlalchemy", "celery", "alembic", "botocore", "qdrant_edge", "numpy", "onnxruntime")


def _packet() -> ContextPacket:
    ev = (
        Evidence(n=1, chunk_id="c1", score=0.8125, text="Run `alembic downgrade -1`.", title="Release",
                 key="guides/release.md", source_id="docs", heading_path=("Release", "Database migration"),
                 anchor="database-migration", page=None, doc_version=2, snapshot_id="default-v3", written_in="default-v1"),
        Evidence(n=2, chunk_id="c2", score=0.5, text="scanned text", title="Policy", key="pdf/policy.pdf",
                 source_id="docs", heading_path=(), anchor="", page=3, doc_version=1, snapshot_id="default-v3",
                 written_in="default-v3", ocr=True),
    )
    return ContextPacket("How do I roll back?", "default", "default-v3", ev, False, None,
                         render_context("How do I roll back?", "default", "default-v3", ev), {"acl": 1})


def _client(handler: Callable[[httpx.Request], httpx.Response], **kw) -> tuple[FreshIndexClient, list[float]]:
    slept: list[float] = []
    kw.setdefault("token", "t0ken")
    client = FreshIndexClient("http://fi.test:8080/", http=httpx.Client(transport=httpx.MockTransport(handler)),
                              sleep=slept.append, **kw)
    return client, slept


def test_retrieve_posts_the_question_with_the_token_and_rebuilds_the_packet() -> None:
    # Given a server that answers with a packet's JSON
    seen: list[httpx.Request] = []
    packet = _packet()

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=packet.as_dict())

    client, _ = _client(handler)
    # When the application asks
    got = client.retrieve("How do I roll back?", kb="default", limit=3, principal="ana", groups=["eng", "eng", "ops"])
    # Then one POST to /v1/query carries the question, the kb, the principal and the bearer token
    (req,) = seen
    assert (req.method, str(req.url)) == ("POST", "http://fi.test:8080/v1/query")
    assert req.headers["authorization"] == "Bearer t0ken"
    assert json.loads(req.content) == {"question": "How do I roll back?", "kb": "default", "limit": 3,
                                       "principal": "ana", "groups": ["eng", "ops"]}
    # and the packet is the same data type, equal field for field, with its rendering
    assert got == packet
    assert got.render() == packet.rendered and got.render().startswith('<context kb="default" snapshot="default-v3">')
    assert got.citations == ["[1] guides/release.md#database-migration (v2, snapshot default-v3)",
                             "[2] pdf/policy.pdf (v1, page 3, snapshot default-v3)"]
    assert got.evidence[1].ocr is True and got.dropped == {"acl": 1}


def test_a_principal_object_and_no_token() -> None:
    from freshindex.acl import Principal

    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=ContextPacket("q", "kb", None, (), True, "no snapshot", "<context/>").as_dict())

    client, _ = _client(handler, token=None)
    got = client.retrieve("q", kb="kb", principal=Principal.of("bo", ["hr"]), groups=["legal"])
    assert "authorization" not in seen[0].headers
    assert json.loads(seen[0].content)["principal"] == "bo" and json.loads(seen[0].content)["groups"] == ["hr", "legal"]
    assert got.insufficient is True and got.reason == "no snapshot" and got.evidence == () and got.snapshot_id is None


@pytest.mark.parametrize(
    ("status", "body", "kind", "detail"),
    [
        (401, {"detail": "missing or wrong bearer token"}, Unauthorized, "missing or wrong bearer token"),
        (404, {"error": "NotFoundError", "detail": "unknown knowledge base 'x'"}, NotFound,
         "unknown knowledge base 'x'"),
        (422, {"detail": [{"loc": ["body", "question"], "msg": "String should have at least 1 character"}]},
         BadRequest, "question: String should have at least 1 character"),
        (500, "Internal Server Error", ServerError, "Internal Server Error"),
    ],
)
def test_errors_carry_the_status_and_the_servers_message_and_are_not_retried(status, body, kind, detail) -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    client, slept = _client(handler)
    with pytest.raises(kind) as info:
        client.retrieve("q", kb="x")
    err = info.value
    assert isinstance(err, ClientError) and err.status == status and err.detail == detail
    assert detail in str(err) and len(calls) == 1 and slept == []
    if kind is NotFound:
        assert isinstance(err, NotFoundError) and err.error == "NotFoundError"


_BUSY = httpx.Response(503, json={"error": "StoreBusyError", "detail": "busy"})
_LIMITED = httpx.Response(429, json={"error": "rate_limited", "detail": "slow down"}, headers={"Retry-After": "3"})


@pytest.mark.parametrize(("refusals", "slept_expected"), [
    ([_BUSY, _BUSY], [0.1, 0.2]),  # 503: the client's own backoff
    ([_LIMITED], [3.0]),  # 429: what the server asked, not the shorter backoff
])
def test_503_and_429_are_retried_then_succeed(refusals: list[httpx.Response], slept_expected: list[float]) -> None:
    answers = [*refusals, httpx.Response(200, json=_packet().as_dict())]
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return answers[len(calls) - 1]

    client, slept = _client(handler, retry=RetrySettings(retries=2, backoff=0.1))
    assert client.retrieve("q", kb="default").snapshot_id == "default-v3"
    assert len(calls) == len(answers) and slept == slept_expected


def test_429_asking_longer_than_retry_after_max_is_raised_at_once_with_the_wait() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, json={"error": "rate_limited", "detail": "slow down"},
                              headers={"Retry-After": "120"})

    client, slept = _client(handler, retry=RetrySettings(retries=2, retry_after_max=10.0))
    with pytest.raises(RateLimited) as info:
        client.retrieve("q", kb="default")
    assert isinstance(info.value, RetryableError) and info.value.retry_after == 120.0 and slept == []


def test_413_is_too_large_a_bad_request_and_not_retried() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(413, json={"error": "too_large", "detail": "body over 65536 bytes"})

    client, slept = _client(handler, retry=RetrySettings(retries=2))
    with pytest.raises(TooLarge) as info:
        client.retrieve("q" * 10, kb="default")
    assert isinstance(info.value, BadRequest) and info.value.status == 413 and calls == [1] and slept == []


def test_503_every_time_gives_up_as_unavailable() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(503, json={"error": "StoreBusyError", "detail": "collection open elsewhere"})

    client, slept = _client(handler, retry=RetrySettings(retries=3, backoff=1.0, backoff_max=2.5))
    with pytest.raises(Unavailable) as info:
        client.retrieve("q", kb="default")
    assert isinstance(info.value, RetryableError) and info.value.status == 503
    assert info.value.detail == "collection open elsewhere" and info.value.error == "StoreBusyError"
    assert len(calls) == 4 and slept == [1.0, 2.0, 2.5]


def test_connection_errors_are_retried_read_timeouts_are_not() -> None:
    calls: list[str] = []

    def refused(request: httpx.Request) -> httpx.Response:
        calls.append("refused")
        raise httpx.ConnectError("connection refused", request=request)

    client, slept = _client(refused, retry=RetrySettings(retries=1, backoff=0.05))
    with pytest.raises(Unavailable) as info:
        client.health("default")
    assert info.value.status is None and "connection refused" in str(info.value)
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert calls == ["refused", "refused"] and slept == [0.05]

    def slow(request: httpx.Request) -> httpx.Response:
        calls.append("slow")
        raise httpx.ReadTimeout("timed out", request=request)

    client, slept = _client(slow, retry=RetrySettings(retries=3), timeout=1.5)
    with pytest.raises(Unavailable, match=r"no answer within 1.5s"):
        client.retrieve("q", kb="default")
    assert calls.count("slow") == 1 and slept == []


def test_a_body_that_is_not_a_packet_is_a_bad_response() -> None:
    def html(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>proxy login</html>", headers={"content-type": "text/html"})

    with pytest.raises(BadResponse, match="without JSON"):
        _client(html)[0].retrieve("q", kb="default")

    def other(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": "ok"})

    with pytest.raises(BadResponse, match="not a context packet"):
        _client(other)[0].retrieve("q", kb="default")


def test_health_quotes_the_kb_name() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"kb": "a/b", "active_snapshot": None})

    client, _ = _client(handler)
    assert client.health("a/b") == {"kb": "a/b", "active_snapshot": None}
    assert seen[0].method == "GET" and seen[0].url.raw_path == b"/v1/kbs/a%2Fb/health"
    assert "t0ken" not in repr(client)


def test_the_client_modules_load_no_server_dependency() -> None:
    # In the full environment every heavy package is installed: importing the client must still not load one.
    code = ("import sys, json; from freshindex import injection; from freshindex.injection.http import FreshIndexClient; "
            "from freshindex.injection import ContextPacket; print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         timeout=60).stdout
    loaded = set(json.loads(out))
    assert not loaded & {*HEAVY, *(f"freshindex.{p}" for p in ("workers", "registry", "vectorstore", "acl",
                                                                  "snapshots", "api"))}
    assert "httpx" in loaded and "freshindex.injection.types" in loaded


# -- a real install without extras, against a real server ----------------------------------------------------------

_SNIPPET = textwrap.dedent("""
    import importlib.util, json, sys
    from freshindex.injection.http import FreshIndexClient, NotFound, Unauthorized
    base, token = sys.argv[1], sys.argv[2]
    client = FreshIndexClient(base, token=token)
    packet = client.retrieve("How do I roll back a database migration?", kb="default")
    errors = {}
    try:
        FreshIndexClient(base, token="wrong").retrieve("x", kb="default")
    except Unauthorized as exc:
        errors["wrong_token"] = exc.status
    try:
        client.retrieve("x", kb="nothing-here")
    except NotFound as exc:
        errors["unknown_kb"] = exc.status
    heavy = HEAVY
    loaded = [m for m in heavy if m in sys.modules]
    installed = [m for m in heavy if importlib.util.find_spec(m) is not None]
    assert not loaded, loaded
    print(json.dumps({"packet": packet.as_dict(), "citations": packet.citations, "render": packet.render(),
                      "health": client.health("default"), "errors": errors, "installed": installed}))
""").replace("HEAVY", repr(HEAVY))


def _source_copy(dst: Path) -> Path:
    """The installable project without the virtualenv, tests, data, build output or git."""
    skip_top = {"tests", "bench", "examples", "infra", "runbooks", "build", "dist"}  # and every .name

    def ignore(folder: str, names: list[str]) -> set[str]:
        top = Path(folder) == ROOT
        return {n for n in names if n == "__pycache__" or n.endswith(".egg-info") or n.startswith(".freshindex")
                or (top and (n in skip_top or n.startswith(".")))}

    shutil.copytree(ROOT, dst, ignore=ignore)
    return dst


@dataclass
class ThinInstall:
    python: Path
    stderr: str
    returncode: int
    seconds: float


@pytest.fixture
def thin_install(tmp_path: Path) -> Iterator[Future[ThinInstall]]:
    """The repository installed WITHOUT extras into a fresh virtualenv (pip resolves the base deps only), made in a
    thread while ``served`` (requested after this fixture) syncs and starts the server: neither waits on the other."""

    def install() -> ThinInstall:
        t0 = time.monotonic()
        venv = tmp_path / "thin-venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        py = venv / "bin" / "python"
        src = _source_copy(tmp_path / "src")
        pip_env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        done = subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(src)], capture_output=True, text=True,
                              env=pip_env, timeout=300)
        return ThinInstall(py, done.stderr, done.returncode, time.monotonic() - t0)

    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool.submit(install)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """``freshindex serve`` from this environment on a free port, over a synced copy of the sample kb."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env.update(FRESHINDEX_DATA_DIR=str(tmp_path / "data"), FRESHINDEX_EMBEDDING__PROVIDER="hashing",
               FRESHINDEX_API__TOKEN="t0ken")
    kb = tmp_path / "kb"
    shutil.copytree(EXAMPLES / "kb", kb)

    def cli(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "freshindex", *args], cwd=ROOT, env=env, check=True,
                       capture_output=True, timeout=120)

    cli("sources", "add", "docs", "--kind", "folder", "--location", str(kb))
    cli("sync", "docs")
    with serving(env, tmp_path, probe="/readyz") as server:
        yield server.url


@pytest.mark.slow
def test_a_base_install_gets_a_cited_packet_from_a_real_server(
    tmp_path: Path, thin_install: Future[ThinInstall], served: str
) -> None:
    # Given the repository installed WITHOUT extras into a fresh virtualenv (pip resolves the base deps only)
    install = thin_install.result(timeout=420)
    assert install.returncode == 0, install.stderr[-3000:]
    py, venv = install.python, install.python.parent.parent
    pip_env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    t1 = time.monotonic()
    print(f"fresh venv + base install: {install.seconds:.1f}s")
    # Then none of the server's dependencies came with it
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                            check=True, env=pip_env, timeout=60).stdout
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed)}
    assert "freshindex" in names and "httpx" in names
    assert not names & {"pymupdf", "sqlalchemy", "celery", "alembic", "boto3", "botocore", "qdrant-edge-py",
                        "numpy", "onnxruntime", "fastapi", "uvicorn"}
    # When an application there asks the real server (run outside the source tree: only the install is importable)
    out = subprocess.run([str(py), "-I", "-c", _SNIPPET, served, "t0ken"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    print(f"query from the thin venv: {time.monotonic() - t1:.1f}s")
    got = json.loads(out.stdout)
    # Then it holds numbered citations from the sample knowledge base, on the active snapshot
    packet = got["packet"]
    assert packet["insufficient_evidence"] is False and packet["snapshot_id"] == "default-v1"
    assert [e["n"] for e in packet["evidence"]] == list(range(1, len(packet["evidence"]) + 1))
    assert any(c.startswith(("[1] guides/release.md#", "[2] guides/release.md#database-migration"))
               for c in got["citations"])
    assert "guides/release.md#database-migration" in got["render"] and "[1]" in got["render"]
    assert got["health"]["active_snapshot"] == "default-v1"
    assert got["errors"] == {"wrong_token": 401, "unknown_kb": 404}
    assert got["installed"] == []
    # And the console script of the thin install says what to install instead of a traceback
    script = subprocess.run([str(venv / "bin" / "freshindex"), "sources", "list"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60, env={**os.environ, "FRESHINDEX_DATA_DIR": str(tmp_path / "x")})
    assert script.returncode == 2 and "pip install 'freshindex[server]'" in script.stderr
    assert "Traceback" not in script.stderr


def test_the_package_exports_every_name_it_lists() -> None:
    from freshindex import injection
    assert set(injection.__all__) == set(injection._WHERE)
    assert all(getattr(injection, name) is not None for name in injection.__all__)


def test_every_cli_module_imports_without_the_server_extra() -> None:
    # The thin install's console script must reach its "pip install 'freshindex[server]'" line, not a traceback:
    # no CLI module may import the registry, the workers or a server library at import time (the slow venv test
    # above proves it on a real thin install; this one names the module at fault in a second).
    blocked = ["sqlalchemy", "celery", "kombu", "alembic", "boto3", "botocore", "fitz", "pymupdf", "numpy",
               "onnxruntime", "fastapi", "uvicorn", "qdrant_edge", "qdrant_client"]
    probe = textwrap.dedent(f"""
        import importlib, pkgutil, sys
        for name in {blocked!r}:
            sys.modules[name] = None  # importing it raises ImportError
        import freshindex.cli as cli
        failed = []
        for info in pkgutil.iter_modules(cli.__path__):
            try:
                importlib.import_module("freshindex.cli." + info.name)
            except ImportError as exc:
                failed.append(f"{{info.name}}: {{exc}}")
        print("\\n".join(failed))
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""
