"""Verification of a new collection version before the alias moves to it.

:meth:`Verification.verify_collection` lists the checks; a failed one raises
:class:`Held`, which names it, and the builder fails the version
(:meth:`snapshots.builder.Builder.build`) so the alias stays where it was.
``snapshots verify`` (:class:`snapshots.lifecycle.SnapshotOps`) runs the same checks
on a serving version.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from freshindex.core.errors import VerificationError
from freshindex.core.payload import PayloadError, PointPayload
from freshindex.core.scoring import rank_of
from freshindex.snapshots.builder_base import BuilderBase


class Held(VerificationError):
    def __init__(self, check: str, message: str, checks: dict[str, Any]) -> None:
        super().__init__(message)
        self.check = check
        self.checks = {**checks, "failed_check": check, "reason": message}


def _read_payload(payload: dict[str, Any]) -> PointPayload | None:
    """A stored payload read back, or None when it is not one the builder wrote."""
    try:
        return PointPayload.from_dict(payload)
    except PayloadError:
        return None


def _disagreement(p: PointPayload | None, r: Any) -> str:
    """Why a sampled point's payload disagrees with its registry row (a ``ChunkRow``), or ""."""
    if r is None:
        return "no registry row"
    if p is None:
        return "payload"
    if p.acl != tuple(r.acl):
        return "acl"
    if p.tenant != r.tenant or p.acl_version != r.acl_version:
        return "acl_version"
    if p.source_id != r.source_id or p.document_id != r.document_id:
        return "source"
    if not p.snapshot_id:
        return "snapshot_id"
    return ""


class Verification(BuilderBase):
    """The checks a version passes before it serves (a mixin of :class:`snapshots.builder.Builder`)."""

    def verify_collection(self, kb: str, collection: str, *, expected: int, written: Sequence[str] = (),
                          deletes: Sequence[str] = (), full_scan: bool = False) -> dict[str, Any]:
        """Checks before a swap; raises :class:`VerificationError` naming the failed check.

        * count: the collection holds exactly the number of points the
          registry says should be live;
        * written: every point this build wrote is there with the registry's
          content hash (all of them, the cost grows with the change);
        * sample: a sample of written points carries the registry's snapshot
          id, ACL and source;
        * removed: every chunk this build removed is gone;
        * orphans (full builds and ``snapshots verify``): the ids in the
          collection are exactly the registry's live ids, both ways;
        * canaries: each canary question of the knowledge base finds its
          expected document in the top results (its key, or a key ending in
          ``/`` + it: the golden sets' rule, :mod:`core.scoring`).

        What passing does not prove: that unsampled payload fields of points
        carried over from the parent are right (the parent passed the same
        checks when it was built), or that answers got better.
        """
        self._phase("verifying")
        count = self.store.count(collection)
        checks: dict[str, Any] = {"point_count": count, "expected_count": expected}
        if count != expected:
            raise Held("count", f"{collection} holds {count} points, the registry expects {expected}", checks)
        if written:
            self._check_written(collection, written, checks)
        if deletes:
            still = []
            for i in range(0, len(deletes), 1000):
                still.extend(self.store.retrieve(collection, deletes[i : i + 1000]))
            checks["removed_checked"] = len(deletes)
            if still:
                raise Held("removed", f"{len(still)} removed chunks are still in {collection}", checks)
        if full_scan:
            in_store = set(self.store.iter_ids(collection))
            live = set(self.registry.live_chunk_ids_for_kb(kb)) | set(written)
            live -= set(deletes)
            orphans, absent = in_store - live, live - in_store
            checks["orphans"], checks["absent"] = len(orphans), len(absent)
            if orphans or absent:
                raise Held("orphans", f"{len(orphans)} points without a live registry row and {len(absent)} live "
                                       f"chunks missing from {collection}", checks)
        self._run_canaries(kb, collection, checks)
        return checks

    def _check_written(self, collection: str, written: Sequence[str], checks: dict[str, Any],
                       batch: int = 1000) -> None:
        """The "written" and "sample" checks, a batch of points and registry rows at a time (a full
        build writes every chunk: holding them all at once, texts twice, was the build's peak memory).

        Every written point is compared with its chunk's content hash alone; only the sampled ones are
        read as whole rows (their ACL and source): reading every row again, its JSON columns decoded, cost
        a full build of 14k chunks about a second for fields the check never looked at."""
        rng = random.Random(collection)
        sample = set(rng.sample(list(written), min(self.verify_sample, len(written))))
        missing: list[str] = []
        wrong: list[str] = []
        bad: list[tuple[str, str]] = []
        for i in range(0, len(written), batch):
            ids = written[i : i + batch]
            hashes = self.registry.chunk_hashes(list(ids))
            sampled = [cid for cid in ids if cid in sample]
            rows = {r.id: r for r in self.registry.chunk_rows(sampled)} if sampled else {}
            payloads = {p.id: _read_payload(p.payload) for p in self.store.retrieve(collection, ids)}
            missing += [cid for cid in ids if cid not in payloads]
            wrong += [cid for cid in ids if cid in payloads and cid in hashes
                      and ((pl := payloads[cid]) is None or pl.content_hash != hashes[cid])]
            bad += [(cid, why) for cid in sampled if cid in payloads
                    and (why := _disagreement(payloads[cid], rows.get(cid)))]
        checks["written_checked"] = len(written)
        if missing or wrong:
            raise Held("written", f"{len(missing)} written points missing and {len(wrong)} with the wrong "
                                   f"content hash in {collection} (e.g. {(missing + wrong)[:3]})", checks)
        checks["sampled"] = len(sample)
        if bad:
            raise Held("sample", f"{len(bad)} of {len(sample)} sampled points disagree with the registry: "
                                  f"{bad[:3]}", checks)

    def _run_canaries(self, kb: str, collection: str, checks: dict[str, Any]) -> None:
        canaries = self.registry.list_canaries(kb)
        if not canaries:
            return
        vectors = self.embedder.embed([c.question for c in canaries])
        failed = []
        for canary, vector in zip(canaries, vectors, strict=True):
            hits = self.store.search(collection, vector.tolist(), limit=canary.top_k)
            # Scored as freshindex eval scores a golden question (core.scoring): a canary is a one-question set.
            items = [{"key": p.key} for h in hits if (p := _read_payload(h.payload)) is not None]
            if rank_of(items, [canary.expected_key]) is None:
                failed.append(canary.question)
        checks["canaries"] = {"run": len(canaries), "failed": failed}
        if failed:
            raise Held("canary", f"{len(failed)} of {len(canaries)} canary queries missed their document: "
                                  f"{failed[:3]}", checks)


__all__ = ["Held", "Verification"]
