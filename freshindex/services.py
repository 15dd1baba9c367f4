"""The composition root of a freshindex process.

:class:`Services` turns one :class:`freshindex.settings.Settings` into the
objects the parts need, each built on first use and shared for the life of
the process (one registry engine, one vector store, one embedding model, one
connector per source).  It sits above workers, snapshots and injection, where
the CLI, the HTTP app and the Celery app meet; none of those parts imports
it (the workers see it through :mod:`freshindex.workers.ports`).

A process builds only what it touches: ``freshindex serve`` builds the
registry, the store, the embedder and the injection client, and never
imports the parsers (PyMuPDF), the connectors or Celery.  Every import of a
heavy part happens inside the property that needs it.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from freshindex.core.naming import Naming
from freshindex.health.metrics import Metrics
from freshindex.health.observer import MetricsObserver, SyncObserver
from freshindex.injection.observer import QueryObserver
from freshindex.settings import Settings
from freshindex.storage import check_registry_path, check_store_path

if TYPE_CHECKING:
    from freshindex.acl.access import DenialRecord
    from freshindex.acl.resolution import PermissionService
    from freshindex.core.types import Embedder
    from freshindex.core.webhooks import WebhookProviders
    from freshindex.injection import InjectionClient
    from freshindex.injection.client import SnapshotFacts
    from freshindex.injection.refusal import RefusalPolicy, RefusalReason, Signals
    from freshindex.injection.types import ContextPacket
    from freshindex.registry import Registry, SourceInfo
    from freshindex.registry.refusals import RefusalRecord
    from freshindex.snapshots import Builder
    from freshindex.snapshots.lifecycle import SnapshotOps
    from freshindex.vectorstore import VectorStore
    from freshindex.workers.chunking import Chunker
    from freshindex.workers.connectors import Connector
    from freshindex.workers.parsing import Parsers
    from freshindex.workers.pipeline import PipelineContext

log = logging.getLogger("freshindex.services")


class Services:
    """One process's components, built lazily from ``settings``.

    ``overrides`` replace components by name (``registry``, ``store``,
    ``embedder``, ``metrics``, ``sync_observer``, ``naming``, ``parsers``, ``chunker``,
    ``pipeline``, ``builder``, ``snapshots``, ``client``, ``connector_for``):
    a given component is used as is, and what is built from it (the builder
    from a given store) uses it.  Unknown names are a :class:`TypeError`.
    What it does not do: check that an override fits the settings (a given
    embedder's model is what the vector cache is keyed by, whatever
    ``embedding.model`` says).  :meth:`close` closes the store and the
    registry whether built here or given.
    """

    def __init__(self, settings: Settings, *, create_storage: bool = True, **overrides: Any) -> None:
        unknown = set(overrides) - _COMPONENTS
        if unknown:
            raise TypeError(f"Services() got unknown components {sorted(unknown)}; known: {sorted(_COMPONENTS)}")
        self.settings = settings
        #: False: the registry and the embedded store must already exist (commands that only read).
        self.create_storage = create_storage
        self._lock = threading.RLock()
        self._connectors: dict[tuple[str, ...], Connector] = {}
        # A cached_property reads the instance dict first, so a given component is never built.
        self.__dict__.update(overrides)

    @functools.cached_property
    def metrics(self) -> Metrics:
        return Metrics()

    @functools.cached_property
    def sync_observer(self) -> SyncObserver:
        """What every sync step and build reports to: the write side's metrics and log lines, in one place."""
        return MetricsObserver(self.metrics)

    @functools.cached_property
    def naming(self) -> Naming:
        return Naming(self.settings.vector_store.collection_prefix)

    @functools.cached_property
    def registry(self) -> Registry:
        from freshindex.registry import Registry

        s = self.settings
        check_registry_path(s, create=self.create_storage)
        registry = Registry.open(s.registry_url, auto_migrate=s.registry.auto_migrate, pool_size=s.registry.pool_size)
        self.metrics.add_health_collector(registry.knowledge_bases, registry.health,
                                          sources=lambda: [f.as_dict() for f in registry.source_freshness()])
        self.metrics.watch_evaluations(registry.golden_results)  # serve's freshindex_eval_* (eval_schedule.py)
        return registry

    @functools.cached_property
    def store(self) -> VectorStore:
        from freshindex.vectorstore import open_store

        vs = self.settings.vector_store
        check_store_path(self.settings, create=self.create_storage)
        return open_store(
            vs.kind, path=self.settings.vector_path, url=vs.url,
            api_key=vs.api_key.get_secret_value() if vs.api_key else None, open_timeout=vs.open_timeout,
            layout=vs.cluster.resolved() if vs.kind == "server" else None,
            renames=vs.server_renames and vs.kind in ("server", "local"), prefix=vs.collection_prefix,
        )

    @functools.cached_property
    def embedder(self) -> Embedder:
        from freshindex.models import embedder_from_settings

        return embedder_from_settings(self.settings.embedding, metrics=self.metrics)

    @functools.cached_property
    def parsers(self) -> Parsers:
        from freshindex.workers.parsing import Limits, Parsers, PdfOptions

        src = self.settings.sources
        return Parsers(
            PdfOptions(max_pages=src.max_pdf_pages, max_ocr_pages=src.max_ocr_pages, ocr_language=src.ocr_language,
                       ocr_dpi=src.ocr_dpi, ocr_low_confidence=src.ocr_low_confidence,
                       ocr_psm=tuple(src.ocr_psm), ocr_page_floor=src.ocr_page_floor),
            Limits.from_settings(src),
        )

    @functools.cached_property
    def chunker(self) -> Chunker:
        from freshindex.workers.chunking import Chunker

        src = self.settings.sources
        return Chunker(max_tokens=src.chunk_tokens, overlap_tokens=src.chunk_overlap_tokens,
                       max_chunks=src.max_chunks_per_document, max_document_tokens=src.max_tokens_per_document,
                       # sized by the model's own tokenizer, within its input limit (no model loaded for this)
                       count_tokens=self._token_counter(),
                       max_input_tokens=getattr(self.embedder, "max_input_tokens", 256))

    def _token_counter(self) -> Any:
        """The chunker's token counter: the embedder's.  The bundled model and the hashing stand-in both count
        with MiniLM's tokenizer (:func:`models.tokens.minilm_count`), named here as the module function so
        the chunker pickles into the parse processes (``pipeline.processes``, workers/steps/pool.py)."""
        if self.settings.embedding.provider in ("onnx", "hashing"):
            from freshindex.models.tokens import minilm_count

            return minilm_count
        return getattr(self.embedder, "count_tokens", None)

    @functools.cached_property
    def pipeline(self) -> PipelineContext:
        from freshindex.workers.pipeline import PipelineContext
        from freshindex.workers.steps import transforms_named

        return PipelineContext(
            registry=self.registry, embedder=self.embedder, connector_for=self.connector_for, parsers=self.parsers,
            chunker=self.chunker, metrics=self.metrics, max_file_bytes=self.settings.sources.max_file_bytes,
            observer=self.sync_observer,
            sync=self.settings.sync, acl_service=self.acl_service,
            stage_payload_max_bytes=self.settings.broker.stage_payload_max_bytes,
            transforms=transforms_named(self.settings.pipeline.steps),
        )

    @functools.cached_property
    def acl_service(self) -> PermissionService | None:
        """The HTTP permission service (``acl.service_url``), or None; errors counted by kind and reason."""
        from freshindex.acl.resolution import service_from

        def counted(kind: str, reason: str) -> None:
            self.metrics.acl_service_errors.labels(kind, reason).inc()

        return service_from(self.settings.acl, on_error=counted)

    @functools.cached_property
    def builder(self) -> Builder:
        from freshindex.snapshots import Builder, BuildOptions
        from freshindex.vectorstore.lexical import LEXICAL_VERSION
        from freshindex.workers.pipeline import PIPELINE_VERSION

        snap = self.settings.snapshots
        # A version's lexical vectors are written by the builder from the stored chunk text: a
        # tokenizer change (LEXICAL_VERSION) makes the next build a full one, without a re-embed.
        return Builder(self.registry, self.store, self.embedder, self.metrics, BuildOptions(
            naming=self.naming, pipeline_version=f"{PIPELINE_VERSION}.l{LEXICAL_VERSION}", lock_ttl=snap.lock_ttl,
            lock_wait=snap.lock_wait, verify_sample=snap.verify_sample, keep_versions=snap.keep_versions,
            strategy=snap.strategy, reader_grace=snap.reader_grace, calibrate=self.calibrate_refusal,
            # calibration off: never carry a parent's calibrated bias forward
            calibration_refit_share=(self.settings.context.refusal_calibration_refit_share
                                     if self.settings.context.refusal_calibration else -1.0),
            calibration_fits=self.refusal_policy.fits, observer=self.sync_observer))

    @functools.cached_property
    def refusal_policy(self) -> RefusalPolicy:
        """The refusal policy of the settings (``context.refusal*``), before any snapshot's calibration."""
        from freshindex.injection.refusal import RefusalPolicy

        return RefusalPolicy.from_mapping(self.settings.context.model_dump())

    def calibrate_refusal(self, collection: str, snapshot_id: str) -> dict[str, Any]:
        """The refusal calibration of a built version (:func:`injection.calibration.calibrate`, the settings' policy)."""
        from freshindex.injection.calibration import Calibration, calibrate

        ctx = self.settings.context.model_dump()
        return calibrate(self.store, self.embedder, collection=collection, snapshot_id=snapshot_id,
                         policy=self.refusal_policy, settings=Calibration.from_mapping(ctx),
                         naming=self.naming)

    @functools.cached_property
    def snapshots(self) -> SnapshotOps:
        from freshindex.snapshots.archive import ArchiveTarget, open_target
        from freshindex.snapshots.lifecycle import SnapshotOps

        snap = self.settings.snapshots

        def target() -> ArchiveTarget:
            return open_target(snap.archive_uri, snap.s3)

        return SnapshotOps(self.registry, self.store, self.builder, self.metrics, naming=self.naming,
                           archive_target=target, store_kind=self.settings.vector_store.kind,
                           presign_seconds=snap.presign_seconds)

    def _snapshot_facts(self, snapshot_id: str) -> SnapshotFacts | None:
        """A snapshot's embedding model and its sources' revisions (None for a collection the registry does not know)."""
        from freshindex.core.errors import NotFoundError
        from freshindex.injection.client import SnapshotFacts

        try:
            snap = self.registry.get_snapshot(snapshot_id)
        except NotFoundError:
            return None
        revisions = (snap.verification or {}).get("revisions")
        return SnapshotFacts(model=snap.embedding_model,
                             revisions={str(k): str(v) for k, v in revisions.items()}
                             if isinstance(revisions, dict) else {})

    @functools.cached_property
    def client(self) -> InjectionClient:
        from freshindex.injection.client import InjectionClient, QueryHooks, QueryTuning

        hooks = QueryHooks(naming=self.naming, recheck=self.registry.chunk_status, sensitive=self.sensitive_recheck,
                           stale_sources=self._stale_sources, calibration=self.registry.snapshot_calibration,
                           observer=ServiceObserver(self), snapshot_facts=self._snapshot_facts, sources=self._kb_sources)
        return InjectionClient(self.store, self.embedder,
                               QueryTuning.of(self.settings.context, refusal=self.refusal_policy), hooks)

    def _kb_sources(self, kb: str) -> Any:
        """``registry.list_sources(kb)`` (ids, owners, ACLs) for an insufficient-evidence packet.

        Not cached: a source narrowed a moment ago must not be named to a caller it no longer admits.
        """
        return self.registry.list_sources(kb)

    def _stale_sources(self, kb: str) -> Any:
        """``registry.stale_sources(kb)``, re-read at most every 5 s (the query path asks on every query)."""
        import time

        now = time.monotonic()
        cache = self.__dict__.setdefault("_stale_cache", {})
        hit = cache.get(kb)
        if hit is None or now - hit[0] > 5.0:
            hit = cache[kb] = (now, self.registry.stale_sources(kb))
        return hit[1]

    @functools.cached_property
    def sensitive_recheck(self) -> Any:
        """The query path's recheck of sensitive documents at the permission service (None without one)."""
        if self.acl_service is None:
            return None
        import time

        from freshindex.acl.access import CachedRecheck, ServiceRecheck
        from freshindex.acl.resolution import SourceAcl

        seen: dict[str, tuple[float, bool]] = {}

        def uses_service(source_id: str) -> bool:  # a source's acl_sources, re-read at most every 30 s
            hit = seen.get(source_id)
            if hit is None or time.monotonic() - hit[0] > 30:
                try:
                    uses = "http" in SourceAcl.of(self.registry.get_source(source_id)).kinds
                except Exception:
                    uses = True  # cannot tell which source: ask the service (it denies what it does not know)
                hit = seen[source_id] = (time.monotonic(), uses)
            return hit[1]

        return CachedRecheck(ServiceRecheck(self.acl_service, uses_service), ttl_s=self.settings.acl.recheck_ttl_s)

    def record_denials(self, denials: Sequence[DenialRecord]) -> None:
        """The query path's denial sink: the audit trail and the metric. A failed write never un-denies."""
        for d in denials:
            self.metrics.acl_denials.labels(str(d.reason)).inc()
        try:
            self.registry.record_denials(denials)
        except Exception as exc:  # the hit stays denied; the gap in the trail is counted and logged
            self.metrics.acl_denials_unrecorded.inc(len(denials))
            log.warning("could not record %d denials: %s", len(denials), exc,
                        extra={"event": "denials_unrecorded", "count": len(denials), "detail": str(exc)})

    def webhook_providers(self) -> WebhookProviders:
        """The webhook providers the registered connector specs declare, and each kind's ref option.

        The HTTP app calls it on its first webhook request (``api.routes_webhooks``), never before: a
        ``serve`` that takes no webhook imports no connector.
        """
        from freshindex.workers.connectors.registry import webhook_providers

        return webhook_providers()

    def connector_for(self, source: SourceInfo) -> Connector:
        """The one connector of ``source`` (by id, kind, location and options) in this process.

        Built by the factory its kind registered (:mod:`workers.connectors.registry`); its
        own files (a git clone) live under ``data_dir/sources/<source id>``.
        """
        from freshindex.registry.source_state import SourceStateView
        from freshindex.workers.connectors import ConnectorEnv, build_connector

        # The registry's own entries in the options (the cursor, a deletion confirmation) change between
        # syncs; they do not make another connector.
        options = {k: v for k, v in (source.options or {}).items() if k not in ("sync_cursor", "confirmed_deletions")}
        key = (source.id, source.kind, source.location, repr(sorted(options.items())))
        with self._lock:
            conn = self._connectors.get(key)
            if conn is None:
                env = ConnectorEnv(sources=self.settings.sources,
                                   data_dir=(self.settings.data_dir / "sources" / source.id).resolve(),
                                   cursor=_RegistryCursor(self.registry, source.id),
                                   state=SourceStateView(self.registry, source.id))
                conn = build_connector(source, source.kind, env)
                self._connectors[key] = conn
            return conn

    def built(self, name: str) -> bool:
        """Whether component ``name`` exists in this process (built or given); never builds it."""
        return name in self.__dict__

    def check(self) -> dict[str, Any]:
        """Touch every dependency once; raises on the first that is down."""
        self.registry.ping()
        self.store.list_collections()
        return {"registry": "ok", "vector_store": self.settings.vector_store.kind,
                "embedding_model": self.embedder.model_id}

    def evaluate_golden_sets(self, kb: str | None = None, *, force: bool = False) -> list[dict[str, Any]]:
        """``kb``'s registered golden sets not yet asked on its serving snapshot, evaluated and recorded."""
        from freshindex.eval_schedule import evaluate_due

        return evaluate_due(self, kb, force=force)

    def close(self) -> None:
        if self.built("store"):
            self.store.close()
        if self.built("registry"):
            self.registry.close()


