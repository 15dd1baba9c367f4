"""One error tree for the whole service.

Every error we raise on purpose derives from :class:`FreshIndexError`.  Two
branches tell callers (and the Celery task shells) what to do with it:

* :class:`RetryableError`: the same call may succeed later (a broker or
  registry blip, a lock held by someone else, a vector store shard opened by
  another process).  Task shells retry these with backoff.
* :class:`PermanentError`: retrying cannot help (bad input, bad
  configuration, a failed verification).  Task shells record these and stop.

Third-party exceptions are converted at the adapter that calls the library
(``raise StoreError(...) from exc``) so callers never need to import a
backend's exception types.
"""

from __future__ import annotations


class FreshIndexError(Exception):
    """Root of every error freshindex raises deliberately."""


class RetryableError(FreshIndexError):
    """A failure that may go away if the same operation is tried again."""


class PermanentError(FreshIndexError):
    """A failure that retrying the same operation will not fix."""


class ConfigError(PermanentError):
    """The configuration is invalid or names something that does not exist."""


class NotFoundError(PermanentError):
    """A named object (source, snapshot, document) does not exist."""


class DocumentError(PermanentError):
    """One source document cannot be indexed.

    ``reason`` is a short stable code (it becomes a metric label and is shown
    by ``freshindex sync``); ``detail`` is the human explanation.  Raising it
    fails only that document: the sync records it and carries on.
    """

    #: Reason codes used across connectors, parsers, the fetch retry and the
    #: reaper: the one list of them (they are metric labels and stored rows).
    UNREADABLE = "unreadable"
    BINARY = "binary_content"
    ENCODING = "invalid_encoding"
    TOO_LARGE = "too_large"
    UNSUPPORTED = "unsupported_type"
    PARSE_FAILED = "parse_failed"
    EMPTY = "empty"
    OCR_UNAVAILABLE = "ocr_unavailable"
    UNSAFE_KEY = "unsafe_key"
    ENCRYPTED = "encrypted"
    VANISHED = "vanished"
    TIMED_OUT = "timed_out"
    TOO_COMPLEX = "too_complex"
    #: A folder source's symbolic link (to a file or a folder) that leads out
    #: of the source: never followed, listed so that it is seen.
    SYMLINK_OUTSIDE = "symlink_outside"
    #: The fetch failed through every retry (``workers.connectors.retry``).
    FETCH_FAILED = "fetch_failed"
    #: The worker processing the document died; the reaper recorded it.
    WORKER_LOST = "worker_lost"
    #: Processing the document killed its worker process more than ``sync.document_crash_retries``
    #: times (a poison pill: SIGKILL, a native parser's segfault, the OOM killer); skipped until it changes.
    WORKER_CRASHED = "worker_crashed"
    #: The document's ACL could not be trusted (a malformed sidecar, an invalid
    #: group in a tag or a service answer): it is not served wider than before.
    ACL_INVALID = "acl_invalid"
    #: An ACL source (S3 tags, the permission service) could not be reached.
    ACL_UNAVAILABLE = "acl_unavailable"
    #: A remote embedding server refused the document's texts (HTTP 400 or 422; freshindex/models/remote.py).
    EMBED_REJECTED = "embed_rejected"

    #: Left out by the source's ``--include`` / ``--exclude`` patterns (a skip, never an error).
    EXCLUDED = "excluded"
    #: Found unchanged, but its record moved (new content staged, another writer) before the touch was
    #: written (``registry.touches``): the run records it ``skipped`` and the next sync processes it again.
    #: Never raised, so not in :data:`SKIP`: the document's own state is left as it was.
    TOUCH_MOVED = "touch_moved"

    #: Reasons that are a skip, not a failure: the document is listed as ``skipped`` with the reason
    #: (``freshindex documents list --skipped``) and never makes a run ``partial``.  ``empty``: the
    #: parser found no text (a page of navigation, an index or a table of contents only).
    SKIP = frozenset({EMPTY, UNSUPPORTED, EXCLUDED})

    #: Reasons that say nothing about the document's content: the next sync
    #: fetches such a document again even if its etag did not change.
    #: The ACL reasons are here too: fixing a sidecar or the service does not move the document's etag.
    TRANSIENT = frozenset({UNREADABLE, VANISHED, FETCH_FAILED, ACL_INVALID, ACL_UNAVAILABLE})

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class SourceError(RetryableError):
    """Listing or fetching from a source failed as a whole (network, auth)."""


class WriteConflictError(RetryableError):
    """A concurrent writer inserted the same row first (two deliveries of one task ran side by side).

    Retrying is right: the retry reads what the winner wrote, and an
    idempotent step then finds its work already done.
    """


class StoreError(RetryableError):
    """The vector store refused or failed an operation."""


class StoreBusyError(StoreError):
    """An embedded vector store collection is open in another process."""


class LockHeldError(RetryableError):
    """Another builder holds the writer lock of a knowledge base."""


class VerificationError(PermanentError):
    """A freshly built collection version failed its checks; the alias stays."""


class EmbeddingError(RetryableError):
    """The embedding model failed or could not be loaded."""


class ModelMismatchError(RetryableError):
    """The served snapshot's vectors come from another embedding model than the one embedding the question.

    After ``embedding.model`` (or provider, dimensions) changes, the query
    side embeds with the new model while the alias still serves the old
    vectors until the next build swaps in a re-embedded version: comparing
    the two would rank by noise.  Retryable: the next build resolves it.
    """


class StaleTaskError(PermanentError):
    """A task of a sync run that is no longer running tried to write.

    The run finished, or a later run adopted its changeset (the task was
    redelivered after its worker died, or retried after a countdown).  The
    write was refused inside the transaction that would have made it, so
    nothing changed; retrying cannot help, the run is closed for good.
    """

    def __init__(self, run_id: int, changeset_id: int | None, why: str) -> None:
        super().__init__(f"sync run {run_id} (changeset {changeset_id}) no longer takes writes: {why}")
        self.run_id = run_id
        self.changeset_id = changeset_id
        self.why = why
