"""The first stage of the line that lost a question's answer, read from the registry, the snapshot and the trace.

Given a question, its packet, the query's :class:`~injection.stages.Trace` and the evaluated snapshot,
:func:`diagnose` walks the line in order and stops at the first stage that broke:

``not_synced``
    no document of the knowledge base has the expected key, it was deleted from its source, it was
    skipped, or its last sync failed (the recorded error) and its served chunks lack the passage.
``parse_lost``
    the passage is not in the document's text.  The parsed text is not stored: it is approximated by the
    document's chunks in the snapshot, joined in order with each chunk's overlap with the one before
    removed (a passage split by the chunker's overlap itself reads as a split, not as lost).
``chunk_split``
    it is in that joined text but in no single chunk.
``not_recalled``
    no chunk holding it is among the recall's candidates; a deeper search (dense alone, and the hybrid
    query's lexical side) gives its ranks.
``filtered``
    a rule removed it: ``acl`` or ``tenant`` (inside the engine query, or at the recheck), the recheck's
    ``tombstoned``/``expired``/``orphan``/``acl_version``, the filter's ``low_score``/``stale``.
``refused``
    the refusal stage refused the question (its reason and signals).
``reranked_out``
    recalled, but below the pool's depth or the limit after reranking (its fused and reranked positions).
``grouped``
    folded into another item (a near-copy, a mirror, an older version of the same document).  A chunk
    joined into its selected neighbour is not lost: the diagnosis follows the joined item.
``budget_cut``
    dropped, or cut short, by the token budget.
``wrong_version``
    the expected document was served, but not at the expected commit, or its chunk was superseded.
``ok`` (and for a question that must be refused: ``ok`` when refused, ``not_refused`` when answered).

What it does not do: ask the question (the caller passes the packet and trace) or score it
(:mod:`core.scoring` does); it does not see a parser's output, only the chunks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from freshindex.acl import Principal, query_filter, visible
from freshindex.core.scoring import QuestionScore, holds, key_matches, norm
from freshindex.evaluation.golden import GoldenQuestion
from freshindex.injection.stages import StageTrace, Trace
from freshindex.vectorstore.base import FieldMatch, Filter

__all__ = ["VERDICTS", "Diagnosis", "Snapshot", "diagnose", "join_texts"]

#: Every verdict, in the line's order (``ok`` last); the report counts them in this order.
VERDICTS = ("not_synced", "parse_lost", "chunk_split", "not_recalled", "filtered", "refused", "reranked_out",
            "grouped", "budget_cut", "wrong_version", "not_refused", "ok")

#: How deep the diagnostic search looks for a chunk the recall did not return.
DEEP_SEARCH = 1000
#: At most this many chunks of one document are read from the snapshot.
MAX_DOCUMENT_CHUNKS = 10_000
#: The overlap of two consecutive chunks is looked for within this many characters (normalised).
MAX_OVERLAP = 4000

_FILTER_REASONS = frozenset({"acl", "tenant", "tombstoned", "expired", "orphan", "acl_version", "recheck",
                             "recheck_unavailable", "low_score", "stale", "bad_payload"})


@dataclass
class Diagnosis:
    """The verdict of one question: ``verdict`` (one of :data:`VERDICTS`), the ``stage`` that broke (the line's
    stage name, or ``registry``/``parse``/``chunk`` before the line), and ``detail`` (what it found)."""

    verdict: str
    stage: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """What the diagnosis reads: the registry, the store, the embedder, the evaluated collection and kb.

    ``listing``: source id -> {key: document record} of the kb's sources, read once per evaluation (filled
    on first use when given empty; None: read per question).
    """

    registry: Any
    store: Any
    embedder: Any
    kb: str
    collection: str | None
    snapshot_id: str | None
    listing: dict[str, dict[str, Any]] | None = None


#: The line the code chunker opens a continued part of a long symbol with (``# def send(...) (continued)``):
#: not the document's text, so it is left out when chunks are joined.
_CONTINUED = re.compile(r"\A(?:#|//|--) [^\n]* \(continued\)\n")


def join_texts(texts: Sequence[str]) -> str:
    """Normalised chunk texts joined in order, each one's overlap with the text before it (and the code
    chunker's ``(continued)`` line) removed."""
    out = ""
    for text in texts:
        t = norm(_CONTINUED.sub("", text, count=1))
        out += t[_overlap(out, t):]
    return out


