"""One real ``freshindex serve`` for the integration tests: the sample knowledge base synced, API keys on."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.api.served import cli, create_key, serve_env, serving
from tests.conftest import EXAMPLES

ANSWERABLE = "How do I roll back a database migration?"
UNANSWERABLE = "What was the winning score of the 1974 Eurovision song contest?"


@dataclass(frozen=True)
class KbServer:
    url: str
    key: str  # ana's own API key (groups: eng, ops: the operator group), made with `freshindex keys create`


@pytest.fixture(scope="session")
def kb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbServer]:
    tmp = tmp_path_factory.mktemp("integrations")
    # The scanned PDF would cost seconds of OCR and answers no question asked here.
    shutil.copytree(EXAMPLES / "kb", tmp / "kb", ignore=shutil.ignore_patterns("scanned-policy.pdf"))
    env = serve_env(tmp, FRESHINDEX_AUTH__ADMIN_GROUP="ops")
    cli(env, "sources", "add", "docs", "--kind", "folder", "--location", str(tmp / "kb"))
    cli(env, "sync", "docs")
    key = create_key(env, "ana", "eng", "ops")
    with serving(env, tmp, probe="/readyz") as served:
        yield KbServer(served.url, key)
