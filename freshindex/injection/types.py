"""The evidence types an application receives: :class:`Evidence` and :class:`ContextPacket`.

Both clients return these: the in-process :class:`injection.client.InjectionClient`
builds them from vector hits, the HTTP :class:`injection.http.FreshIndexClient`
rebuilds them from the JSON that ``POST /v1/query`` sends
(:meth:`ContextPacket.from_dict` reads what :meth:`ContextPacket.as_dict`
writes).  This module imports only the standard library, so the thin client
install (no PyMuPDF, SQLAlchemy, vector store or numpy) can use it.

What it does not guarantee: that a packet rebuilt from JSON equals the
server's object bit for bit: scores travel rounded to 4 decimals, and fields
a newer server adds are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from freshindex.injection.render import insufficient_block, render_block


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else TypeError (so a wrong shape never surfaces as AttributeError)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} is a JSON object, not {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> Sequence[Any]:
    """``value`` (None: empty) if it is a JSON array, else TypeError."""
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise TypeError(f"{what} is a JSON array, not {type(value).__name__}")
    return value


@dataclass(frozen=True)
class Mirror:
    """Another document holding (nearly) the same passage as an evidence item, cited with it, never as an answer."""

    key: str
    doc_version: int
    anchor: str = ""
    page: int | None = None

    @property
    def citation(self) -> str:
        where = f"{self.key}#{self.anchor}" if self.anchor else self.key
        return f"{where} (v{self.doc_version}{f', page {self.page}' if self.page else ''})"

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "doc_version": self.doc_version, "anchor": self.anchor, "page": self.page}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Mirror:
        d = _obj(d, "a mirror")
        page = d.get("page")
        return cls(key=str(d["key"]), doc_version=int(d.get("doc_version") or 0), anchor=str(d.get("anchor") or ""),
                   page=int(page) if page is not None else None)


@dataclass(frozen=True)
class Evidence:
    """One numbered source of a context packet, with where it came from.

    ``score`` (the API's ``score``, same bytes): the relevance the packet's order was decided on when the
    line's rerank stage ran a reranker (the last reranker's score in the chain; with the default
    ``context.lexical_rerank``, the coverage reranker's: the IDF-weighted share of the question's terms the
    chunk holds plus a small rank prior); when no reranker ran (none configured, ``rerank`` switched off,
    or a question with no weighted terms), the hit's dense cosine similarity to the question, and the order
    is then the engine's fused rank, which this score does not show.  A joined or grouped item carries the
    best score of its parts.  Comparable within one packet only, never across packets or knowledge bases.
    The fusion score that admitted the hit to the pool is ``assemble.Candidate.score`` (never shown).
    """

    n: int
    chunk_id: str
    score: float
    text: str
    title: str
    key: str
    source_id: str
    heading_path: tuple[str, ...]
    anchor: str
    page: int | None
    doc_version: int
    snapshot_id: str
    written_in: str
    ocr: bool = False
    #: A git source's commit the serving snapshot was built from, shortened (cited as ``commit 1a2b3c4d5e``):
    #: one commit per repository in a packet.  None for other kinds.
    commit: str | None = None
    #: The commit this chunk's text was read at (shortened): where it last changed as far as the index knows.
    changed_in: str | None = None
    #: Header extras (render.py): the document's date, a stale label with the last verified time, and
    #: the column names of a table chunk (rendered as a Markdown table under its header).
    date: str | None = None
    stale: bool = False
    verified_at: str | None = None
    table_columns: tuple[str, ...] = ()
    #: The last page when the text runs over several (cited "pages 17-18"); the OCR confidence (0-1).
    page_end: int | None = None
    ocr_confidence: float | None = None
    #: Other documents with a near-copy of this passage (:mod:`injection.duplicates`), best ranked first.
    also_in: tuple[Mirror, ...] = ()
    #: Its document vanished from the source but the deletion guard holds the deletion for a person:
    #: still served, labelled ``PENDING_DELETION`` in its header (render.py).
    pending_deletion: bool = False
    #: Where the part that ranked this item starts in ``text``: 0, or in a joined item (a chunk with the
    #: consecutive ones riding with it) the strongest part's offset.  Cutting to fit a budget keeps from here,
    #: so the chunk that matched is not cut away for the context before it.  Not served (the text is).
    focus: int = 0

    @property
    def citation(self) -> str:
        where = f"{self.key}#{self.anchor}" if self.anchor else self.key
        extra = f", page {self.page}" if self.page else ""
        if self.page and self.page_end and self.page_end > self.page:
            extra = f", pages {self.page}-{self.page_end}"
        if self.commit:
            extra += f", commit {self.commit}"
        return f"[{self.n}] {where} (v{self.doc_version}{extra}, snapshot {self.snapshot_id})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n, "chunk_id": self.chunk_id, "score": round(self.score, 4), "title": self.title,
            "key": self.key, "source_id": self.source_id, "heading_path": list(self.heading_path),
            "anchor": self.anchor, "page": self.page, "doc_version": self.doc_version,
            "snapshot_id": self.snapshot_id, "written_in": self.written_in, "ocr": self.ocr,
            "citation": self.citation, "text": self.text, "commit": self.commit, "changed_in": self.changed_in,
            "date": self.date, "stale": self.stale, "verified_at": self.verified_at,
            "table_columns": list(self.table_columns),
            "page_end": self.page_end, "ocr_confidence": self.ocr_confidence,
            "also_in": [m.as_dict() for m in self.also_in],
            "pending_deletion": self.pending_deletion,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Evidence:
        """Rebuild from :meth:`as_dict` output; ``citation`` is derived, so it is not read.

        Raises ``KeyError``/``TypeError``/``ValueError`` when a required
        field is missing or has the wrong type.
        """
        d = _obj(d, "evidence")
        page = d.get("page")
        return cls(
            n=int(d["n"]), chunk_id=str(d["chunk_id"]), score=float(d["score"]), text=str(d["text"]),
            title=str(d.get("title") or ""), key=str(d["key"]), source_id=str(d.get("source_id") or ""),
            heading_path=tuple(str(h) for h in _list(d.get("heading_path"), "heading_path")), anchor=str(d.get("anchor") or ""),
            page=int(page) if page is not None else None, doc_version=int(d.get("doc_version") or 0),
            snapshot_id=str(d["snapshot_id"]), written_in=str(d.get("written_in") or ""), ocr=bool(d.get("ocr")),
            commit=str(d["commit"]) if d.get("commit") else None,
            changed_in=str(d["changed_in"]) if d.get("changed_in") else None,
            date=str(d["date"]) if d.get("date") is not None else None, stale=bool(d.get("stale")),
            verified_at=str(d["verified_at"]) if d.get("verified_at") is not None else None,
            table_columns=tuple(str(c) for c in _list(d.get("table_columns"), "table_columns")),
            page_end=int(d["page_end"]) if d.get("page_end") is not None else None,
            ocr_confidence=float(d["ocr_confidence"]) if d.get("ocr_confidence") is not None else None,
            also_in=tuple(Mirror.from_dict(m) for m in _list(d.get("also_in"), "also_in")),
            pending_deletion=bool(d.get("pending_deletion")),
        )


#: The next actions an insufficient-evidence packet may propose (a fixed set).
NEXT_ACTIONS = ("refresh_source", "ask_owner")

#: Why a next action is proposed (a fixed set): a source's evidence was past its validity (``expired``) or
#: its source unverified beyond the staleness policy (``stale``); the knowledge base has nothing served
#: yet (``no_snapshot``); nothing the caller may read answered (``not_found``).
ACTION_REASONS = ("expired", "stale", "no_snapshot", "not_found")


@dataclass(frozen=True)
class NextAction:
    """What to do about an unanswered question: refresh a named source, or ask its owner.

    ``source_id`` and ``owner`` are None when nothing the caller may read
    came back (ask the knowledge base's operators).  Only sources the caller
    may see are ever named (:class:`injection.client.InjectionClient`).
    """

    action: str  # one of NEXT_ACTIONS
    reason: str  # one of ACTION_REASONS
    source_id: str | None = None
    owner: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "reason": self.reason, "source_id": self.source_id, "owner": self.owner}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NextAction:
        d = _obj(d, "a next action")
        source, owner = d.get("source_id"), d.get("owner")
        return cls(action=str(d["action"]), reason=str(d["reason"]),
                   source_id=str(source) if source is not None else None,
                   owner=str(owner) if owner is not None else None)


@dataclass(frozen=True)
class SubQueryReport:
    """One sub-query a question was searched with (:mod:`injection.planning`): its text, mode and hit count.

    ``mode`` is ``hybrid`` (the question as asked) or ``lexical`` (its exact
    identifiers alone); ``hits`` counts what the engine returned under the
    caller's filter, before the registry recheck.
    """

    text: str
    mode: str
    hits: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "mode": self.mode, "hits": self.hits}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SubQueryReport:
        d = _obj(d, "a sub-query")
        return cls(text=str(d["text"]), mode=str(d["mode"]), hits=int(d.get("hits") or 0))


@dataclass(frozen=True)
class ConflictValue:
    """One value a source states for a conflict's subject: the value, its evidence number and document key."""

    value: str
    n: int
    key: str

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "n": self.n, "key": self.key}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConflictValue:
        d = _obj(d, "a conflict value")
        return cls(value=str(d["value"]), n=int(d["n"]), key=str(d.get("key") or ""))