def _overlap(a: str, b: str) -> int:
    """Length of the longest suffix of ``a`` that is a prefix of ``b`` (within :data:`MAX_OVERLAP`)."""
    n = min(len(a), len(b), MAX_OVERLAP)
    if n == 0:
        return 0
    s = b[:n] + "\x00" + a[-n:]
    pi = [0] * len(s)  # the prefix function (Knuth-Morris-Pratt): linear in the overlap window
    for i in range(1, len(s)):
        j = pi[i - 1]
        while j and s[i] != s[j]:
            j = pi[j - 1]
        if s[i] == s[j]:
            j += 1
        pi[i] = j
    return pi[-1]


def _documents(snap: Snapshot, q: GoldenQuestion) -> list[Any]:
    """The registry's documents of the kb that the question expects (any state)."""
    exp = q.expected
    assert exp is not None
    listing = snap.listing if snap.listing is not None else {}
    if not listing:
        listing.update({s.id: snap.registry.documents_for_source(s.id) for s in snap.registry.list_sources(snap.kb)})
    found = []
    for source_id, documents in listing.items():
        if exp.source is not None and source_id != exp.source:
            continue
        for key, doc in documents.items():
            if (exp.document_id is not None and doc.id == exp.document_id) or (
                    exp.key is not None and key_matches(key, exp.key)):
                found.append(doc)
    return found


def _chunks(snap: Snapshot, doc_ids: Sequence[str], vector: list[float]) -> list[dict[str, Any]]:
    """The payloads of the documents' points in the evaluated snapshot, in document then chunk order."""
    if snap.collection is None or not doc_ids:
        return []
    flt = Filter(must=(FieldMatch("document_id", tuple(doc_ids)),))
    hits = snap.store.search(snap.collection, vector, limit=MAX_DOCUMENT_CHUNKS, flt=flt, exact=True)
    payloads = {h.id: dict(h.payload, chunk_id=h.id) for h in hits}
    ordinals = {r.id: (r.document_id, r.ordinal) for r in snap.registry.chunk_rows(list(payloads))}
    return sorted(payloads.values(), key=lambda p: ordinals.get(p["chunk_id"], (p.get("document_id", ""), 1 << 30)))


def _registry_verdict(docs: Sequence[Any]) -> Diagnosis | None:
    """``not_synced`` when no expected document is in the registry, or none is active (else None)."""
    if not docs:
        return Diagnosis("not_synced", "registry", {"why": "no such document in the knowledge base"})
    if any(d.state == "active" for d in docs):
        return None
    doc = docs[0]
    if doc.state == "deleted":
        why = "deleted from its source"
    elif doc.state == "skipped":
        why = f"skipped: {doc.error_reason}"
    else:
        why = "its last sync failed"
    return Diagnosis("not_synced", "registry", {"why": why, "key": doc.key, "state": doc.state,
                                                "error_reason": doc.error_reason, "error_detail": doc.error_detail})


def _text_verdict(q: GoldenQuestion, docs: Sequence[Any], chunks: Sequence[Mapping[str, Any]]
                  ) -> tuple[Diagnosis | None, list[Mapping[str, Any]]]:
    """(``not_synced``/``parse_lost``/``chunk_split`` or None, the chunks holding the passage)."""
    exp = q.expected
    assert exp is not None
    on_page = [c for c in chunks if exp.page is None or (
        c.get("page") is not None and c["page"] <= exp.page <= (c.get("page_end") or c["page"]))]
    if not q.required_passage:
        holding = on_page
    else:
        holding = [c for c in on_page if holds(q.required_passage, c)]
    if holding:
        return None, holding
    failed = next((d for d in docs if d.state == "error"), None)
    if failed is not None:
        return Diagnosis("not_synced", "registry", {"why": "its last sync failed", "key": failed.key,
                                                    "error_reason": failed.error_reason,
                                                    "error_detail": failed.error_detail}), []
    if not chunks:
        return Diagnosis("not_synced", "snapshot", {"why": "the document has no chunk in the evaluated snapshot",
                                                    "key": docs[0].key}), []
    if not q.required_passage:
        return Diagnosis("parse_lost", "parse", {"why": f"no chunk on page {exp.page}"}), []
    joined = join_texts([str(c.get("text") or "") for c in on_page])
    approx = (f"the parsed text is approximated by the {len(on_page)} chunks of the document joined "
              "in order, their overlaps removed")
    if norm(q.required_passage) in joined:
        return Diagnosis("chunk_split", "chunk", {"chunks": len(on_page), "note": approx}), []
    return Diagnosis("parse_lost", "parse", {"chunks": len(on_page), "note": approx}), []


