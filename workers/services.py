"""The composition root of a freshindex process.

:class:`Services` turns one :class:`settings.Settings` into the objects the
pipeline needs, each built on first use and shared for the life of the
process (one registry engine, one vector store, one embedding model, one
client per source).  The CLI, the HTTP app and each Celery worker process
build exactly one.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from freshindex.core.types import Embedder
from freshindex.health.metrics import Metrics
from freshindex.injection import InjectionClient
from freshindex.registry import Registry, SourceInfo
from freshindex.settings import Settings
from freshindex.snapshots import Builder, Naming
from freshindex.snapshots.archive import ArchiveTarget, open_target
from freshindex.snapshots.ops import SnapshotOps
from freshindex.vectorstore import VectorStore, open_store
from freshindex.workers.chunking import Chunker
from freshindex.workers.connectors import Connector, build_connector
from freshindex.workers.connectors.s3 import s3_client
from freshindex.workers.embedding import build_embedder
from freshindex.workers.parsing import Limits, Parsers, PdfOptions
from freshindex.workers.pipeline import PIPELINE_VERSION, PipelineContext


class Services:
    def __init__(self, settings: Settings, *, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.naming = Naming(settings.vector_store.collection_prefix)
        self._lock = threading.RLock()
        self._connectors: dict[tuple[str, str], Connector] = {}

    @functools.cached_property
    def registry(self) -> Registry:
        s = self.settings
        registry = Registry.open(s.registry_url, auto_migrate=s.registry.auto_migrate, pool_size=s.registry.pool_size)
        self.metrics.add_health_collector(registry.knowledge_bases, registry.health)
        return registry

    @functools.cached_property
    def store(self) -> VectorStore:
        vs = self.settings.vector_store
        return open_store(
            vs.kind, path=self.settings.vector_path, url=vs.url,
            api_key=vs.api_key.get_secret_value() if vs.api_key else None, open_timeout=vs.open_timeout,
        )

    @functools.cached_property
    def embedder(self) -> Embedder:
        e = self.settings.embedding
        return build_embedder(e.provider, model=e.model, batch_size=e.batch_size, threads=e.threads)

    @functools.cached_property
    def parsers(self) -> Parsers:
        src = self.settings.sources
        return Parsers(
            PdfOptions(max_pages=src.max_pdf_pages, max_ocr_pages=src.max_ocr_pages, ocr_language=src.ocr_language,
                       ocr_dpi=src.ocr_dpi, ocr_low_confidence=src.ocr_low_confidence),
            Limits(time_limit_s=src.parse_time_limit_s, max_nesting_depth=src.max_nesting_depth,
                   max_table_rows=src.max_table_rows, max_render_pixels=int(src.max_render_megapixels * 1_000_000),
                   max_image_pixels=int(src.max_image_megapixels * 1_000_000),
                   max_decompressed_bytes=src.max_decompressed_bytes),
        )

    @functools.cached_property
    def chunker(self) -> Chunker:
        src = self.settings.sources
        return Chunker(max_tokens=src.chunk_tokens, overlap_tokens=src.chunk_overlap_tokens,
                       max_chunks=src.max_chunks_per_document, max_document_tokens=src.max_tokens_per_document)

    @functools.cached_property
    def pipeline(self) -> PipelineContext:
        return PipelineContext(
            registry=self.registry, embedder=self.embedder, connector_for=self.connector_for, parsers=self.parsers,
            chunker=self.chunker, metrics=self.metrics, max_file_bytes=self.settings.sources.max_file_bytes,
            sync=self.settings.sync,
        )

    @functools.cached_property
    def builder(self) -> Builder:
        snap = self.settings.snapshots
        return Builder(self.registry, self.store, self.embedder, self.metrics, naming=self.naming,
                       pipeline_version=PIPELINE_VERSION, lock_ttl=snap.lock_ttl, lock_wait=snap.lock_wait,
                       verify_sample=snap.verify_sample, keep_versions=snap.keep_versions)

    @functools.cached_property
    def snapshots(self) -> SnapshotOps:
        snap = self.settings.snapshots

        def target() -> ArchiveTarget:
            def client() -> Any:
                return s3_client(
                    endpoint_url=snap.s3.endpoint_url, region=snap.s3.region,
                    access_key_id=snap.s3.access_key_id.get_secret_value() if snap.s3.access_key_id else None,
                    secret_access_key=(snap.s3.secret_access_key.get_secret_value()
                                       if snap.s3.secret_access_key else None),
                    path_style=snap.s3.path_style,
                )

            return open_target(snap.archive_uri, client)

        return SnapshotOps(self.registry, self.store, self.builder, self.metrics, naming=self.naming,
                           archive_target=target, store_kind=self.settings.vector_store.kind,
                           presign_seconds=snap.presign_seconds)

    @functools.cached_property
    def client(self) -> InjectionClient:
        return InjectionClient(self.store, self.embedder, naming=self.naming, recheck=self.registry.chunk_status)

    def connector_for(self, source: SourceInfo) -> Connector:
        key = (source.id, source.location)
        with self._lock:
            conn = self._connectors.get(key)
            if conn is None:
                conn = build_connector(source.kind, source.location, source.options,
                                       max_bytes=self.settings.sources.max_file_bytes, s3=self.settings.sources.s3)
                self._connectors[key] = conn
            return conn

    def check(self) -> dict[str, Any]:
        """Touch every dependency once; raises on the first that is down."""
        self.registry.ping()
        self.store.list_collections()
        return {"registry": "ok", "vector_store": self.settings.vector_store.kind,
                "embedding_model": self.embedder.model_id}

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()
        if "registry" in self.__dict__:
            self.registry.close()