@dataclass(frozen=True)
class Conflict:
    """Admitted evidence from different documents stating different values for one subject
    (:mod:`injection.conflicts`): every value with the number of the evidence that states it."""

    subject: str
    values: tuple[ConflictValue, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "values": [v.as_dict() for v in self.values]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Conflict:
        d = _obj(d, "a conflict")
        return cls(subject=str(d["subject"]),
                   values=tuple(ConflictValue.from_dict(v) for v in _list(d.get("values"), "values")))


@dataclass(frozen=True)
class SearchReport:
    """What a query searched and what became of the candidates it found, in terms a caller may see.

    ``sources`` are the sources of candidates the caller may read (never
    one it may not, nor one whose default ACL admits it but whose documents
    all deny it).  ``candidates`` counts the hits the caller may read
    (after the ACL filter and the registry recheck); ``accepted`` those
    admitted as evidence; ``rejected`` the others by reason (``expired``,
    ``stale`` beyond the staleness policy, ``low_score``).  A hit the caller
    may not read, or one the registry has retired or does not know, is in
    no count at all: denied and absent look the same ("not found").

    What it does not guarantee: that the counts are independent of access
    when the candidate pool is full (a hit denied at the recheck, before the
    next build re-tags it, takes a place in the pool as an absent one would not).
    """

    kb: str
    snapshot_id: str | None
    sources: tuple[str, ...] = ()
    candidates: int = 0
    accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    next_actions: tuple[NextAction, ...] = ()
    #: The sub-queries searched, the question as asked first (empty when nothing was searched).
    subqueries: tuple[SubQueryReport, ...] = ()
    #: Whether admitted sources disagree (``ContextPacket.conflicts``): no single value is the answer.
    conflicting: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"kb": self.kb, "snapshot_id": self.snapshot_id, "sources": list(self.sources),
                "candidates": self.candidates, "accepted": self.accepted,
                "rejected": {k: self.rejected[k] for k in sorted(self.rejected)},
                "next_actions": [a.as_dict() for a in self.next_actions],
                "subqueries": [q.as_dict() for q in self.subqueries], "conflicting": self.conflicting}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SearchReport:
        d = _obj(d, "a search report")
        snapshot = d.get("snapshot_id")
        return cls(kb=str(d["kb"]), snapshot_id=str(snapshot) if snapshot is not None else None,
                   sources=tuple(str(s) for s in _list(d.get("sources"), "sources")),
                   candidates=int(d.get("candidates") or 0), accepted=int(d.get("accepted") or 0),
                   rejected={str(k): int(v) for k, v in _obj(d.get("rejected") or {}, "rejected").items()},
                   next_actions=tuple(NextAction.from_dict(a) for a in _list(d.get("next_actions"), "next_actions")),
                   subqueries=tuple(SubQueryReport.from_dict(q) for q in _list(d.get("subqueries"), "subqueries")),
                   conflicting=bool(d.get("conflicting")))


