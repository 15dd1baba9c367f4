"""Every vector store passes :class:`freshindex.testing.VectorStoreContract`.

Qdrant Edge (the embedded default), qdrant-client's local mode (the
stand-in for the server code path), and a Qdrant server when QDRANT_URL is
set; without it the server class skips with that reason (no Qdrant server
can be installed here).  The renaming client store runs the same suite in
``test_server_renames.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from freshindex.testing import VectorStoreContract
from freshindex.vectorstore import VectorStore, open_store


class TestEdgeStore(VectorStoreContract):
    def make_store(self, tmp_path: Path, prefix: str) -> VectorStore:
        return open_store("edge", path=tmp_path / "edge")


class TestLocalStore(VectorStoreContract):
    def make_store(self, tmp_path: Path, prefix: str) -> VectorStore:
        return open_store("local", path=tmp_path / "local")


class TestServerStore(VectorStoreContract):
    def make_store(self, tmp_path: Path, prefix: str) -> VectorStore:
        url = os.environ.get("QDRANT_URL")
        if not url:
            pytest.skip("Qdrant server tests need QDRANT_URL (no Qdrant server can be installed here)")
        return open_store("server", url=url, api_key=os.environ.get("QDRANT_API_KEY"))
