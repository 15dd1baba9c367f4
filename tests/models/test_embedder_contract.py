"""Every embedder passes :class:`freshindex.testing.EmbedderContract`.

The hashing stand-in, the bundled ONNX MiniLM (loaded once per session, the
``onnx_embedder`` fixture), and the remote embedder on both protocols
against the local embedding server of ``tests/workers/test_embedding_remote.py``
(``bench/embed_server.py``, serving that same ONNX model over HTTP).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.embed_server import EmbedServer
from freshindex.core.types import Embedder
from freshindex.models.hashing import HashingEmbedder
from freshindex.models.remote import RemoteEmbedder, RemoteOptions
from freshindex.testing import EmbedderContract
from tests.api.served import app_in_thread


class TestHashingEmbedder(EmbedderContract):
    def make_embedder(self) -> Embedder:
        return HashingEmbedder(dimension=64)


class TestOnnxEmbedder(EmbedderContract):
    @pytest.fixture
    def embedder(self, onnx_embedder: Embedder) -> Embedder:
        return onnx_embedder


@pytest.fixture(scope="module")
def embed_server(onnx_embedder) -> Iterator[str]:
    with app_in_thread(EmbedServer(onnx_embedder).app()) as url:
        yield url


class TestRemoteOpenAIEmbedder(EmbedderContract):
    provider = "openai"

    @pytest.fixture
    def embedder(self, embed_server: str) -> Iterator[Embedder]:
        base = f"{embed_server}/v1" if self.provider == "openai" else embed_server
        emb = RemoteEmbedder(RemoteOptions(provider=self.provider, base_url=base, model="all-MiniLM-L6-v2",
                                           dimensions=384, max_input_tokens=256, timeout_s=5.0, backoff_s=0.05))
        try:
            yield emb
        finally:
            emb.close()


class TestRemoteTeiEmbedder(TestRemoteOpenAIEmbedder):
    provider = "tei"
