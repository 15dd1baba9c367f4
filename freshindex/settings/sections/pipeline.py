"""How syncs run: the broker and its queues, run leases and retries, the beat's schedules."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


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
    stage_queues: bool = Field(
        default=False,
        description="run a document's stages on their own queues: the parse queue fetches and parses, a PDF with "
        "scanned pages goes on to the ocr queue, chunks new to the vector cache go on to the embed queue, whose "
        "worker embeds and stages them; off: one task on the parse queue does every stage (a worker consuming only "
        "`parse` completes a run). Start workers for `ocr` and `embed` before turning it on",
    )
    stage_payload_max_bytes: int = Field(
        default=8_000_000, ge=0,
        description="largest hand-off to the embed queue (the document's chunks, JSON); a document whose chunks "
        "are larger is embedded by the parse or ocr worker that chunked it (0 = always)",
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


class DocumentLineSettings(BaseModel):
    """The document line's steps between parse and chunk (workers/steps/), and where parsing runs."""

    steps: list[str] = Field(
        default_factory=list,
        description="optional transform steps run between parse and chunk, by name (known: redact_pii, which "
        "replaces e-mail addresses and phone numbers with [email] and [phone]); they run in the order "
        "workers/steps/ declares them. A step's name and version are part of every document's version, so "
        "turning one on or off re-processes every document on its next sync",
    )
    processes: int = Field(
        default=0, ge=0,
        description="processes an in-process sync (`freshindex sync` without a broker) parses and chunks in, "
        "four documents ahead of the loop for each (16 in all at most, one each past 16), so parsing uses every core "
        "(workers/steps/pool.py); 0 = the "
        "cores this process may use; 1 = threads only, as before. Needs sync.parse_ahead, and a token counter "
        "that pickles (the bundled model's and the hashing stand-in's do; sentence-transformers and remote "
        "models parse in threads)",
    )
    pool_min_documents: int = Field(
        default=100, ge=1,
        description="fewest documents a sync must plan to start its pool of processes: a pool's start (the "
        "forkserver, each worker's imports) costs more than it saves on fewer documents, which are parsed in "
        "threads as with processes=1 (PostgreSQL's manual on 2 cores: 1,152 documents 11.7 s faster with the "
        "pool, an update of 83 documents 5.6 s slower)",
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
    move_similarity: float = Field(
        default=0.5, gt=0, le=1,
        description="a vanished document whose text a new key of the same sync mostly holds is a move, not a "
        "deletion (its old key goes in the same build, the deletion guard does not count it): the share of lines, "
        "by bytes, the two share over the larger (git's -M measure; 0.5 is git's default), compared on the chunk "
        "texts (workers/similarity.py)",
    )
    move_seconds: float = Field(
        default=60.0, ge=0,
        description="wall-clock seconds move finding by similarity may take per sync; past them no further pair "
        "is compared, and a vanished document not yet paired is a deletion (the deletion guard counts it as usual)",
    )
    move_comparisons: int = Field(
        default=200, ge=0,
        description="at most this many (new key, vanished document) pairs are compared per sync when looking for "
        "moves by similarity, same basename first, then same suffix with a plausible size; each new key compared "
        "is fetched and parsed once (no OCR) in the planner. 0: moves only by identical bytes or the connector's "
        "own rename hint",
    )
    fetch_retries: int = Field(default=3, ge=0, description="retries of a transient fetch error, per document")
    fetch_backoff_s: float = Field(default=0.5, ge=0, description="first fetch retry delay (doubles, with jitter)")
    fetch_backoff_max_s: float = Field(default=10.0, ge=0, description="cap on one fetch retry delay")
    parse_ahead: bool = Field(
        default=True, description="in-process syncs fetch, parse, chunk and embed the next documents in threads "
        "while this one is staged (workers/ahead.py), so the model (in process or on a server) works while the "
        "registry is written. 300 PostgreSQL manual pages on 2 cores: 86 s against 93 s with the bundled model, "
        "90 s against 109 s with a remote one; off: one document after another",
    )


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
    eval_interval_s: float = Field(default=300.0, gt=0, description="seconds between checks for registered "
                                   "golden sets (freshindex golden-sets) whose knowledge base serves a snapshot "
                                   "they were not evaluated on; a build task's swap sends the evaluation at once, "
                                   "this tick catches swaps made elsewhere (a CLI build, a rollback)")
