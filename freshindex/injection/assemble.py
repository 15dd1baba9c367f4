"""Candidates to selected evidence: dedup, near-duplicates, quota, MMR, joins, placement.

:func:`assemble` takes the hits left after the ACL and registry rechecks, as
:class:`Candidate` objects, and returns the ones to show, strongest first:

1. duplicates by chunk id go (the best-scored copy stays);
2. the fusion score (RRF or the dense score) *admits*: the best
   ``candidate_pool`` enter the pool, the rest go; it orders nothing after that
   when a reranker is given;
3. near-duplicates within one document go: the same normalised text (NFKC,
   case, spaces, punctuation), or word-shingle Jaccard at least ``near_duplicate``;
4. the pool is *ordered* by the reranker when there is one, else by the
   fusion score (never by a mix of the two); near-copies from different
   documents then become one item, the canonical copy at the group's best
   place citing the others in ``Evidence.also_in`` (:mod:`injection.duplicates`);
5. selection walks that order under the per-document quota and the type's
   ``max_chunks`` (a split part next to a picked one, and a chunk consecutive to
   one that took a slot, ride with it; a document
   opening the order with more chunks than the quota may take one more); for
   ``diverse`` questions only, MMR picks instead (``mmr_lambda`` weighs
   relevance against similarity to what is picked);
6. chunks of one section that are neighbours (``meta`` prev/next, or
   consecutive ordinals) and both selected are joined back into one.

:func:`place` then orders for the prompt: strongest first, second strongest
last, the rest between.  :class:`SessionNumbers` keeps a chunk's ``[n]``
the same for a whole conversation.

What it does not guarantee: near-duplicate detection is lexical (a
paraphrase survives), and joins need the chunker's prev/next links or
ordinals: a point does not carry its ordinal, the query line's recheck reads
it from the registry (``ChunkStatus.ordinal``), so without a registry only
the parts of one split unit are joined.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from freshindex.core.payload import PointPayload
from freshindex.injection.budget import ContextPolicy, QueryType
from freshindex.injection.duplicates import (
    Member,
    asks_about_changes,
    canonical_groups,
    is_changelog,
    is_test_file,
    jaccard,
    normalised,
    passed_over,
    shingles,
)
from freshindex.injection.types import Evidence, Mirror

__all__ = ["Assembly", "Candidate", "Reranker", "SessionNumbers", "admit_pool", "assemble",
           "group", "normalised", "place", "rerank", "rerankers_of", "select"]


@dataclass(frozen=True)
class Candidate:
    """One hit that survived the rechecks, with what assembly needs beyond its evidence.

    ``score`` is the fusion score (the engine's RRF score of the hit, or its dense cosine when the query
    was dense only): it admits to the pool and orders it when no reranker runs; it is never shown.
    ``evidence.score`` is what the packet shows (:class:`~injection.types.Evidence`).  ``evidence.n`` is
    assigned later, by :class:`SessionNumbers`.
    """

    evidence: Evidence
    document_id: str
    score: float
    prev_id: str | None = None
    next_id: str | None = None
    ordinal: int | None = None
    vector: tuple[float, ...] | None = None

    @property
    def chunk_id(self) -> str:
        return self.evidence.chunk_id

    @property
    def text(self) -> str:
        return self.evidence.text

    @classmethod
    def from_point(cls, chunk_id: str, score: float, payload: PointPayload, snapshot_id: str, *,
                   vector: Sequence[float] | None = None, stale: bool = False,
                   verified_at: str | None = None, revision: str | None = None) -> Candidate:
        """From a vector hit's payload; ``snapshot_id`` is the snapshot that served it (the alias target),
        ``revision`` the commit that snapshot was built from for the hit's source (cited over the chunk's own).
        No ordinal: a point does not carry it (the recheck sets the registry's, ``stages.filter``)."""
        meta: dict[str, Any] = payload.meta
        read_at = str(meta["commit"])[:10] if meta.get("commit") else None
        columns = meta.get("columns") if payload.kind == "table" else None
        evidence = Evidence(
            n=0, chunk_id=chunk_id, score=score, text=payload.text, title=payload.title or "", key=payload.key,
            source_id=payload.source_id, heading_path=payload.heading_path, anchor=payload.anchor,
            page=payload.page, doc_version=payload.doc_version, snapshot_id=snapshot_id,
            written_in=payload.snapshot_id, ocr=payload.ocr, page_end=payload.page_end,
            ocr_confidence=payload.ocr_confidence, commit=revision[:10] if revision and read_at else read_at,
            changed_in=read_at,
            date=str(meta["modified"]) if meta.get("modified") else None, stale=stale, verified_at=verified_at,
            table_columns=tuple(str(c) for c in columns) if isinstance(columns, list) else (),
        )
        return cls(evidence, payload.document_id, score,
                   prev_id=meta.get("prev") if isinstance(meta.get("prev"), str) else None,
                   next_id=meta.get("next") if isinstance(meta.get("next"), str) else None,
                   vector=tuple(float(x) for x in vector) if vector is not None else None)


#: (question, pool in fusion order) -> one relevance score per candidate, higher is better.
Reranker = Callable[[str, Sequence[Candidate]], Sequence[float]]


@dataclass(frozen=True)
class Assembly:
    """The selected candidates, strongest first, and why the others went (reason -> count)."""

    ranked: tuple[Candidate, ...]
    dropped: dict[str, int] = field(default_factory=dict)
    joined: int = 0  # selected chunks folded into a neighbour
    mmr: bool = False


#: Shared with :mod:`injection.duplicates`, where they live (one direction of import: assemble -> duplicates).
_shingles = shingles
_jaccard = jaccard


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def _count(dropped: dict[str, int], why: str, n: int = 1) -> None:
    if n:
        dropped[why] = dropped.get(why, 0) + n


def assemble(question: str, candidates: Iterable[Candidate], *, policy: ContextPolicy = ContextPolicy(),
             query_type: QueryType | str = QueryType.FACT,
             reranker: Reranker | Sequence[Reranker] | None = None) -> Assembly:
    """The candidates to show for ``question``, strongest first (see the module docstring for the steps).

    The same steps the query line runs as its stages (:mod:`injection.stages`: pool, rerank, group,
    select), in one call.  ``reranker`` is one reranker or a chain (each orders what the one before it
    ordered).
    """
    qtype = QueryType(query_type)
    dropped: dict[str, int] = {}
    distinct = admit_pool(question, candidates, policy, dropped)
    distinct, relevance = rerank(question, distinct, rerankers_of(reranker))
    distinct, relevance = group(question, distinct, relevance, policy, dropped)
    picked, joined, use_mmr = select(distinct, relevance, policy, qtype, dropped)
    return Assembly(tuple(picked), dropped, joined, use_mmr)


def rerankers_of(reranker: Reranker | Sequence[Reranker] | None) -> tuple[Reranker, ...]:
    """``reranker`` as a chain: None is none, one is a chain of one."""
    if reranker is None:
        return ()
    if callable(reranker):
        return (reranker,)
    return tuple(reranker)


def _weighed(c: Candidate, weight: float, changelog: float = 1.0) -> Candidate:
    """``c`` with its fusion score times ``weight`` when it is a test file's chunk, times ``changelog`` when it is a
    changelog's (and the score positive)."""
    if c.score <= 0:
        return c
    if weight != 1.0 and is_test_file(c.evidence.key):
        return replace(c, score=c.score * weight)
    if changelog != 1.0 and is_changelog(c.evidence.key):
        return replace(c, score=c.score * changelog)
    return c


def admit_pool(question: str, candidates: Iterable[Candidate], policy: ContextPolicy, dropped: dict[str, int],
               lost: dict[str, str] | None = None) -> list[Candidate]:
    """Steps 1-3 and the first version ordering: one copy per chunk id, the best ``candidate_pool`` by fusion
    score (a test file's at ``policy.test_file_weight`` of it: it restates the code and docs it exercises, so at
    equal match they come first; a changelog's at ``policy.changelog_weight`` unless the question asks what
    changed; after the refusal, whose evidence is the fused order), near-copies within one document gone,
    superseded versions after the rest (``lost``: chunk id -> why it went, for a trace)."""
    best: dict[str, Candidate] = {}
    changelog = 1.0 if asks_about_changes(question) else policy.changelog_weight
    for c in (_weighed(c, policy.test_file_weight, changelog) for c in candidates):
        seen = best.get(c.chunk_id)
        if seen is None or c.score > seen.score:
            best[c.chunk_id] = c
        _count(dropped, "duplicate", int(seen is not None))
    # Fusion admits: a deep enough pool before any quota, ties broken by id so the order is reproducible.
    by_fusion = sorted(best.values(), key=lambda c: (-c.score, c.chunk_id))
    pool, rest = by_fusion[: policy.candidate_pool], by_fusion[policy.candidate_pool :]
    _count(dropped, "pool", len(rest))
    _lose(lost, rest, "pool")
    distinct: list[Candidate] = []
    keys: set[tuple[str, str]] = set()
    seen_shingles: dict[str, list[frozenset[str]]] = {}
    for c in pool:
        # Within one document a near-copy goes; across documents it becomes a mirror (_canonical, below).
        norm = normalised(c.text)
        sh = _shingles(norm)
        own = seen_shingles.setdefault(c.document_id, [])
        if (c.document_id, norm) in keys or any(_jaccard(sh, other) >= policy.near_duplicate for other in own):
            _count(dropped, "duplicate")
            _lose(lost, [c], "duplicate")
            continue
        keys.add((c.document_id, norm))
        own.append(sh)
        distinct.append(c)
    # Superseded versions of a document after the rest before any reranking, so that the positions a reranker
    # reads (the coverage reranker's prior) are those the current versions would have without them.
    return _newest_first(question, distinct, [c.score for c in distinct])[0]


def rerank(question: str, pool: list[Candidate],
           rerankers: Sequence[Reranker]) -> tuple[list[Candidate], list[float]]:
    """The pool ordered by the chain of rerankers (each reorders the previous one's order; ties keep it), with
    the last one's scores as relevance (and as ``evidence.score``); no reranker: the fusion order and score."""
    relevance = [c.score for c in pool]
    for reranker in rerankers:
        if not pool:
            break
        scores = [float(s) for s in reranker(question, pool)]
        if len(scores) != len(pool):
            raise ValueError(f"the reranker returned {len(scores)} scores for {len(pool)} candidates")
        order = sorted(range(len(pool)), key=lambda i: -scores[i])
        pool = [replace(pool[i], evidence=replace(pool[i].evidence, score=scores[i])) for i in order]
        relevance = [scores[i] for i in order]
    return pool, relevance


def group(question: str, order: list[Candidate], relevance: list[float], policy: ContextPolicy,
          dropped: dict[str, int], into: dict[str, str] | None = None) -> tuple[list[Candidate], list[float]]:
    """Near-copies across documents become one item (``into``: member chunk id -> the item's chunk id), then
    superseded versions go after every other item."""
    order, relevance = _canonical(question, order, relevance, policy, dropped, into)
    return _newest_first(question, order, relevance)


def select(order: list[Candidate], relevance: list[float], policy: ContextPolicy, qtype: QueryType,
           dropped: dict[str, int], lost: dict[str, str] | None = None) -> tuple[list[Candidate], int, bool]:
    """Steps 5-6: the walk (or MMR for diverse questions) under the quota and ``max_chunks``, then joins;
    (picked, how many were joined into a neighbour, whether MMR picked)."""
    row = policy.row(qtype)
    use_mmr = qtype is QueryType.DIVERSE
    if use_mmr:
        picked = _mmr(order, relevance, row.per_document, row.max_chunks, policy.mmr_lambda, dropped, lost)
    else:  # past the limit a part rides only when it will be joined
        picked = _greedy(order, relevance, row.per_document, row.max_chunks, policy.mmr_lambda, dropped, lost,
                         riders=policy.join_adjacent)
    joined = 0
    if policy.join_adjacent:
        picked, joined = _join(picked, lost)
    return picked, joined, use_mmr


def _lose(lost: dict[str, str] | None, gone: Iterable[Candidate], why: str) -> None:
    if lost is not None:
        for c in gone:
            lost.setdefault(c.chunk_id, why)


#: Near-copies across documents: the smaller text's word trigrams found in the other at this share.  One
#: edited word kills at most three trigrams, so "small edits" (one word in ten) keep at least 0.7.
NEAR_CONTAINMENT = 0.7


def _canonical(question: str, order: list[Candidate], relevance: list[float], policy: ContextPolicy,
               dropped: dict[str, int], into: dict[str, str] | None = None) -> tuple[list[Candidate], list[float]]:
    """Near-copies from different documents become one item: the canonical member, at the group's best
    place and relevance, citing the others as mirrors (:mod:`injection.duplicates`)."""
    if len(order) < 2:
        return order, relevance
    members = []
    for c in order:
        e = c.evidence
        norm = normalised(c.text)
        members.append(Member(c.document_id, e.key, e.title, e.heading_path, c.text, norm, _shingles(norm),
                              date=e.date, stale=e.stale))
    groups = canonical_groups(question, members, jaccard=policy.near_duplicate, containment_at=NEAR_CONTAINMENT,
                              similar=_jaccard)
    if not groups:
        return order, relevance
    replaced: dict[int, tuple[Candidate, float]] = {}
    gone: set[int] = set()
    for group in groups:
        canon, others = group[0], sorted(group[1:])
        top = min(group)  # the group answers at its best member's place
        seen: set[str] = {order[canon].document_id}
        mirrors = []
        for i in others:
            e = order[i].evidence
            if order[i].document_id not in seen:
                seen.add(order[i].document_id)
                mirrors.append(Mirror(e.key, e.doc_version, e.anchor, e.page))
        c = order[canon]
        best = max(relevance[i] for i in group)
        evidence = replace(c.evidence, also_in=(*c.evidence.also_in, *mirrors),
                           score=max(c.evidence.score, order[top].evidence.score))
        replaced[top] = (replace(c, evidence=evidence, score=max(order[i].score for i in group)), best)
        gone |= set(group) - {top}
        _count(dropped, "duplicate", len(group) - 1)
        if into is not None:
            into.update({order[i].chunk_id: c.chunk_id for i in group if i != canon})
    out, rel = [], []
    for i, c in enumerate(order):
        if i in replaced:
            out.append(replaced[i][0])
            rel.append(replaced[i][1])
        elif i not in gone:
            out.append(c)
            rel.append(relevance[i])
    return out, rel


def _newest_first(question: str, order: list[Candidate], relevance: list[float]) -> tuple[list[Candidate], list[float]]:
    """Items of a version of a document that another version in the order supersedes
    (:func:`injection.duplicates.passed_over`) go after every other item, in their own order, and no more
    relevant than the least relevant of those (MMR weighs relevance)."""
    over = passed_over(question, [c.evidence.key for c in order])
    if not any(over) or all(over):
        return order, relevance
    floor = min(r for r, o in zip(relevance, over, strict=True) if not o)
    first = [i for i, o in enumerate(over) if not o]
    later = [i for i, o in enumerate(over) if o]
    return ([order[i] for i in first + later],
            [relevance[i] for i in first] + [min(relevance[i], floor) for i in later])


def _linked(c: Candidate, picked: Sequence[Candidate], slotted: Sequence[Candidate]) -> bool:
    """Whether ``c`` will be joined to what is picked, so it takes no slot: a split part next to a picked part
    (a unit rides whole, its parts linked by prev/next ids), or the chunk just before or after a chunk that
    took a slot, in the same section (ordinals).  A chunk consecutive only to one that rode takes a slot:
    a long section is not pulled into one item a neighbour at a time."""
    if any(_parts(p, c) or _parts(c, p) for p in picked):
        return True
    return any(_neighbours(p, c) or _neighbours(c, p) for p in slotted)


def _greedy(order: list[Candidate], _rel: list[float], quota: int, limit: int, _lam: float,
            dropped: dict[str, int], lost: dict[str, str] | None = None, *, riders: bool = True) -> list[Candidate]:
    """Walk the order under the quota and the chunk limit.

    Two rules keep a page's best passage: a part of a split unit next to a
    picked part, and the chunk just before or after a chunk that took a slot
    in its section, ride with it (they are joined, taking no slot and no quota);
    and when the order opens with more of one document's chunks than the
    quota, that document is the question's subject and may take one more
    (its next chunk outranks every other document's).
    """
    subject = order[0].document_id if order else None
    run = 0
    for c in order:
        if c.document_id != subject:
            break
        run += 1
    per_doc: dict[str, int] = {}
    out: list[Candidate] = []
    slots = 0
    slotted: list[Candidate] = []
    for i, c in enumerate(order):
        if slots >= limit:  # past the limit only a picked part's own neighbours ride (:func:`_riders`)
            riding, rest = _riders(order[i:], slotted) if riders else ([], order[i:])
            out.extend(riding)
            _count(dropped, "max_chunks", len(rest))
            _lose(lost, rest, "max_chunks")
            break
        if _linked(c, out, slotted):
            out.append(c)
            continue
        allowed = quota + 1 if c.document_id == subject and run > quota else quota
        if per_doc.get(c.document_id, 0) >= allowed:
            _count(dropped, "per_document")
            _lose(lost, [c], "per_document")
            continue
        per_doc[c.document_id] = per_doc.get(c.document_id, 0) + 1
        out.append(c)
        slotted.append(c)
        slots += 1
    return out


#: Past the limit, at most this many parts of a picked part's unit ride with it, each way.
MAX_RIDERS = 2


def _riders(rest: list[Candidate], picked: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """(the parts of ``rest`` that ride with ``picked``, the others in order).  A rider is a part of the same split
    unit as a picked part (an entry or a code block the chunker cut, linked by ``next_id``/``prev_id``), at most
    :data:`MAX_RIDERS` steps from it each way: the answer is often the body half of the function whose signature
    half won.  Chunks only consecutive in a section (ordinals) do not ride past the limit, and a long unit
    is not pulled in whole."""
    by_id = {c.chunk_id: c for c in rest}
    riding: set[str] = set()
    for c in picked:
        for step in ("next_id", "prev_id"):
            at = c
            for _ in range(MAX_RIDERS):
                cid = getattr(at, step)
                part = by_id.get(cid) if cid is not None else None
                if part is None or part.document_id != c.document_id:
                    break
                riding.add(part.chunk_id)
                at = part
    return [c for c in rest if c.chunk_id in riding], [c for c in rest if c.chunk_id not in riding]


def _similarity(a: Candidate, b: Candidate, sh: dict[str, frozenset[str]]) -> float:
    if a.vector is not None and b.vector is not None:
        return _cosine(a.vector, b.vector)
    return _jaccard(sh[a.chunk_id], sh[b.chunk_id])


def _mmr(order: list[Candidate], rel: list[float], quota: int, limit: int, lam: float,
         dropped: dict[str, int], lost: dict[str, str] | None = None) -> list[Candidate]:
    """Maximal marginal relevance: each pick maximises ``lam * relevance - (1 - lam) * max similarity``."""
    if not order:
        return []
    lo, hi = min(rel), max(rel)
    norm = [(r - lo) / (hi - lo) if hi > lo else 1.0 for r in rel]
    sh = {c.chunk_id: frozenset(normalised(c.text).split()) for c in order}
    left = list(range(len(order)))
    out: list[int] = []
    per_doc: dict[str, int] = {}
    closest = [0.0] * len(order)  # max similarity to anything picked so far
    while left and len(out) < limit:
        eligible = [i for i in left if per_doc.get(order[i].document_id, 0) < quota]
        if not eligible:
            break
        i = max(eligible, key=lambda j: (lam * norm[j] - (1 - lam) * closest[j], -j))
        out.append(i)
        left.remove(i)
        per_doc[order[i].document_id] = per_doc.get(order[i].document_id, 0) + 1
        for j in left:
            closest[j] = max(closest[j], _similarity(order[i], order[j], sh))
    over_quota = [i for i in left if per_doc.get(order[i].document_id, 0) >= quota]
    _count(dropped, "per_document", len(over_quota))
    _count(dropped, "max_chunks", len(left) - len(over_quota))
    if lost is not None:
        for i in left:
            _lose(lost, [order[i]], "per_document" if i in over_quota else "max_chunks")
    return [order[i] for i in out]


def _same_section(a: Candidate, b: Candidate) -> bool:
    return a.document_id == b.document_id and a.evidence.heading_path == b.evidence.heading_path


def _parts(a: Candidate, b: Candidate) -> bool:
    """Whether ``b`` is the part of a split unit that follows ``a`` (the chunker's prev/next ids)."""
    return _same_section(a, b) and (a.next_id == b.chunk_id or b.prev_id == a.chunk_id)


def _neighbours(a: Candidate, b: Candidate) -> bool:
    """Whether ``b`` directly follows ``a`` in one section of one document: the next part of its split unit,
    or the chunk with the next ordinal (the registry's, :class:`registry.records.ChunkStatus`)."""
    return _parts(a, b) or (_same_section(a, b) and a.ordinal is not None and b.ordinal is not None
                            and b.ordinal == a.ordinal + 1)


def _glue(first: str, second: str) -> tuple[str, int, int]:
    """``first`` then ``second`` without the overlap a split left between them, nor a repeated table header;
    where ``second``'s text starts in the result, and how many of its first characters were left out there
    (a header, leading space; not an overlap, which ``first`` holds)."""
    a_lines, b_lines = first.split("\n"), second.split("\n")
    if len(a_lines) > 2 and len(b_lines) > 2 and b_lines[0].startswith("|") and a_lines[:2] == b_lines[:2]:
        head = first.rstrip("\n") + "\n"
        return head + "\n".join(b_lines[2:]), len(head), len(b_lines[0]) + len(b_lines[1]) + 2
    for size in range(min(len(first), len(second), 600), 15, -1):
        if first.endswith(second[:size]):
            return first + second[size:], len(first) - size, 0
    head = first.rstrip() + "\n"
    rest = second.lstrip()
    return head + rest, len(head), len(second) - len(rest)


def _focus(ea: Evidence, eb: Evidence, start: int, removed: int) -> int:
    """The joined item's :attr:`Evidence.focus`: the stronger part's (``eb`` glued at ``start``, its first
    ``removed`` characters left out)."""
    return ea.focus if ea.score >= eb.score else start + max(0, eb.focus - removed)


def _join(picked: list[Candidate], lost: dict[str, str] | None = None) -> tuple[list[Candidate], int]:
    """Fold each selected chunk into its selected predecessor; the result sits at the stronger one's rank."""
    items = list(picked)
    joined = 0
    changed = True
    while changed:
        changed = False
        for i, a in enumerate(items):
            for j, b in enumerate(items):
                if i != j and _neighbours(a, b):
                    ea = a.evidence
                    eb = b.evidence
                    pages = [p for p in (ea.page, ea.page_end, eb.page, eb.page_end) if p]
                    page = min(pages) if pages else None
                    last = max(pages) if pages else None
                    mirrors = (*ea.also_in, *(m for m in eb.also_in if m not in ea.also_in))
                    text, start, removed = _glue(ea.text, eb.text)
                    merged = replace(
                        a,
                        evidence=replace(ea, text=text, score=max(ea.score, eb.score),
                                         focus=_focus(ea, eb, start, removed),
                                         page=page, page_end=last if last != page else None,
                                         stale=ea.stale or eb.stale, also_in=mirrors),
                        score=max(a.score, b.score), next_id=b.next_id,
                        ordinal=b.ordinal if a.ordinal is not None and b.ordinal is not None else a.ordinal,
                    )
                    keep = min(i, j)
                    if lost is not None:
                        lost.setdefault(b.chunk_id, f"joined:{a.chunk_id}")
                    items[keep] = merged
                    del items[max(i, j)]
                    joined += 1
                    changed = True
                    break
            if changed:
                break
    return items, joined


def place(ranked: Sequence[Any]) -> list[Any]:
    """Prompt order for ``ranked`` (strongest first): the strongest first, the second strongest last."""
    items = list(ranked)
    if len(items) < 3:
        return items
    return [items[0], *items[2:], items[1]]


class SessionNumbers:
    """``[n]`` per chunk for a whole conversation: a chunk keeps its number; new chunks take the next ones.

    Thread-safe.  Numbers start at 1 and are never reused within the session.
    """

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}
        self._lock = threading.Lock()

    def peek(self, evidence: Sequence[Evidence]) -> list[Evidence]:
        """``evidence`` numbered as :meth:`assign` would, without recording anything."""
        with self._lock:
            return self._numbered(evidence, dict(self._numbers))

    def assign(self, evidence: Sequence[Evidence]) -> list[Evidence]:
        """``evidence`` numbered, recording the numbers of chunks not seen before."""
        with self._lock:
            return self._numbered(evidence, self._numbers)

    @staticmethod
    def _numbered(evidence: Sequence[Evidence], numbers: dict[str, int]) -> list[Evidence]:
        out = []
        for e in evidence:
            if e.chunk_id not in numbers:
                numbers[e.chunk_id] = len(numbers) + 1
            out.append(replace(e, n=numbers[e.chunk_id]))
        return out

    def __len__(self) -> int:
        return len(self._numbers)