def _deep_ranks(snap: Snapshot, question: str, vector: list[float], principal: Principal,
                ids: set[str]) -> dict[str, Any]:
    """Best dense rank (exact search) and best lexical rank (the hybrid query's lexical side) of ``ids``."""
    flt = query_filter(principal)
    dense = snap.store.search(snap.collection, vector, limit=DEEP_SEARCH, flt=flt, exact=True)
    hybrid = snap.store.search(snap.collection, vector, limit=DEEP_SEARCH, flt=flt, text=question)
    dense_rank = next((i for i, h in enumerate(dense, 1) if h.id in ids), None)
    lexical = [h.lexical_rank for h in hybrid if h.id in ids and h.lexical_rank is not None]
    return {"dense_rank": dense_rank, "lexical_rank": min(lexical) if lexical else None, "depth": DEEP_SEARCH}


def _access(principal: Principal, holding: Sequence[Mapping[str, Any]]) -> Diagnosis | None:
    """``filtered`` (acl or tenant, inside the engine query) when the principal may read no holding chunk."""
    if any(visible(principal, c) for c in holding):
        return None
    rule = "tenant" if all(c.get("tenant") != principal.tenant for c in holding) else "acl"
    first = holding[0]
    return Diagnosis("filtered", "recall", {"rule": rule, "where": "the engine query's ACL and tenant filter",
                                            "key": first.get("key"), "acl": list(first.get("acl") or ()),
                                            "tenant": first.get("tenant")})


_ORDER = {"recall": 0, "recheck": 1, "filter": 2, "refuse": 3, "pool": 4, "rerank": 5, "group": 6, "select": 7,
          "fit": 8, "render": 9, "conflicts": 10}


def _furthest(trace: Trace, ids: Sequence[str]) -> tuple[str, tuple[str, str] | None]:
    """The holding chunk that went furthest down the line, and where it was lost (None: never)."""
    def reach(cid: str) -> int:
        lost = trace.lost(cid)
        return 99 if lost is None else _ORDER.get(lost[0], 50)
    best = max(ids, key=reach)
    return best, trace.lost(best)


def _line_verdict(trace: Trace, cid: str, lost: tuple[str, str], key_of: Callable[[str], str | None]
                  ) -> Diagnosis:
    """The verdict of a holding chunk the line dropped at ``lost`` (stage, reason)."""
    stage, why = lost
    if why == "superseded":
        return Diagnosis("wrong_version", stage, {"why": "the chunk's version was superseded", "chunk_id": cid})
    if why in ("refused",) or (stage == "refuse"):
        notes = (trace.stage("refuse") or _NO_NOTES).notes
        return Diagnosis("refused", "refuse", {"reason": notes.get("reason"), "why": notes.get("why"),
                                               "signals": notes.get("signals") or {}})
    if why in _FILTER_REASONS:
        return Diagnosis("filtered", stage, {"rule": why, "chunk_id": cid})
    if why == "pool":
        recall = trace.stage("recall")
        fused = recall.after.index(cid) + 1 if recall is not None and cid in recall.after else None
        return Diagnosis("reranked_out", stage, {"why": "past the candidate pool", "fused_rank": fused,
                                                 "chunk_id": cid})
    if why in ("grouped", "duplicate"):
        group = trace.stage("group")
        into = group.grouped_into.get(cid) if group is not None else None
        return Diagnosis("grouped", stage, {"chunk_id": cid, "into": into, "into_key": key_of(into) if into else None,
                                            "how": why})
    if why in ("per_document", "max_chunks"):
        rerank = trace.stage("rerank")
        before, after = rerank.ranks.get(cid, (None, None)) if rerank is not None else (None, None)
        return Diagnosis("reranked_out", stage, {
            "rule": why, "chunk_id": cid, "rank_before_rerank": before + 1 if before is not None else None,
            "rank_after_rerank": after + 1 if after is not None else None,
            "reranked": bool(rerank is not None and rerank.ran)})
    if why == "budget":
        return Diagnosis("budget_cut", stage, {"chunk_id": cid, **(trace.stage("fit") or _NO_NOTES).notes})
    return Diagnosis("filtered", stage, {"rule": why, "chunk_id": cid})


