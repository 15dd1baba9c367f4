"""The HTTP API's typed surface: a pydantic model for every request and answer, the security schemes,
that make the OpenAPI document (built in :mod:`api.openapi`, which imports the app; this module does not).

The routes keep building their answers as they did (``packet.as_dict()``,
``registry.health(kb)``, ...); these models document them (``responses=`` on
each route) rather than re-serialise them, so declaring a model changed no
byte on the wire. ``tests/api/test_openapi.py`` checks the committed document
against the app's, and ``tests/integrations/test_generated_client.py`` checks
real answers against models generated from it: a field added to an answer
but not here fails there.

Security: the query and operator routes take ``Authorization: Bearer`` with
an API key (``fik_<key id>_<secret>``, ``auth.mode=keys``) or a JWT
(``auth.mode=jwt``); which one a server accepts is its ``auth.mode``
(gateway mode reads identity headers from a trusted proxy instead, and
``none`` takes no credential). Webhook routes take none of these: each
checks its source's signature header.
"""

from __future__ import annotations

from typing import Any

from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

#: ``Authorization: Bearer fik_<key id>_<secret>`` (``freshindex keys create``). Declared for the document:
#: ``auto_error=False`` leaves every decision to :mod:`api.auth`, as before.
API_KEY = HTTPBearer(scheme_name="apiKey", bearerFormat="fik_<key id>_<secret>", auto_error=False,
                     description="An API key made by `freshindex keys create` (auth.mode keys or keys+jwt).")
#: ``Authorization: Bearer <JWT>`` signed by a key of the configured JWKS.
JWT = HTTPBearer(scheme_name="jwt", bearerFormat="JWT", auto_error=False,
                 description="A JWT signed by a key of auth.jwks_url / auth.jwks_file (auth.mode jwt or keys+jwt).")


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")  # a newer server may add fields; a reader ignores them


# -- errors ---------------------------------------------------------------------------------


class ErrorBody(_Body):
    """An error: freshindex's own carry ``error`` (a type or reason name); FastAPI's carry ``detail`` only."""

    error: str | None = Field(default=None, description="The error's type or reason (absent on some 4xx).")
    detail: str = Field(description="What went wrong, for a person.")


class ValidationErrorBody(_Body):
    """422: the request failed validation; one item per field."""

    detail: list[dict[str, Any]]


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Not JSON, or not a valid request (a lone surrogate, ...)."},
    401: {"model": ErrorBody, "description": "No credential, or a bad one (`WWW-Authenticate: Bearer`)."},
    403: {"model": ErrorBody, "description": "The credential may not do this."},
    404: {"model": ErrorBody, "description": "Unknown knowledge base, source or route."},
    413: {"model": ErrorBody, "description": "The body is over the route's cap."},
    422: {"model": ValidationErrorBody, "description": "The request failed validation."},
    429: {"model": ErrorBody, "description": "Over the credential's rate; see `Retry-After`."},
    503: {"model": ErrorBody, "description": "Too many requests in flight, or a dependency is down; retry."},
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error answers of a route, by status."""
    return {s: ERRORS[s] for s in statuses}


def ok(model: type[BaseModel] | Any, description: str, status: int = 200) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": model, "description": description}}


# -- probes ---------------------------------------------------------------------------------


class Alive(_Body):
    status: str = Field(examples=["ok"])


class Ready(_Body):
    ready: bool
    kbs: dict[str, str] = Field(description="Each knowledge base's state: `serving KB-vN`, `no snapshot yet`.")


class NotReady(_Body):
    ready: bool
    dependency: str = Field(description="`registry` or `vector_store`.")
    detail: str


# -- the query ------------------------------------------------------------------------------


class MirrorBody(_Body):
    """Another document holding a near-copy of the passage."""

    key: str
    doc_version: int
    anchor: str
    page: int | None


class EvidenceBody(_Body):
    """One numbered source of a context packet."""

    n: int = Field(description="The number to cite, [n].")
    chunk_id: str
    score: float = Field(description="The last reranker's score when a reranker ordered the packet, else the "
                         "dense cosine of the question and the chunk; the evidence's order is the packet's "
                         "(the fused rank without a reranker), which this score alone does not show.")
    title: str
    key: str
    source_id: str
    heading_path: list[str]
    anchor: str
    page: int | None
    doc_version: int
    snapshot_id: str
    written_in: str
    ocr: bool
    citation: str = Field(description="`[n] key#anchor (vN, snapshot S)`.")
    text: str
    commit: str | None = Field(default=None, description="A git source's commit the serving snapshot was built "
                               "from (shortened): one commit per repository in a packet.")
    changed_in: str | None = Field(default=None, description="A git source's commit this text was read at "
                                   "(shortened): where it last changed as far as the index knows.")
    date: str | None
    stale: bool
    verified_at: str | None
    table_columns: list[str]
    page_end: int | None
    ocr_confidence: float | None
    also_in: list[MirrorBody]
    pending_deletion: bool = Field(default=False, description="Its document vanished from the source; the "
                                   "deletion guard holds the deletion for a person, so it is still served.")


class NextActionBody(_Body):
    action: str = Field(description="`refresh_source` or `ask_owner`.")
    reason: str = Field(description="`expired`, `stale`, `no_snapshot` or `not_found`.")
    source_id: str | None
    owner: str | None


class SubQueryBody(_Body):
    text: str
    mode: str = Field(description="`hybrid` (the question as asked) or `lexical` (its identifiers alone).")
    hits: int


class SearchReportBody(_Body):
    """What was searched and what became of the candidates, in terms the caller may see."""

    kb: str
    snapshot_id: str | None
    sources: list[str]
    candidates: int
    accepted: int
    rejected: dict[str, int]
    next_actions: list[NextActionBody]
    subqueries: list[SubQueryBody]
    conflicting: bool


class ConflictValueBody(_Body):
    value: str
    n: int
    key: str


class ConflictBody(_Body):
    subject: str
    values: list[ConflictValueBody]


class ContextPacketBody(_Body):
    """A question's answer: numbered evidence and the rendered, fenced block, or insufficient evidence."""

    question: str
    kb: str
    snapshot_id: str | None = Field(description="The one snapshot every piece of evidence came from.")
    insufficient_evidence: bool = Field(description="True when nothing supports an answer (`reason` says why).")
    reason: str | None
    evidence: list[EvidenceBody]
    dropped: dict[str, int] = Field(description="Hits removed after the query, by reasons a caller may see.")
    search: SearchReportBody | None
    conflicts: list[ConflictBody]
    context: str = Field(description="The numbered, nonce-fenced context block for the prompt.")