class _RegistryCursor:
    """A source's sync cursor in the registry (:class:`workers.connectors.registry.CursorStore`)."""

    def __init__(self, registry: Registry, source_id: str) -> None:
        self.registry, self.source_id = registry, source_id

    def get(self) -> dict[str, Any] | None:
        return self.registry.source_cursor(self.source_id)

    def set_pending(self, value: dict[str, Any]) -> None:
        self.registry.set_pending_cursor(self.source_id, value)

    def planned(self, run_id: int) -> dict[str, Any] | None:
        return self.registry.planned_cursor(self.source_id, run_id)


#: What ``Services(settings, **overrides)`` accepts: every component, plus the connector lookup.
_COMPONENTS = frozenset(
    name for name, value in vars(Services).items() if isinstance(value, functools.cached_property)
) | {"connector_for"}

__all__ = ["Services"]


class ServiceObserver(QueryObserver):
    """What every query records in this process, whichever path asked (library, CLI, HTTP, MCP).

    A new per-query metric or audit is one method here (:class:`~injection.observer.QueryObserver`).
    An insufficient-evidence packet is also written to the refusal audit (:mod:`registry.refusals`):
    the decision's signals and reason, heard earlier in the same query on the same thread, are kept
    per thread until :meth:`finished`.  A failed write is counted and logged; the packet goes out.
    Rows past ``audit.refusals_retention_s`` are deleted with a knowledge base's first refusal in
    this process and then at most hourly (by ``clock``), so a row may outlive it by up to an hour.
    """

    def __init__(self, services: Services, clock: Callable[[], dt.datetime] | None = None) -> None:
        self.services = services
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._query = threading.local()  # this thread's query: the refusal's signals and reason
        self._pruned: dict[str, dt.datetime] = {}  # kb -> when this process last deleted its expired refusals

    @property
    def metrics(self) -> Metrics:
        return self.services.metrics

    def stage(self, stage: str, seconds: float) -> None:
        self.metrics.observe_stage(stage, seconds)

    def denied(self, records: Sequence[DenialRecord]) -> None:
        self.services.record_denials(records)

    def empty_recall(self, kb: str) -> None:
        self.metrics.empty_recalls.inc()

    def decided(self, kb: str, reason: RefusalReason | None, signals: Signals | None) -> None:
        self._query.signals, self._query.reason = signals, None  # insufficient() follows for a refusal
        if reason is not None:
            self.metrics.refusals.labels(str(reason)).inc()

    def insufficient(self, kb: str, nearest_source: str | None, reason: RefusalReason) -> None:
        self._query.reason = reason
        self.metrics.count_insufficient(kb, nearest_source, reason)

    def finished(self, kb: str, packet: ContextPacket) -> None:
        signals, reason = getattr(self._query, "signals", None), getattr(self._query, "reason", None)
        self._query.signals = self._query.reason = None
        self.metrics.queries.labels(kb, "insufficient" if packet.insufficient else "answered").inc()
        for why, n in packet.withheld.items():  # every reason; a caller sees only packet.dropped
            self.metrics.recheck_drops.labels(kb, why).inc(n)
        if packet.insufficient and self.services.settings.audit.record_refusals:
            self._record_refusal(packet, reason, signals)

    def _record_refusal(self, packet: ContextPacket, reason: RefusalReason | None, signals: Signals | None) -> None:
        """The refusal audit's row for ``packet``; a failed write is counted and logged, never raised."""
        audit = self.services.settings.audit
        try:
            record = refusal_record(packet, reason, signals, store_question=audit.store_questions,
                                    at=self.clock()).bounded(audit.question_max_chars)
            last = self._pruned.get(record.kb)
            prune = last is None or not last <= record.at < last + _PRUNE_EVERY
            keep_since = record.at - dt.timedelta(seconds=audit.refusals_retention_s) if prune else None
            self.services.registry.record_refusal(record, keep_since=keep_since)
            if prune:
                self._pruned[record.kb] = record.at
        except Exception as exc:  # the packet goes out; the gap in the audit is counted and logged
            self.metrics.refusals_unrecorded.inc()
            log.warning("could not record a refusal: %s", exc,
                        extra={"event": "refusal_unrecorded", "kb": packet.kb, "detail": str(exc)})


