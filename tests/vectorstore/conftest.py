"""The ``store`` fixture: every vector store implementation, one collection prefix per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.vectorstore import VectorStore, open_store


@pytest.fixture(params=["edge", "local", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    kind = request.param
    if kind == "server":
        url = os.environ.get("QDRANT_URL")
        if not url:
            pytest.skip("Qdrant server tests need QDRANT_URL (no Qdrant server can be installed here)")
        s = open_store("server", url=url, api_key=os.environ.get("QDRANT_API_KEY"))
    else:
        s = open_store(kind, path=tmp_path / kind)
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    s.test_prefix = prefix  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        for name in s.list_collections():
            if name.startswith(prefix):
                s.drop_collection(name)
        s.close()