class CitationCheckRequest(BaseModel):
    """A finished answer and the packet (or its evidence) it was written from."""

    answer: str = Field(min_length=1, max_length=50_000)
    packet: dict[str, Any] = Field(description="The body `POST /v1/query` returned, or `{\"evidence\": [...]}` "
                                               "(each item with at least `n` and `text`).")


class MalformedCitation(_Body):
    kind: str = Field(description="`zero_number`, `reversed_range`, `range_too_wide` or `number_too_large`.")
    citation: str


class CitationReportBody(_Body):
    ok: bool
    cited: list[int]
    missing: list[int]
    unsupported: list[int]
    malformed: list[MalformedCitation]
    sentences: int
    uncited_sentences: int
    support: dict[str, float] = Field(description="Each cited number's best overlap with a citing sentence.")


# -- knowledge bases, snapshots, sources ------------------------------------------------------


class SourceFreshnessBody(_Body):
    source_id: str
    kb: str
    paused: bool
    removed: bool
    poll_interval_s: int | None
    stale_after_s: int | None
    hard_expiry_s: int | None
    last_verified_at: str | None
    last_successful_sync_at: str | None
    last_error: str | None
    stale: bool
    stale_reason: str | None = Field(description="`unreachable` or `unverified` (None when fresh).")


_KB_WIDE = ("Counted over every source of the knowledge base: null for a tenant's caller on a knowledge base "
            "shared with another tenant.")


class KbHealthBody(_Body):
    kb: str
    active_snapshot: str | None
    last_successful_sync: str | None
    documents_in_error: int
    documents_in_error_by_reason: dict[str, int]
    snapshots_by_status: dict[str, int] | None = Field(description=_KB_WIDE)
    held_builds_by_check: dict[str, int] | None = Field(description=_KB_WIDE)
    deletions_held_by_source: dict[str, int]
    pending_changesets: int
    tombstone_backlog: int
    live_chunks: int
    stale_sources: dict[str, SourceFreshnessBody]


class SnapshotBody(_Body):
    id: str
    kb: str
    version: int
    parent_id: str | None
    status: str
    strategy: str
    point_count: int | None = Field(description=_KB_WIDE)
    embedding_model: str
    upserts: int | None = Field(description=_KB_WIDE)
    deletes: int | None = Field(description=_KB_WIDE)
    created_at: str | None
    activated_at: str | None
    failure_reason: str | None = Field(description="Why its build was held (null when it was not). " + _KB_WIDE)


class SourcesBody(_Body):
    sources: list[SourceFreshnessBody]


class SyncTriggered(_Body):
    ticket: int = Field(description="Follow it with `freshindex syncs show TICKET`.")
    coalesced: bool = Field(description="True when it joined a ticket already queued.")
    paused: bool
    detail: str


class SourceRemoved(_Body):
    source: str
    documents: int
    chunks: int


class RunBody(_Body):
    """One sync run, as ``freshindex runs list`` and ``sources runs`` print it (``SyncRunInfo.as_dict``)."""

    id: int
    source: str
    kb: str
    trigger: str
    status: str
    started_at: str | None
    finished_at: str | None
    running_for_s: float | None = Field(default=None, description="Seconds since it started, while running.")
    docs_listed: int
    docs_planned: int
    docs_done: int | None = Field(default=None, description="Documents with a result, counted while running.")
    changeset_id: int | None = None
    build_status: str | None
    snapshot_id: str | None
    documents: dict[str, int] | None = Field(default=None, description="Documents by outcome, once finished.")
    error: str | None
    build_error: str | None = None
    heartbeat_at: str | None = None
    worker: str | None = None
    held_reason: str | None
    held: dict[str, Any] | None = Field(default=None, description="What the deletion guard held back.")
    lag_s: float | None


class RunsBody(_Body):
    runs: list[RunBody]


# -- webhooks ---------------------------------------------------------------------------------


class WebhookAccepted(_Body):
    ticket: int
    joined: bool = Field(description="True when the event joined a ticket already queued.")


class WebhookIgnored(_Body):
    """A verified event that asks for no sync (a GitHub ping)."""

    ticket: None = None
    detail: str | None


class WebhookRejected(_Body):
    error: str = Field(description="One of the rejection reasons (`bad_signature`, `replayed`, ...).")
    detail: str


__all__ = ["API_KEY", "JWT"]