def _question_key_terms(question: str) -> tuple[str, ...]:
    """The refusal terms of ``question`` that may name its subject, for a refusal decided without signals.

    Identifiers whole (not their parts) and words outside general English
    (:func:`injection.refusal.ordinary_words`); every term when that leaves none.
    """
    from freshindex.injection.refusal import is_ordinary, ordinary_words, question_terms
    from freshindex.vectorstore.lexical import tokenize

    terms, compounds = question_terms(question)
    pieces = [tokenize(piece) for piece in question.split()]
    alone = {toks[0] for toks in pieces if len(toks) == 1}  # a word the question also has outside a compound
    parts = {p for ps in compounds.values() for p in ps} - set(compounds) - alone
    terms = tuple(t for t in terms if t not in parts)
    ordinary = ordinary_words()
    return tuple(t for t in terms if not is_ordinary(t, ordinary)) or terms


#: How often one process deletes a knowledge base's refusals past the retention (at its next refusal).
_PRUNE_EVERY = dt.timedelta(hours=1)

_REASON_TEXT = re.compile(r"^insufficient evidence \((\w+)\)")


def refusal_record(packet: ContextPacket, reason: RefusalReason | None, signals: Signals | None, *,
                   store_question: bool, at: dt.datetime) -> RefusalRecord:
    """The audit's record of an insufficient-evidence ``packet`` (not yet bounded: :meth:`RefusalRecord.bounded`).

    Terms are the decision's key terms, those the evidence lacked first
    (every refusal term of the question when it had none); without signals
    (nothing admitted, no snapshot) they are the question's refusal terms,
    all missing, since no evidence held them.  The sources are the search
    report's (those of candidates the caller could read).  The question is
    kept only with ``store_question``.
    """
    from freshindex.registry.refusals import RefusalRecord

    if signals is not None:
        terms = tuple(dict.fromkeys((*signals.missing, *(signals.key_terms or signals.terms))))
        missing = signals.missing
    else:
        terms = _question_key_terms(packet.question)
        missing = terms if str(reason) != "budget_too_small" else ()
    why = str(reason) if reason is not None else None
    if why is None:
        m = _REASON_TEXT.match(packet.reason or "")
        why = m.group(1) if m else "other"
    return RefusalRecord(kb=packet.kb, reason=why, terms=terms, missing=tuple(missing),
                         sources=packet.search.sources if packet.search is not None else (),
                         snapshot_id=packet.snapshot_id, question=packet.question if store_question else None, at=at)
