"""Every metric freshindex exports, on a registry of its own.

One :class:`Metrics` per process, created at start and passed down (no
module-level collectors), so tests read exact values from a fresh instance.
Label sets are small and fixed: ``source``, ``kb``, ``reason``, ``outcome``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

#: Distinct ``source`` values of ``freshindex_insufficient_evidence_total`` before new ones count as ``_other``.
MAX_SOURCE_LABELS = 200
#: Its built-in ``source`` values: nothing readable came back, and past the cap. A registry source id starts with
#: a letter or digit (:func:`core.ids.validate_source_id`), so no source shares a series with either.
NO_SOURCE_LABEL = "_none"
OTHER_SOURCES_LABEL = "_other"


class Metrics:
    """The process's collectors, one attribute each, defined by subsystem (the ``_*_metrics`` methods)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._sync_metrics(r)
        self._embedding_metrics(r)
        self._build_metrics(r)
        self._query_metrics(r)
        self._api_metrics(r)
        self._eval_metrics(r)
        self._disk = DiskCollector()
        r.register(self._disk)

    def _sync_metrics(self, r: CollectorRegistry) -> None:
        """Sync runs and documents: outcomes, errors, skips, moves, retries, crashes, OCR, tasks, the reaper."""
        self.documents = Counter("freshindex_documents_total", "Documents processed by outcome",
                                 ["source", "outcome"], registry=r)
        self.document_errors = Counter("freshindex_document_errors_total",
                                       "Documents that could not be indexed, by reason", ["source", "reason"],
                                       registry=r)
        self.documents_skipped = Counter("freshindex_documents_skipped_total",
                                         "Documents listed but not indexed on purpose, by reason (excluded by the "
                                         "source's patterns, empty, unsupported_type); never errors",
                                         ["source", "reason"], registry=r)
        self.documents_moved = Counter("freshindex_documents_moved_total", "Documents whose content reappeared "
                                       "under a new key in the same sync (not counted by the deletion guard)",
                                       ["source"], registry=r)
        self.tombstones = Counter("freshindex_tombstones_written_total", "Tombstones written", ["kb", "reason"],
                                  registry=r)
        self.sync_runs = Counter("freshindex_sync_runs_total", "Finished sync runs by status", ["source", "status"],
                                 registry=r)
        # multiprocess_mode: a worker's pool children each hold a value; without it (mode "all") every
        # child's value would be a series of its own with a `pid` label, new on every restart.
        self.last_sync = Gauge("freshindex_last_successful_sync_timestamp_seconds",
                               "Unix time of the last successful sync", ["source"], registry=r,
                               multiprocess_mode="max")
        self.tasks = Counter("freshindex_tasks_total", "Celery task executions", ["task", "outcome"], registry=r)
        self.stale_tasks = Counter("freshindex_stale_tasks_total",
                                   "Tasks of a closed or adopted sync run, fenced off without writing", ["task"],
                                   registry=r)
        self.deletions_held = Counter("freshindex_deletions_held_total",
                                      "Syncs whose deletions the deletion guard held for confirmation", ["source"],
                                      registry=r)
        self.fetch_retries = Counter("freshindex_fetch_retries_total",
                                     "Document fetches retried after a transient source error", ["source"],
                                     registry=r)
        self.ocr_low_confidence_pages = Counter("freshindex_ocr_low_confidence_pages_total",
                                                "Scanned pages read with an OCR confidence under the floor",
                                                ["source"], registry=r)
        self.ocr_pages = Counter("freshindex_ocr_pages_total", "Scanned pages read by OCR (the denominator of "
                                 "freshindex_ocr_low_confidence_pages_total)", ["source"], registry=r)
        self.worker_crashes = Counter("freshindex_worker_crashes_total",
                                      "Document attempts whose worker process died on the document (found by the "
                                      "next attempt); past sync.document_crash_retries it is recorded worker_crashed",
                                      ["source"], registry=r)
        self.reaped_runs = Counter("freshindex_reaped_runs_total",
                                   "Stalled sync runs the reaper resumed, closed or rebuilt", ["action"], registry=r)

    def _embedding_metrics(self, r: CollectorRegistry) -> None:
        """The embedding model, the vector cache and remote embedding servers."""
        self.chunks_embedded = Counter("freshindex_chunks_embedded_total", "Chunks embedded by the model",
                                       ["model"], registry=r)
        self.chunks_reused = Counter("freshindex_chunks_reused_total", "Added chunks served by the vector cache",
                                     ["model"], registry=r)
        self.embed_seconds = Counter("freshindex_embed_seconds_total", "Wall time inside the embedding model",
                                     ["model"], registry=r)
        self.remote_embed_requests = Counter(
            "freshindex_remote_embed_requests_total", "Requests to a remote embedding server (embedding.provider "
            "openai or tei) by outcome: ok, throttled (429), unavailable (502, 503, 504), server_error (other 5xx), "
            "timeout, connect, rejected (other 4xx)", ["provider", "outcome"], registry=r)
        self.remote_embed_seconds = Histogram(
            "freshindex_remote_embed_request_seconds", "Wall time of one request to a remote embedding server, "
            "whatever its outcome", ["provider"], registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.remote_embed_retries = Counter(
            "freshindex_remote_embed_retries_total", "Requests to a remote embedding server tried again, by the "
            "outcome that made it wait", ["provider", "outcome"], registry=r)

    def _build_metrics(self, r: CollectorRegistry) -> None:
        """Snapshot builds: outcomes, time, verification, swaps, blue/green, reconciliation."""
        self.builds = Counter("freshindex_builds_total", "Snapshot builds by outcome", ["kb", "outcome"], registry=r)
        self.standby_busy = Counter("freshindex_standby_busy_total", "Blue/green builds that copied instead: a "
                                    "reader still had the standby open", ["kb"], registry=r)
        self.build_seconds = Histogram("freshindex_build_seconds", "Snapshot build wall time", ["kb"], registry=r,
                                       buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
        self.verification_failures = Counter("freshindex_verification_failures_total",
                                             "Builds held because a check failed", ["kb", "check"], registry=r)
        self.alias_swaps = Counter("freshindex_alias_swaps_total", "Alias swaps", ["kb"], registry=r)
        self.reconcile_orphans = Counter("freshindex_reconcile_orphans_total",
                                         "Orphans reconciliation found and withdrawn, by direction (index: a point "
                                         "without a live registry row; registry: a live chunk missing from the index)",
                                         ["kb", "direction"], registry=r)

    def _query_metrics(self, r: CollectorRegistry) -> None:
        """The query path: outcomes, stage times, refusals, citations, the recheck and ACL denials."""
        self.queries = Counter("freshindex_queries_total", "Queries answered by outcome", ["kb", "outcome"],
                               registry=r)
        self.refusals = Counter("freshindex_refusals_total",
                                "Insufficient-evidence answers by reason (a fixed set: injection.refusal."
                                "RefusalReason; no kb label: a library caller may name any kb)", ["reason"], registry=r)
        self.query_seconds = Histogram("freshindex_query_seconds",
                                       "Query time by stage (a fixed set: injection.context.QUERY_STAGES: embed, "
                                       "search, recheck, compose, total)", ["stage"], registry=r,
                                       buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
        self.empty_recalls = Counter("freshindex_empty_recalls_total",
                                     "Queries whose vector query returned no hit the principal may read (no kb "
                                     "label: a library caller may name any kb)", registry=r)
        self.invalid_citations = Counter("freshindex_invalid_citations_total",
                                         "Citations of checked answers that failed, by kind (missing: the number is "
                                         "not in the source list; unsupported: no citing sentence overlaps it; "
                                         "zero_number, reversed_range, range_too_wide, number_too_large: "
                                         "malformed)",
                                         ["kind"], registry=r)
        self.insufficient_evidence = Counter("freshindex_insufficient_evidence_total",
                                             "Insufficient-evidence packets by the registry source of the nearest "
                                             f"candidate the caller could read ({NO_SOURCE_LABEL}: nothing "
                                             f"readable came back); at most {MAX_SOURCE_LABELS} source values, "
                                             f"then {OTHER_SOURCES_LABEL}", ["source"], registry=r)
        self._insufficient_sources: set[str] = set()
        self._insufficient_lock = threading.Lock()  # the cap's check-then-add, across the API's threads
        self.recheck_drops = Counter("freshindex_recheck_dropped_total",
                                     "Hits dropped by the registry recheck before return", ["kb", "reason"],
                                     registry=r)
        self.acl_denials = Counter("freshindex_acl_denials_total",
                                   "Hits the query path denied after the vector query, by reason (a fixed set: "
                                   "acl.access.Verdict); each is in the audit trail", ["reason"], registry=r)
        self.acl_denials_unrecorded = Counter("freshindex_acl_denials_unrecorded_total",
                                              "Denials the audit trail could not record (still denied)",
                                              registry=r)
        self.refusals_unrecorded = Counter("freshindex_refusals_unrecorded_total",
                                           "Insufficient-evidence answers the refusal audit could not record "
                                           "(the answer still went out)", registry=r)
        self.acl_service_errors = Counter("freshindex_acl_service_errors_total",
                                          "Permission service requests that failed closed (timeout, unreachable, "
                                          "bad status or answer)", ["kind", "reason"], registry=r)

    def _api_metrics(self, r: CollectorRegistry) -> None:
        """The HTTP service: readiness, authentication, limits, webhooks."""
        self.readiness_failures = Counter("freshindex_readiness_failures_total",
                                          "Readiness checks that failed, by dependency (registry, vector_store)",
                                          ["dependency"], registry=r)
        self.unknown_kb_requests = Counter("freshindex_unknown_kb_requests_total",
                                           "Requests naming a knowledge base the registry does not know (404; "
                                           "the name itself is never a label)", ["endpoint"], registry=r)
        self.auth_failures = Counter("freshindex_auth_failures_total",
                                     "API requests refused (401/403) by reason (a fixed set: api/auth.py)",
                                     ["reason"], registry=r)
        self.api_limited = Counter("freshindex_api_limited_total",
                                   "API requests refused by a limit: too_large (413), busy (503: api.max_in_flight), "
                                   "rate_credential and rate_peer (429: api.rate_limit_*)", ["reason"], registry=r)
        self.webhook_rejections = Counter("freshindex_webhook_rejections_total",
                                          "Webhook requests refused before anything was enqueued, by reason "
                                          "(bad_signature, replayed, replayed_body, stale_timestamp, unknown_source, "
                                          "too_large, malformed)", ["reason"], registry=r)
        self.webhook_events = Counter("freshindex_webhook_events_total",
                                      "Webhook requests taken, by provider and outcome (accepted, ignored, failed: "
                                      "the registry write failed, 503)",
                                      ["provider", "outcome"], registry=r)
        self.webhook_tickets = Counter("freshindex_webhook_tickets_total",
                                       "Sync tickets dispatched by outcome (done, failed)", ["outcome"], registry=r)
        self.webhook_batch_size = Histogram("freshindex_webhook_batch_size",
                                            "Verified webhook deliveries written per registry commit (group commit)",
                                            registry=r, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))

    def _eval_metrics(self, r: CollectorRegistry) -> None:
        """The scheduled evaluation of registered golden sets (``freshindex/eval_schedule.py``), per kb and set.

        Set by the task that ran the evaluation (a worker's pool child: ``mostrecent`` keeps the newest
        write of any child, with no ``pid`` label) and, in ``serve``, read from the registry at each scrape
        (:meth:`watch_evaluations`).  A figure without a question to count (no passage required) is absent.
        """
        self._eval_gauges: dict[str, Gauge] = {
            "hit": Gauge("freshindex_eval_hit_ratio", "Hit@k of a golden set's newest evaluation (questions "
                         "with an expected document that found it within k)", ["kb", "golden"], registry=r,
                         multiprocess_mode="mostrecent"),
            "passage": Gauge("freshindex_eval_passage_ratio", "Passage@k of a golden set's newest evaluation "
                             "(questions whose required passage an item on the document holds)", ["kb", "golden"],
                             registry=r, multiprocess_mode="mostrecent"),
            "passed": Gauge("freshindex_eval_passed", "1 when every threshold of a golden set held in its newest "
                            "evaluation, else 0", ["kb", "golden"], registry=r, multiprocess_mode="mostrecent"),
            "at": Gauge("freshindex_eval_last_run_timestamp_seconds", "Unix time of a golden set's newest "
                        "evaluation", ["kb", "golden"], registry=r, multiprocess_mode="mostrecent"),
        }
        self.eval_failures = Gauge("freshindex_eval_failures", "Questions of a golden set's newest evaluation "
                                   "that failed, by the stage of the line that lost them (none: no stage)",
                                   ["kb", "golden", "stage"], registry=r, multiprocess_mode="mostrecent")
        self._eval_rows: Callable[[], Iterable[dict[str, Any]]] | None = None

    def record_eval(self, kb: str, golden: str, figures: dict[str, Any], *, at: float,
                    previous: dict[str, Any] | None = None) -> None:
        """One evaluation's :meth:`evaluation.Report.metrics` as the ``freshindex_eval_*`` gauges of (kb, set).

        ``previous``: the set's figures before this run; its failing stages that no longer fail are set to 0
        (another pool child may still hold their old value).  ``at``: the run's Unix time.
        """
        g = self._eval_gauges
        for key, name in (("hit", "hit_ratio"), ("passage", "passage_ratio")):
            if figures.get(name) is None:
                with contextlib.suppress(KeyError):  # no series yet
                    g[key].remove(kb, golden)
            else:
                g[key].labels(kb, golden).set(float(figures[name]))
        if figures.get("passed") is not None:
            g["passed"].labels(kb, golden).set(1.0 if figures["passed"] else 0.0)
        g["at"].labels(kb, golden).set(at)
        failing = dict(figures.get("failures_by_stage") or {})
        for stage in (previous or {}).get("failures_by_stage") or {}:
            failing.setdefault(stage, 0)
        for stage, n in failing.items():
            self.eval_failures.labels(kb, golden, str(stage)).set(float(n))

    def watch_evaluations(self, rows: Callable[[], Iterable[dict[str, Any]]]) -> None:
        """Refresh the ``freshindex_eval_*`` gauges from ``rows`` at each :meth:`render` (``serve``'s path).

        ``rows``: the registered sets as dicts with ``kb``, ``name``, ``last_metrics``, ``last_passed`` and
        ``last_run_at`` (ISO); a set never evaluated has no series.  A failing read keeps the last values.
        """
        self._eval_rows = rows

    def _refresh_evaluations(self) -> None:
        if self._eval_rows is None:
            return
        import datetime as dt

        try:
            rows = list(self._eval_rows())
        except Exception:  # a scrape must not fail because the registry blinked
            return
        for gauge in (*self._eval_gauges.values(), self.eval_failures):
            gauge.clear()
        for row in rows:
            if not row.get("last_metrics") or not row.get("last_run_at"):
                continue
            at = dt.datetime.fromisoformat(row["last_run_at"]).timestamp()
            self.record_eval(str(row["kb"]), str(row["name"]), {**row["last_metrics"], "passed": row.get("last_passed")},
                             at=at)

    def add_health_collector(self, kbs: Callable[[], Iterable[str]], health: Callable[[str], dict[str, Any]],
                             sources: Callable[[], Iterable[dict[str, Any]]] | None = None) -> None:
        """Export registry-derived gauges (lag, backlog) computed at scrape time.

        ``sources`` gives each source's freshness (``SourceFreshness.as_dict()``
        rows) for the per-source gauges; without it they are not exported.
        """
        self.registry.register(_HealthCollector(kbs, health))
        if sources is not None:
            self.registry.register(_SourceFreshnessCollector(sources))

    def watch_disk(self, name: str, path: str | Path) -> None:
        """Export the free and total bytes of the file system under ``path`` as ``dir=name``, read at scrape time.

        ``freshindex_disk_free_bytes{dir}`` is what an unprivileged writer may
        still use (``statvfs`` ``f_bavail``): the embedded registry and the
        vector store stop writing, and on tmpfs stop opening shards, before
        it reaches 0 (:mod:`vectorstore.edge_space`). Names are the caller's
        fixed set (``data``, ``vectors``), never request input.
        """
        self._disk.paths[name] = Path(path)

    def observe_stage(self, stage: str, seconds: float) -> None:
        """A :data:`injection.context.StageSink`: one query's time in one stage."""
        self.query_seconds.labels(stage).observe(seconds)

    def count_insufficient(self, _kb: str, source: str | None, _reason: Any = None) -> None:
        """A :data:`injection.client.InsufficientSink`: one insufficient-evidence packet, by source.

        ``source`` comes from a point's payload (a registry source id, so an
        operator-bounded set); past :data:`MAX_SOURCE_LABELS` distinct values
        new ones count as :data:`OTHER_SOURCES_LABEL` (:data:`NO_SOURCE_LABEL`: nothing readable came back).
        The reason is already ``freshindex_refusals_total{reason}``.
        """
        label = source or NO_SOURCE_LABEL
        if label not in (NO_SOURCE_LABEL, OTHER_SOURCES_LABEL):
            with self._insufficient_lock:
                if label not in self._insufficient_sources:
                    if len(self._insufficient_sources) >= MAX_SOURCE_LABELS:
                        label = OTHER_SOURCES_LABEL
                    else:
                        self._insufficient_sources.add(label)
        self.insufficient_evidence.labels(label).inc()

    def count_citations(self, report: Any) -> None:
        """A :data:`injection.citations.CitationSink`: the invalid citations of one checked answer, by kind."""
        for kind, n in report.invalid_by_kind().items():  # kinds from a fixed set, never the answer's text
            self.invalid_citations.labels(kind).inc(n)

    def render(self) -> bytes:
        self._refresh_evaluations()
        return generate_latest(self.registry)

    def value(self, name: str, **labels: str) -> float:
        """Current value of one sample (for tests and the CLI)."""
        v = self.registry.get_sample_value(name, labels)
        return float(v) if v is not None else 0.0


class _HealthCollector(Collector):
    def __init__(self, kbs: Callable[[], Iterable[str]], health: Callable[[str], dict[str, Any]]) -> None:
        self._kbs, self._health = kbs, health

    def collect(self):
        import datetime as dt

        lag = GaugeMetricFamily("freshindex_sync_lag_seconds", "Seconds since the last successful sync", labels=["kb"])
        backlog = GaugeMetricFamily("freshindex_tombstone_backlog", "Tombstones not yet applied to a serving snapshot",
                                    labels=["kb"])
        errors = GaugeMetricFamily("freshindex_documents_in_error", "Documents whose last attempt failed, by reason",
                                   labels=["kb", "reason"])
        live = GaugeMetricFamily("freshindex_live_chunks", "Chunks in the active snapshot", labels=["kb"])
        snapshots = GaugeMetricFamily("freshindex_snapshots", "Snapshots by status", labels=["kb", "status"])
        held = CounterMetricFamily("freshindex_held_builds", "Builds held by verification, by failed check "
                                   "(from the registry, so every worker's builds count)", labels=["kb", "check"])
        deletions = GaugeMetricFamily("freshindex_deletions_held",
                                      "Deletions the latest finished sync of a source held for confirmation "
                                      "(0 when not held; every source has a series)", labels=["kb", "source"])
        try:
            kbs = list(self._kbs())
        except Exception:  # a scrape must not fail because the registry blinked
            kbs = []
        for kb in kbs:
            try:
                h = self._health(kb)
            except Exception:
                continue
            if h.get("last_successful_sync"):
                last = dt.datetime.fromisoformat(h["last_successful_sync"])  # aware: a registry time
                lag.add_metric([kb], (dt.datetime.now(dt.UTC) - last).total_seconds())
            backlog.add_metric([kb], h.get("tombstone_backlog", 0))
            for reason, n in (h.get("documents_in_error_by_reason") or {}).items():
                errors.add_metric([kb, reason], n)
            live.add_metric([kb], h.get("live_chunks", 0))
            for status, n in (h.get("snapshots_by_status") or {}).items():
                snapshots.add_metric([kb, status], n)
            for check, n in (h.get("held_builds_by_check") or {}).items():
                held.add_metric([kb, check], n)
            for source, n in (h.get("deletions_held_by_source") or {}).items():
                deletions.add_metric([kb, source], n)
        yield from (lag, backlog, errors, live, snapshots, held, deletions)


class DiskCollector(Collector):
    """Free and total bytes of each watched folder's file system at scrape time (no series before a watch).

    A folder not created yet is measured at its nearest existing parent (the
    file system it will be created on); one that cannot be read is left out
    of that scrape rather than failing it.
    """

    def __init__(self) -> None:
        self.paths: dict[str, Path] = {}

    def collect(self):
        free = GaugeMetricFamily("freshindex_disk_free_bytes", "Bytes still usable (by a non-root writer) on the "
                                 "file system of a data folder (dir: data, vectors)", labels=["dir"])
        size = GaugeMetricFamily("freshindex_disk_size_bytes", "Size of the file system of a data folder",
                                 labels=["dir"])
        for name, path in sorted(self.paths.items()):
            try:
                st = os.statvfs(_existing(path))
            except OSError:
                continue
            free.add_metric([name], st.f_bavail * st.f_frsize)
            size.add_metric([name], st.f_blocks * st.f_frsize)
        yield from (free, size)


def _existing(path: Path) -> Path:
    """``path``, or its nearest parent that exists."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _age_s(iso: str | None, now: Any) -> float | None:
    import datetime as dt

    if not iso:
        return None
    return (now - dt.datetime.fromisoformat(iso)).total_seconds()  # aware: a registry time


class _SourceFreshnessCollector(Collector):
    """Per-source freshness at scrape time: seconds since verified / last success, and stale counts per kb.

    Removed sources are left out; a source never verified has no age series
    (its absence, with a stale count, is the signal).
    """

    def __init__(self, sources: Callable[[], Iterable[dict[str, Any]]]) -> None:
        self._sources = sources

    def collect(self):
        import datetime as dt

        verified = GaugeMetricFamily("freshindex_source_freshness_lag_seconds",
                                     "Seconds since the source was last verified (listed by a sync that finished)",
                                     labels=["kb", "source"])
        success = GaugeMetricFamily("freshindex_source_seconds_since_last_success",
                                    "Seconds since the source's last successful sync", labels=["kb", "source"])
        stale = GaugeMetricFamily("freshindex_stale_sources",
                                  "Sources labelled stale, by reason (unreachable, unverified); 0 series per kb "
                                  "when none is", labels=["kb", "reason"])
        try:
            rows = [r for r in self._sources() if not r.get("removed")]
        except Exception:  # a scrape must not fail because the registry blinked
            rows = []
        now = dt.datetime.now(dt.UTC)
        counts: dict[tuple[str, str], int] = {}
        for r in rows:
            kb, source = str(r.get("kb") or ""), str(r["source_id"])
            for family, key in ((verified, "last_verified_at"), (success, "last_successful_sync_at")):
                age = _age_s(r.get(key), now)
                if age is not None:
                    family.add_metric([kb, source], max(0.0, age))
            for reason in ("unreachable", "unverified"):
                counts.setdefault((kb, reason), 0)
            if r.get("stale"):
                reason = str(r.get("stale_reason") or "unverified")
                counts[(kb, reason)] = counts.get((kb, reason), 0) + 1
        for (kb, reason), n in sorted(counts.items()):
            stale.add_metric([kb, reason], n)
        yield from (verified, success, stale)
