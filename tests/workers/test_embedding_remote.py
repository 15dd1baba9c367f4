"""Remote embedders (freshindex/models/remote.py) against a real HTTP server serving the real model.

The server (bench/embed_server.py, uvicorn in a thread) answers the OpenAI
``/v1/embeddings`` and TEI ``/embed`` protocols from the bundled ONNX
MiniLM, refuses over-long inputs as the real servers do, records every
request, and plays queued faults (a 429 or 503 with ``Retry-After``, a slow
answer).  Only the fault sequences are scripted; the HTTP, the model and
the pipeline are real.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.embed_server import EmbedServer, Fault
from freshindex.core.errors import ConfigError, DocumentError, EmbeddingError, ModelMismatchError
from freshindex.core.types import embed_text
from freshindex.core.vector_cache import vectors_for
from freshindex.health.metrics import Metrics
from freshindex.models import embedder_from_settings
from freshindex.models.remote import (
    InputTooLongError,
    RemoteEmbedder,
    RemoteOptions,
    plan_requests,
    retry_after_seconds,
)
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.api.served import app_in_thread

KEY = "sk-test-0123456789abcdef"
WORDS = ("backup restore replica index shard alias snapshot tombstone freshness quota principal tenant "
         "webhook broker worker parser chunk vector cache model").split()


@pytest.fixture(scope="module")
def server(onnx_embedder) -> Iterator[tuple[EmbedServer, str]]:
    srv = EmbedServer(onnx_embedder)
    with app_in_thread(srv.app()) as url:
        yield srv, url


@pytest.fixture
def srv(server: tuple[EmbedServer, str]) -> EmbedServer:
    server[0].reset()
    return server[0]


def _remote(url: str, provider: str = "openai", metrics: Metrics | None = None, **kw) -> RemoteEmbedder:
    base = f"{url}/v1" if provider == "openai" else url
    opts = {"dimensions": 384, "max_input_tokens": 256, "timeout_s": 5.0, "backoff_s": 0.05, **kw}
    return RemoteEmbedder(RemoteOptions(provider=provider, base_url=base, model="all-MiniLM-L6-v2", **opts),
                          metrics=metrics)


def _texts(n: int, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 120)))) for _ in range(n)]


def _count(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("encoding", ["base64", "float"])
def test_vectors_come_back_as_base64_by_default_and_as_numbers_when_asked(server, srv, onnx_embedder,
                                                                         encoding) -> None:
    # Given the openai protocol, asking for base64 (the default) or for JSON numbers
    texts = _texts(4, seed=3)
    emb = _remote(server[1], **({} if encoding == "base64" else {"encoding_format": encoding}))
    try:
        got = emb.embed(texts)
    finally:
        emb.close()
    # Then the server was asked for that format, and either way the vectors are the model's
    assert {r.encoding_format for r in srv.requests} == {encoding}
    assert np.min(np.sum(got * onnx_embedder.embed(texts), axis=1)) > 0.9999


def test_an_answer_in_the_other_format_or_a_broken_one_is_read_or_refused() -> None:
    import base64
    import json

    import httpx

    vector = np.arange(1, 385, dtype="<f4")
    answers = iter([
        [vector.tolist()],  # a server that ignores encoding_format and sends numbers
        [base64.b64encode(vector.tobytes()).decode()],
        [base64.b64encode(vector.tobytes()[:-2]).decode()],  # bytes that are not float32 values
        ["not base64 at all!"],
    ])

    def answer(request: httpx.Request) -> httpx.Response:
        rows = next(answers)
        return httpx.Response(200, content=json.dumps({"data": [{"index": 0, "embedding": r} for r in rows]}))

    emb = RemoteEmbedder(RemoteOptions(provider="openai", base_url="http://embed.test/v1", model="m", dimensions=384,
                                       retries=0), transport=httpx.MockTransport(answer))
    try:
        want = vector / np.linalg.norm(vector)
        assert np.allclose(emb.embed(["a"])[0], want) and np.allclose(emb.embed(["a"])[0], want)
        for _ in range(2):
            with pytest.raises(EmbeddingError, match="unreadable answer"):
                emb.embed(["a"])
    finally:
        emb.close()


@pytest.mark.parametrize("provider", ["openai", "tei"])
def test_both_protocols_return_the_in_process_models_vectors(server, srv, onnx_embedder, provider) -> None:
    # Given the bundled model served over HTTP, and a key in a secret file
    url = server[1]
    # When texts are embedded through the remote provider
    texts = _texts(5)
    emb = _remote(url, provider, api_key=KEY)
    try:
        got = emb.embed(texts)
    finally:
        emb.close()
    # Then the vectors are the in-process model's, and the key went as a bearer header
    want = onnx_embedder.embed(texts)
    assert got.shape == (5, 384)
    assert np.min(np.sum(got * want, axis=1)) > 0.9999
    assert {r.authorization for r in srv.requests} == {f"Bearer {KEY}"}
    assert {r.protocol for r in srv.requests} == {provider}
    assert emb.model_id == f"{provider}:all-MiniLM-L6-v2:384"


def test_requests_stay_within_the_token_and_count_limits_with_several_in_flight(server, srv) -> None:
    # Given 40 texts of 3 to 120 words, and limits of 8 texts and 400 tokens a request, 3 in flight
    texts = _texts(40)
    metrics = Metrics()
    emb = _remote(server[1], "tei", metrics=metrics, batch_max_inputs=8, batch_max_tokens=400, max_in_flight=3)
    # (the first three answers are slowed so the three in-flight requests surely overlap)
    srv.faults.extend([Fault(delay_s=0.3)] * 3)
    try:
        emb.embed(texts)
    finally:
        emb.close()
    # Then the server saw every text once, in requests within both limits, never more than 3 at a time
    seen = srv.requests
    assert sum(r.inputs for r in seen) == 40
    assert all(r.inputs <= 8 and sum(r.tokens) <= 400 for r in seen), [(r.inputs, sum(r.tokens)) for r in seen]
    counts = emb.count_tokens(texts)
    assert len(seen) == len(plan_requests(counts, max_inputs=8, max_tokens=400)) > 40 / 8
    assert srv.max_seen_in_flight == 3
    assert _count(metrics, "freshindex_remote_embed_requests_total", provider="tei", outcome="ok") == len(seen)
    assert _count(metrics, "freshindex_remote_embed_request_seconds_count", provider="tei") == len(seen)


@pytest.mark.parametrize(("provider", "status"), [("openai", 429), ("tei", 503)])
def test_throttling_is_retried_after_retry_after(server, srv, provider, status) -> None:
    # Given a server that answers the first request with `status` and Retry-After: 1
    metrics = Metrics()
    emb = _remote(server[1], provider, metrics=metrics)
    srv.faults.append(Fault(status=status, headers={"Retry-After": "1"}))
    try:
        vectors = emb.embed(["the backup window opens at two"])
    finally:
        emb.close()
    # Then the request was sent again, no sooner than the server asked, and the retry was counted
    first, second = srv.requests
    assert second.at - first.at >= 1.0
    assert vectors.shape == (1, 384) and abs(float(np.linalg.norm(vectors[0])) - 1) < 1e-5
    outcome = "throttled" if status == 429 else "unavailable"
    assert _count(metrics, "freshindex_remote_embed_retries_total", provider=provider, outcome=outcome) == 1
    assert _count(metrics, "freshindex_remote_embed_requests_total", provider=provider, outcome=outcome) == 1


def test_a_slow_answer_times_out_and_is_retried_then_gives_up_without_the_key(server, srv) -> None:
    # Given a timeout of 1 s and a server whose first answer takes 3 s (an answer within 1 s needs no
    # retry even on a loaded machine)
    metrics = Metrics()
    emb = _remote(server[1], metrics=metrics, timeout_s=1.0, retries=1, api_key=KEY)
    srv.faults.append(Fault(delay_s=3.0))
    try:
        # Then the request is retried and the call succeeds
        started = time.monotonic()
        assert emb.embed(["slow"]).shape == (1, 384)
        assert time.monotonic() - started < 3.0
        assert _count(metrics, "freshindex_remote_embed_retries_total", provider="openai", outcome="timeout") == 1
        # And when every attempt is slow, the call fails as retryable, naming the timeout, never the key
        srv.faults.extend([Fault(delay_s=3.0), Fault(delay_s=3.0)])
        with pytest.raises(EmbeddingError) as failed:
            emb.embed(["slow again"])
    finally:
        emb.close()
    assert "2 attempts" in str(failed.value) and "timeout_s=1.0" in str(failed.value)
    assert KEY not in str(failed.value)


def test_an_over_long_text_is_refused_by_rule_before_any_request(server, srv) -> None:
    # Given a model limit of 64 tokens, and one text of about 200
    emb = _remote(server[1], max_input_tokens=64)
    texts = ["short one", " ".join(WORDS * 10), "another short one"]
    try:
        with pytest.raises(InputTooLongError) as refused:
            emb.embed(texts)
    finally:
        emb.close()
    # Then nothing was sent, and the error says which text, how long, and the limit, as a document error
    assert srv.requests == []
    err = refused.value
    assert isinstance(err, DocumentError) and err.reason == DocumentError.TOO_LARGE
    assert err.indices == (1,) and "max_input_tokens=64" in err.detail and "not truncated" in err.detail


def _corpus(folder: Path, n: int = 6, long_paragraphs: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        words = [WORDS[(i * 3 + j) % len(WORDS)] for j in range(40)]
        (folder / f"doc{i:02d}.md").write_text(f"# Topic {i}\n\n{' '.join(words)}.\n\n## Details\n\n"
                                                f"Entry {i} explains {' '.join(reversed(words[:20]))}.\n")
    for i in range(long_paragraphs):  # one paragraph of about 380 tokens: a chunk of ~380 tokens at chunk_tokens=400
        (folder / f"long{i}.md").write_text("# Long\n\n" + " ".join(f"{w}{k % 7}" for k in range(190)
                                                                    for w in WORDS[k % 3:k % 3 + 1]) + ".\n")


def _services(tmp_path: Path, embedding: dict, sources: dict | None = None, **components) -> Services:
    settings = load_settings(data_dir=tmp_path / "data", embedding=embedding, sources=sources or {},
                             context={"refusal_calibration": False})
    return Services(settings, **components)


def test_a_model_switch_re_embeds_everything_under_a_new_cache_key(server, srv, onnx_embedder, tmp_path: Path) -> None:
    # Given a knowledge base synced and built with the in-process model
    _corpus(tmp_path / "kb")
    svc = _services(tmp_path, {"provider": "onnx"}, embedder=onnx_embedder)
    try:
        svc.registry.add_source("docs", kind="folder", location=str(tmp_path / "kb"), owner="t", kb="default")
        assert sync_inline(svc, "docs").build_status == "built"
        first = svc.registry.active_snapshot("default")
        assert first is not None and first.embedding_model == "all-MiniLM-L6-v2-onnx-int8"
        points = svc.registry.count_live("default")
    finally:
        svc.close()
    # When the same model is configured behind an OpenAI-compatible server (a new model id) and built again
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    remote = {"provider": "openai", "base_url": f"{server[1]}/v1", "dimensions": 384, "api_key_file": str(key_file),
              "max_input_tokens": 256}
    svc = _services(tmp_path, remote)
    try:
        assert svc.embedder.model_id == "openai:all-MiniLM-L6-v2:384"
        # (until the next build, a question is not compared with the old model's vectors: a clear, retryable error)
        with pytest.raises(ModelMismatchError, match="all-MiniLM-L6-v2-onnx-int8"):
            svc.client.retrieve("What does the page say?", kb="default")
        srv.reset()
        result = svc.builder.build("default", reason="model switch")
        # Then the build is full although nothing was staged, and every chunk was embedded again by the server
        assert result.status == "built" and result.strategy == "full", result
        assert result.vectors_embedded == result.point_count == points
        assert sum(r.inputs for r in srv.requests) == points
        assert svc.registry.cache_size("openai:all-MiniLM-L6-v2:384") == points
        assert svc.registry.cache_size("all-MiniLM-L6-v2-onnx-int8") == points
        assert svc.registry.active_snapshot("default").embedding_model == "openai:all-MiniLM-L6-v2:384"
        assert svc.client.retrieve("What does the page say?", kb="default").snapshot_id == result.snapshot_id
        rows = svc.registry.chunk_rows(sorted(svc.registry.live_chunk_ids_for_kb("default")))
        texts = {r.content_hash: embed_text(r.heading_path, r.text, title=r.title) for r in rows}
    finally:
        svc.close()
    # And the same model again is served from the cache; a revision label (the server's model changed under
    # the same name) is another key, so everything is embedded again
    srv.reset()
    again = _remote(server[1])
    revised = _remote(server[1], model_revision="2")
    svc = _services(tmp_path, remote)
    try:
        assert vectors_for(texts, again, svc.registry).embedded == 0 and srv.requests == []
        assert revised.model_id == "openai:all-MiniLM-L6-v2:384@2"
        assert vectors_for(texts, revised, svc.registry).embedded == len(texts) == points
    finally:
        svc.close()
        again.close()
        revised.close()


def test_a_dimension_mismatch_fails_before_anything_is_written(server, srv, tmp_path: Path) -> None:
    # Given a knowledge base built with the remote model
    _corpus(tmp_path / "kb", n=4)
    remote = {"provider": "tei", "base_url": server[1], "dimensions": 384, "max_input_tokens": 256}
    svc = _services(tmp_path, remote)
    try:
        svc.registry.add_source("docs", kind="folder", location=str(tmp_path / "kb"), owner="t", kb="default")
        assert sync_inline(svc, "docs").build_status == "built"
        active = svc.registry.active_snapshot("default")
        collections = set(svc.store.list_collections())
    finally:
        svc.close()
    # When the settings claim 256 dimensions for a server that returns 384 and a full build runs
    svc = _services(tmp_path, {**remote, "dimensions": 256})
    try:
        with pytest.raises(ConfigError, match=r"returned 384-dimensional vectors.*embedding.dimensions is 256"):
            svc.embedder.embed(["probe"])
        result = svc.builder.build("default", full=True)
        # Then the build fails with that message; the alias and the collections are as they were; nothing cached
        assert result.status == "failed" and "embedding.dimensions is 256" in (result.reason or ""), result
        assert svc.registry.active_snapshot("default").id == active.id
        assert set(svc.store.list_collections()) == collections
        assert svc.registry.cache_size("tei:all-MiniLM-L6-v2:256") == 0
    finally:
        svc.close()
    # And a model whose id stayed while its size changed is refused before a copy of the collection is made
    _corpus(tmp_path / "kb", n=5)
    svc = _services(tmp_path, remote)
    try:
        sync_inline(svc, "docs", build=False)
        emb = svc.embedder
        svc.close()
        svc = _services(tmp_path, remote, embedder=_Resized(emb, 256))
        with pytest.raises(ConfigError, match=r"holds 384-dimensional vectors.*makes 256"):
            svc.builder.build("default")
        assert svc.registry.active_snapshot("default").id == active.id
        assert set(svc.store.list_collections()) == collections
    finally:
        svc.close()


class _Resized:
    """An embedder claiming another size under the same model id (unit fake for the collection check)."""

    def __init__(self, inner: RemoteEmbedder, dimension: int) -> None:
        self.inner, self.dimension = inner, dimension
        self.model_id = inner.model_id
        self.max_input_tokens, self.count_tokens = inner.max_input_tokens, inner.count_tokens

    def embed(self, texts):
        return self.inner.embed(texts)[:, : self.dimension]


def test_a_server_refusing_a_documents_chunks_fails_that_document_only(server, srv, tmp_path: Path) -> None:
    # Given chunks of up to 400 tokens, a limit of 512 configured, and a server whose model takes 256
    _corpus(tmp_path / "kb", n=3, long_paragraphs=1)
    svc = _services(tmp_path, {"provider": "openai", "base_url": f"{server[1]}/v1", "dimensions": 384,
                               "max_input_tokens": 512}, sources={"chunk_tokens": 400})
    try:
        svc.registry.add_source("docs", kind="folder", location=str(tmp_path / "kb"), owner="t", kb="default")
        report = sync_inline(svc, "docs")
        # Then the long document fails as embed_rejected with the server's words; the others are indexed
        assert [(e.key, e.reason) for e in report.errors] == [("long0.md", DocumentError.EMBED_REJECTED)]
        assert "less than 256 tokens" in report.errors[0].detail
        assert report.build_status == "built"
        assert svc.registry.count_live("default") >= 3
        assert _count(svc.metrics, "freshindex_document_errors_total", source="docs",
                      reason=DocumentError.EMBED_REJECTED) == 1
    finally:
        svc.close()


def test_settings_build_the_remote_embedder_and_the_key_file_never_shows(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    s = load_settings(data_dir=tmp_path, embedding={"provider": "openai", "base_url": "https://example.invalid/v1",
                                                    "dimensions": 1536, "api_key_file": str(key_file),
                                                    "api_key_header": "api-key", "model": "text-embedding-3-small"})
    emb = embedder_from_settings(s.embedding)
    try:
        assert emb.model_id == "openai:text-embedding-3-small:1536" and emb.dimension == 1536
        assert KEY not in repr(emb.options) and KEY not in s.model_dump_json()
        assert emb._client.headers["api-key"] == KEY
    finally:
        emb.close()
    with pytest.raises(ConfigError, match="cannot read") as missing:
        embedder_from_settings(s.embedding.model_copy(update={"api_key_file": tmp_path / "nope"}))
    assert KEY not in str(missing.value)
    with pytest.raises(ConfigError, match=r"needs embedding\.base_url and embedding.dimensions"):
        load_settings(data_dir=tmp_path, embedding={"provider": "tei"})



def test_every_example_in_the_guide_is_a_valid_remote_configuration(tmp_path: Path) -> None:
    # Given the TOML examples of the configuration guide's "Remote embedders" section
    guide = (Path(__file__).resolve().parents[2] / "docs" / "configuration-guide.md").read_text()
    section = guide.split("## Remote embedders", 1)[1].split("\n## ", 1)[0]
    examples = re.findall(r"```toml\n(.*?)```", section, flags=re.S)
    assert len(examples) == 5
    for n, example in enumerate(examples):
        # When each is loaded strictly (an unknown key is an error)
        path = tmp_path / f"example{n}.toml"
        path.write_text(example)
        e = load_settings(path, strict=True, data_dir=tmp_path).embedding
        # Then it names a remote provider with everything it needs
        assert e.provider in ("openai", "tei") and e.base_url and e.dimensions > 0, example


def test_a_server_asking_to_wait_longer_than_allowed_fails_the_call_at_once(server, srv) -> None:
    # Given retry_max_wait_s = 5 and a server answering 429 with Retry-After: 120
    emb = _remote(server[1], retry_max_wait_s=5)
    srv.faults.append(Fault(status=429, headers={"Retry-After": "120"}))
    started = time.monotonic()
    try:
        with pytest.raises(EmbeddingError, match=r"asks to wait 120s, over embedding\.retry_max_wait_s=5"):
            emb.embed(["now"])
    finally:
        emb.close()
    # Then it was not retried and nobody waited
    assert len(srv.requests) == 1 and time.monotonic() - started < 5


def test_request_planning_and_retry_after_parsing() -> None:
    # A text over the token budget goes alone; order is kept; both limits hold for the rest
    assert plan_requests([10, 10, 500, 10, 10, 10], max_inputs=2, max_tokens=100) == [[0, 1], [2], [3, 4], [5]]
    assert plan_requests([60, 60, 60], max_inputs=8, max_tokens=100) == [[0], [1], [2]]
    assert plan_requests([], max_inputs=8, max_tokens=100) == []
    # Retry-After is delta-seconds or an HTTP date
    assert retry_after_seconds("3") == 3.0 and retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:30 GMT", now=lambda: 1445412500.0) == 10.0


def test_a_remote_sync_embeds_ahead_and_sends_each_new_chunk_once(server, srv, tmp_path: Path, monkeypatch) -> None:
    """With a remote model a sync parses and embeds the next documents in threads (workers/ahead.py): the
    same points and vectors as one document after another, each new chunk sent to the server once."""
    from freshindex.workers import ahead

    prepared: list[int] = []
    real = ahead.embed_new

    def spy(*args, **kw):
        vectors, seconds = real(*args, **kw)
        prepared.append(len(vectors))
        return vectors, seconds

    monkeypatch.setattr(ahead, "embed_new", spy)
    _corpus(tmp_path / "kb", n=5)
    remote = {"provider": "openai", "base_url": f"{server[1]}/v1", "dimensions": 384, "max_input_tokens": 256}
    states = {}
    for name, sync in (("ahead", {}), ("one-by-one", {"parse_ahead": False})):
        srv.reset()
        prepared.clear()
        svc = Services(load_settings(data_dir=tmp_path / name, embedding=remote, sync=sync,
                                     context={"refusal_calibration": False}))
        try:
            svc.registry.add_source("docs", kind="folder", location=str(tmp_path / "kb"), owner="t", kb="default")
            report = sync_inline(svc, "docs")
            assert report.build_status == "built"
            points = svc.registry.count_live("default")
            assert sum(r.inputs for r in srv.requests) == report.run.summary["chunks_embedded"] == points
            rows = svc.registry.chunk_rows(sorted(svc.registry.live_chunk_ids_for_kb("default")))
            cached = svc.registry.cached_vectors(svc.embedder.model_id, [r.content_hash for r in rows])
            states[name] = (points, {h: v.round(5).tobytes() for h, v in cached.items()})
            # every document after the first was embedded in a thread, none in the other mode
            assert prepared == ([2, 2, 2, 2] if name == "ahead" else []), prepared
            if name == "ahead":  # an edit: only the changed chunk goes to the server
                (tmp_path / "kb" / "doc03.md").write_text((tmp_path / "kb" / "doc03.md").read_text()
                                                          .replace("Entry 3 explains", "Entry 3 no longer explains"))
                srv.reset()
                again = sync_inline(svc, "docs")
                assert again.run.summary["chunks_embedded"] == 1 == sum(r.inputs for r in srv.requests)
                (tmp_path / "kb" / "doc03.md").write_text((tmp_path / "kb" / "doc03.md").read_text()
                                                          .replace("Entry 3 no longer explains", "Entry 3 explains"))
                sync_inline(svc, "docs")
        finally:
            svc.close()
    assert states["ahead"] == states["one-by-one"]