@dataclass(frozen=True)
class ContextPacket:
    """What a question gets: numbered evidence and the rendered block, or *insufficient evidence*.

    ``rendered`` (``render()``, JSON ``context``) is the text to put in a
    prompt.  ``insufficient`` is true when nothing above the relevance
    threshold was found (or the knowledge base has no snapshot yet); the
    rendered block then tells the model to say so.  ``dropped`` counts hits
    removed after the query by the reasons a caller may see (low_score,
    per_document, budget, duplicate); ``withheld`` (server side only, not
    in :meth:`as_dict`) counts every reason, access and existence included.
    """

    question: str
    kb: str
    snapshot_id: str | None
    evidence: tuple[Evidence, ...]
    insufficient: bool
    reason: str | None
    rendered: str
    dropped: dict[str, int] = field(default_factory=dict)
    #: Every drop by reason, access and existence included: for metrics and audit, never sent to the caller.
    withheld: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    #: What was searched, accepted and rejected, and (when insufficient) what to do next; None from an
    #: older server or a packet built without a client.
    search: SearchReport | None = None
    #: Subjects on which admitted evidence from different documents states different values; the rendered
    #: block says so inside its fence, and ``reason`` starts with ``conflicting``.
    conflicts: tuple[Conflict, ...] = ()

    def render(self) -> str:
        """The context block for the prompt (the same text as ``rendered``)."""
        return self.rendered

    @property
    def citations(self) -> list[str]:
        """``[n] key#anchor (vN, snapshot S)`` for each piece of evidence, in order."""
        return [e.citation for e in self.evidence]

    def as_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "kb": self.kb,
            "snapshot_id": self.snapshot_id,
            "insufficient_evidence": self.insufficient,
            "reason": self.reason,
            "evidence": [e.as_dict() for e in self.evidence],
            "dropped": self.dropped,
            "search": self.search.as_dict() if self.search is not None else None,
            "conflicts": [c.as_dict() for c in self.conflicts],
            "context": self.rendered,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ContextPacket:
        """Rebuild from :meth:`as_dict` output (the body of ``POST /v1/query``).

        Unknown keys are ignored, so an older client reads a newer server's
        packets. Raises ``KeyError``/``TypeError``/``ValueError`` on a body
        that is not a packet.
        """
        d = _obj(d, "a context packet")
        evidence = _list(d.get("evidence"), "evidence")
        snapshot = d.get("snapshot_id")
        return cls(
            question=str(d["question"]), kb=str(d["kb"]), snapshot_id=str(snapshot) if snapshot is not None else None,
            evidence=tuple(Evidence.from_dict(e) for e in evidence),
            insufficient=bool(d["insufficient_evidence"]), reason=d.get("reason"), rendered=str(d["context"]),
            dropped={str(k): int(v) for k, v in _obj(d.get("dropped") or {}, "dropped").items()},
            search=SearchReport.from_dict(d["search"]) if d.get("search") is not None else None,
            conflicts=tuple(Conflict.from_dict(c) for c in _list(d.get("conflicts"), "conflicts")),
        )


def render_context(question: str, kb: str, snapshot_id: str, evidence: Sequence[Evidence], *,
                   deterministic: bool = False, kb_version: str | None = None) -> str:
    """Numbered, sourced, fenced evidence for a prompt, in the order given.

    Every field a document controls (text, title, heading path, key) sits
    inside one fence whose token is random per call and absent from the
    content; fence-like text, tags and role markers are neutralised
    (:mod:`injection.render`).  ``deterministic`` renders byte-stable output
    for a static prefix tagged with ``kb_version``.  ``question`` is not
    rendered (the caller places it).
    """
    return render_block(kb, snapshot_id, evidence, deterministic=deterministic, kb_version=kb_version)


def insufficient_context(kb: str, snapshot_id: str | None, *, reason: str | None = None,
                         search: SearchReport | None = None, deterministic: bool = False) -> str:
    """The block an *insufficient evidence* packet renders: tells the model not to guess.

    With ``search`` it also says what was searched, what was rejected and
    why, and the next action, inside a nonce fence (:func:`injection.render.insufficient_block`).
    """
    return insufficient_block(kb, snapshot_id, reason=reason, search=search, deterministic=deterministic)