_NO_NOTES = StageTrace("none")


def _answered(q: GoldenQuestion, packet: Any, trace: Trace, score: QuestionScore | None) -> Diagnosis | None:
    """``ok`` or ``wrong_version`` when the packet already answers; ``refused``/``not_refused`` by the policy."""
    if q.answer == "must_refuse":
        if packet.insufficient:
            return Diagnosis("ok", None, {"reason": packet.reason})
        return Diagnosis("not_refused", "refuse", {"served": [e.key for e in packet.evidence][:5],
                                                   "signals": (trace.stage("refuse") or _NO_NOTES).notes.get(
                                                       "signals") or {}})
    if score is None:
        return None
    good = score.passage if q.required_passage else score.hit
    if not good:
        return None
    exp = q.expected
    if exp is not None and exp.commit:
        served = [e.commit for e in packet.evidence if key_matches(e.key, exp.key or "")]
        if served and not any(c and (c.startswith(exp.commit) or exp.commit.startswith(c)) for c in served):
            return Diagnosis("wrong_version", "snapshot", {"expected_commit": exp.commit, "served": served[0]})
    return Diagnosis("ok")


def diagnose(snap: Snapshot, q: GoldenQuestion, principal: Principal, packet: Any, trace: Trace,
             score: QuestionScore | None) -> Diagnosis:
    """The first stage that broke for ``q`` (see the module docstring), from its ``packet`` and ``trace``."""
    done = _answered(q, packet, trace, score)
    if done is not None:
        return done
    if q.expected is None:  # may_refuse with nothing expected: any packet will do
        return Diagnosis("refused" if packet.insufficient else "ok", "refuse" if packet.insufficient else None,
                         {"reason": packet.reason})
    if snap.collection is None:
        return Diagnosis("not_synced", "snapshot", {"why": "the knowledge base serves no snapshot"})
    docs = _documents(snap, q)
    early = _registry_verdict(docs)
    if early is not None:
        return early
    vector = snap.embedder.embed([q.question])[0].tolist()
    chunks = _chunks(snap, [d.id for d in docs], vector)
    early, holding = _text_verdict(q, docs, chunks)
    if early is not None:
        return early
    keys: dict[str, str | None] = {str(c["chunk_id"]): str(c.get("key")) for c in chunks}
    keys.update({e.chunk_id: e.key for e in packet.evidence})

    def key_of(cid: str) -> str | None:
        if cid not in keys:
            points = snap.store.retrieve(snap.collection, [cid])
            keys[cid] = str(points[0].payload.get("key")) if points else None
        return keys[cid]

    ids = [str(c["chunk_id"]) for c in holding]
    recall = trace.stage("recall")
    recalled = [cid for cid in ids if recall is not None and cid in recall.after]
    if not recalled:
        denied = _access(principal, holding)
        if denied is not None:
            return denied
        ranks = _deep_ranks(snap, q.question, vector, principal, set(ids))
        return Diagnosis("not_recalled", "recall", {**ranks, "candidates": len(recall.after) if recall else 0,
                                                    "holding_chunks": len(ids)})
    cid, lost = _furthest(trace, recalled)
    for _hop in range(8):  # a chunk joined into its neighbour lives on in the joined item: follow that one
        if lost is None or not lost[1].startswith("joined:"):
            break
        cid = lost[1].split(":", 1)[1]
        lost = trace.lost(cid)
    if lost is not None:
        return _line_verdict(trace, cid, lost, key_of)
    if packet.insufficient:  # the line stopped without dropping it: the refusal, or nothing selected
        return _line_verdict(trace, cid, ("refuse", "refused"), key_of)
    served = {e.chunk_id for e in packet.evidence}
    if cid in served:  # served, yet the passage is not in its text: the budget trimmed it
        return Diagnosis("budget_cut", "fit", {"chunk_id": cid, "why": "served, its text cut short"})
    return Diagnosis("reranked_out", "select", {"chunk_id": cid, "why": "recalled, not among the evidence"})
