"""Operations on built snapshots: verify, swap, rollback, prune, archive, restore.

Each answers a typed record (:mod:`snapshots.records`; ``to_dict()`` for JSON).

Everything that moves an alias or changes what the registry says is live
runs under the knowledge base's writer lock, like a build.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from freshindex.core.enums import SnapshotStatus
from freshindex.core.errors import ConfigError, NotFoundError, StoreError, VerificationError
from freshindex.core.naming import Naming
from freshindex.health.metrics import Metrics
from freshindex.registry import SnapshotInfo
from freshindex.registry.protocols import SnapshotOpsRegistry
from freshindex.snapshots.archive import ArchiveTarget
from freshindex.snapshots.builder import Builder
from freshindex.snapshots.lineage import tree_path
from freshindex.snapshots.records import (
    Archived,
    Reconciliation,
    Restored,
    SnapshotView,
    StrandedRow,
    Swap,
    VerifyReport,
)
from freshindex.vectorstore.base import VectorStore

log = logging.getLogger("freshindex.snapshots")

ARCHIVE_FORMAT = "freshindex-snapshot/1"
SERVING = ("active", "retired")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class SnapshotOps:
    def __init__(self, registry: SnapshotOpsRegistry, store: VectorStore, builder: Builder, metrics: Metrics, *,
                 naming: Naming, archive_target: Callable[[], ArchiveTarget], store_kind: str = "edge",
                 presign_seconds: int = 3600) -> None:
        self.registry, self.store, self.builder, self.metrics = registry, store, builder, metrics
        self.naming = naming
        self.archive_target = archive_target
        self.store_kind = store_kind
        self.presign_seconds = presign_seconds

    # -- inspection -------------------------------------------------------------

    def show(self, snapshot_id: str) -> SnapshotView:
        snap = self.registry.get_snapshot(snapshot_id)
        return SnapshotView(snap, serving=self.store.get_alias(self.naming.alias(snap.kb)) == snap.collection,
                            collection_exists=snap.collection in self.store.list_collections(),
                            alias_history=self.registry.alias_events(snap.kb, limit=10))

    def verify(self, snapshot_id: str) -> VerifyReport:
        """Re-run the checks on a built snapshot.  The active snapshot gets the
        full comparison with the registry (counts, orphans both ways, a payload
        sample, canaries) and ``stranded_pending``: no document may have
        pending chunks that no open or staged changeset will apply (fix with
        :meth:`reconcile`); a retired one its recorded point count."""
        snap = self.registry.get_snapshot(snapshot_id)
        if snap.status not in SERVING:
            raise ConfigError(f"{snapshot_id} is {snap.status}; only built snapshots can be verified")
        try:
            if snap.status == SnapshotStatus.ACTIVE:
                live = self.registry.live_chunk_ids_for_kb(snap.kb)
                sample = live[:: max(1, len(live) // max(1, self.builder.verify_sample))]
                checks = self.builder.verify_collection(snap.kb, snap.collection, expected=len(live), written=sample,
                                                        full_scan=True)
                stranded = self.registry.stranded_documents(snap.kb)
                checks["stranded_pending"] = len(stranded)
                if stranded:
                    self.builder.observer.verification_failed(snap.kb, "stranded_pending")
                    return VerifyReport(snapshot_id, ok=False, check="stranded_pending",
                                        reason=f"{len(stranded)} documents have pending chunks no build will apply "
                                               f"(e.g. {[d['key'] for d in stranded[:3]]}); run `freshindex "
                                               "snapshots reconcile`",
                                        details=checks, stranded=[StrandedRow.of(d) for d in stranded])
            else:
                count = self.store.count(snap.collection)
                checks = {"point_count": count, "expected_count": snap.point_count}
                if count != snap.point_count:
                    raise VerificationError(f"{snap.collection} holds {count} points, its manifest says "
                                            f"{snap.point_count}")
        except VerificationError as exc:
            check = getattr(exc, "check", "count")
            self.builder.observer.verification_failed(snap.kb, check)
            return VerifyReport(snapshot_id, ok=False, check=check, reason=str(exc),
                                details=getattr(exc, "checks", {}))
        return VerifyReport(snapshot_id, ok=True, checks=checks)

    def reconcile(self, kb: str, *, repair: bool = True) -> Reconciliation:
        """Find (and with ``repair`` re-stage) documents stranded with pending chunks.

        A stranded document lost its served version: a task of a closed run
        wrote it into a changeset that was already applied (before tasks were
        fenced).  Repair stages its chunks again and makes the next sync
        re-check it against the source (:meth:`Registry.repair_stranded`); the
        next build serves it.  Runs under the writer lock, like a build.
        """
        if not repair:
            found = self.registry.stranded_documents(kb)
            return Reconciliation(kb, [StrandedRow.of(d) for d in found], repair=False)
        with self.builder.lock(kb):
            fixed = self.registry.repair_stranded(kb)
        for d in fixed:
            log.warning("stranded document re-staged", extra={"event": "stranded_repaired", "kb": kb,
                                                               "key": d["key"], "source": d["source_id"],
                                                               "chunks": len(d["chunks"]),
                                                               "changeset": d["changeset_id"]})
        return Reconciliation(kb, [StrandedRow.of(d) for d in fixed], repaired=len(fixed))

    # -- moving the alias -----------------------------------------------------------

    def swap(self, kb: str, target_id: str, *, actor: str, reason: str) -> Swap:
        """Serve ``target_id`` (a retained snapshot of ``kb``), forward or back.

        The registry is realigned to the target: chunks the changesets
        between the two versions touched (:meth:`_difference`: both branches
        up to their common ancestor) become live or removed according to what
        the target collection holds, and their documents are re-checked on the
        next sync.
        """
        with self.builder.lock(kb):
            target = self.registry.get_snapshot(target_id)
            if target.kb != kb:
                raise ConfigError(f"{target_id} belongs to knowledge base {target.kb}, not {kb}")
            active = self.registry.active_snapshot(kb)
            if active is not None and active.id == target.id:
                return Swap(kb, "unchanged", target.id)
            if target.status not in SERVING or target.collection not in self.store.list_collections():
                raise ConfigError(f"{target_id} is {target.status} and its collection is gone; restore it from "
                                  "its archive instead")
            count = self.store.count(target.collection)
            if count != target.point_count:
                raise VerificationError(f"{target.collection} holds {count} points, its manifest says "
                                        f"{target.point_count}; not swapping to it")
            reverted, reapplied, touched = self._difference(kb, active, target)
            backwards = active is not None and target.version < active.version
            present: set[str] = set()
            ordered = sorted(touched)
            for i in range(0, len(ordered), 1000):
                present.update(p.id for p in self.store.retrieve(target.collection, ordered[i : i + 1000]))
            started = time.perf_counter()
            previous = self.store.swap_alias(self.naming.alias(kb), target.collection)
            swap_ms = (time.perf_counter() - started) * 1000
            withheld = self.registry.realign_to_snapshot(
                target.id, present=present, touched=touched,
                changesets_reverted=reverted, changesets_reapplied=reapplied, actor=actor, reason=reason,
            )
            self.builder.observer.swapped(kb)
            self.builder.observer.alias_moved(kb, target.id, previous, actor, reason)
            return Swap(kb, "swapped", target.id, previous_id=active.id if active else None,
                        direction="back" if backwards else "forward", chunks_realigned=len(touched),
                        chunks_withheld=withheld, swap_ms=round(swap_ms, 3))

    def _difference(self, kb: str, active: SnapshotInfo | None,
                    target: SnapshotInfo) -> tuple[list[int], list[int], set[str]]:
        """What a swap from ``active`` to ``target`` changes: (changesets undone, changesets
        applied, chunks whose state may differ).

        The changesets on the parent-tree path between the two (through their
        common ancestor: after a rollback and a build, the two versions sit on
        different branches, and a range of version numbers would miss one
        branch and leave the registry describing chunks the target does not
        hold).  Without a common ancestor (a version restored from an
        archive), every chunk that is live now or in the target."""
        if active is None:
            return [], [], set(self.store.iter_ids(target.collection))
        by_id = {s.id: s for s in self.registry.list_snapshots(kb)}
        sides = tree_path(by_id, active, target)
        if sides is None:
            log.warning("%s and %s share no ancestor: realigning every chunk", active.id, target.id,
                        extra={"event": "swap_realign_all", "kb": kb})
            return [], [], set(self.registry.live_chunk_ids_for_kb(kb)) | set(self.store.iter_ids(target.collection))
        reverted = sorted({c for s in sides[0] for c in s.changeset_ids})
        reapplied = sorted({c for s in sides[1] for c in s.changeset_ids})
        return reverted, reapplied, self.registry.changeset_chunk_ids(reverted + reapplied)

    def rollback(self, kb: str, *, to: str | None = None, actor: str, reason: str) -> Swap:
        """Serve the previous snapshot (or ``to``).

        Reaches every retained version by an alias swap (no copy); with
        blue/green and ``keep_versions = 2`` that is the previous version,
        held by the standby until the next build recycles it.  Versions whose
        collection the ring reused are ``pruned``: :meth:`restore` them from
        their archive (see :mod:`snapshots.builder`)."""
        active = self.registry.active_snapshot(kb)
        if active is None:
            raise NotFoundError(f"knowledge base {kb} has no active snapshot")
        if to is None:
            older = [s for s in self.registry.list_snapshots(kb)
                     if s.status == SnapshotStatus.RETIRED and s.version < active.version]
            if not older:
                raise NotFoundError(f"{active.id} has no retained predecessor to roll back to")
            to = older[0].id
        return self.swap(kb, to, actor=actor, reason=reason)

    def prune(self, kb: str) -> list[str]:
        with self.builder.lock(kb):
            return self.builder.retain(kb)

    # -- archives -----------------------------------------------------------------------

    def archive(self, snapshot_id: str) -> Archived:
        snap = self.registry.get_snapshot(snapshot_id)
        if snap.status not in SERVING:
            raise ConfigError(f"{snapshot_id} is {snap.status}; only built snapshots can be archived")
        target = self.archive_target()
        with self.builder.lock(snap.kb), tempfile.TemporaryDirectory(prefix="fi-archive-") as tmp:
            work = Path(tmp)
            self.store.export_collection(snap.collection, work / "collection.bin")
            ids = list(self.store.iter_ids(snap.collection))
            registry = self.registry.export_snapshot(snapshot_id, ids, current=snap.status == SnapshotStatus.ACTIVE)
            (work / "registry.json").write_text(json.dumps(registry, default=str))
            manifest: dict[str, Any] = {
                "format": ARCHIVE_FORMAT, "snapshot": snap.as_dict(full=True), "store": self.store_kind,
                "points": len(ids),
                "files": {n: {"sha256": _sha256(work / n), "bytes": (work / n).stat().st_size}
                          for n in ("collection.bin", "registry.json")},
            }
            (work / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
            tar_path = work / f"{snapshot_id}.tar"
            with tarfile.open(tar_path, "w") as tar:
                for n in ("manifest.json", "registry.json", "collection.bin"):
                    tar.add(work / n, arcname=n)
            digest = _sha256(tar_path)
            manifest["archive"] = {"sha256": digest, "bytes": tar_path.stat().st_size}
            (work / "outer.json").write_text(json.dumps(manifest, indent=2, default=str))
            uri = target.put(tar_path, f"{snap.kb}/{snapshot_id}.tar")
            if self.store_kind == "server":
                target.put(work / "collection.bin", f"{snap.kb}/{snapshot_id}.snapshot")
            target.put(work / "outer.json", f"{snap.kb}/{snapshot_id}.manifest.json")
        self.registry.set_archive(snapshot_id, uri, digest)
        log.info("snapshot archived", extra={"event": "snapshot_archived", "snapshot": snapshot_id, "uri": uri})
        return Archived(snapshot_id, uri=uri, sha256=digest, bytes=manifest["archive"]["bytes"], points=len(ids))

    def restore(self, snapshot_id: str, *, actor: str) -> Restored:
        """Bring an archived snapshot back and serve it (into a registry that
        does not know its knowledge base: a fresh data directory)."""
        kb = self.naming.kb_of_collection(self.naming.collection(snapshot_id))
        if not kb:
            raise ConfigError(f"{snapshot_id!r} is not a snapshot id (<kb>-v<N>)")
        target = self.archive_target()
        with tempfile.TemporaryDirectory(prefix="fi-restore-") as tmp:
            work = Path(tmp)
            outer = json.loads(target.get(f"{kb}/{snapshot_id}.manifest.json", work / "outer.json").read_text())
            tar_path = target.get(f"{kb}/{snapshot_id}.tar", work / "archive.tar")
            digest = _sha256(tar_path)
            if digest != outer["archive"]["sha256"]:
                raise StoreError(f"archive of {snapshot_id} is corrupt: sha256 {digest}, manifest says "
                                 f"{outer['archive']['sha256']}")
            with tarfile.open(tar_path, "r") as tar:
                names = {m.name for m in tar.getmembers() if m.isfile()}
                if names != {"manifest.json", "registry.json", "collection.bin"}:
                    raise StoreError(f"unexpected archive members {sorted(names)}")
                tar.extractall(work / "x", filter="data")
            inner = json.loads((work / "x" / "manifest.json").read_text())
            if inner.get("format") != ARCHIVE_FORMAT:
                raise StoreError(f"unknown archive format {inner.get('format')!r}")
            for name, meta in inner["files"].items():
                if _sha256(work / "x" / name) != meta["sha256"]:
                    raise StoreError(f"{name} in the archive of {snapshot_id} does not match its checksum")
            if inner["store"] != self.store_kind:
                raise ConfigError(f"the archive was made from a {inner['store']} store; this one is "
                                  f"{self.store_kind}")
            with self.builder.lock(kb):
                snap = self.registry.import_snapshot(json.loads((work / "x" / "registry.json").read_text()))
                source: Path | str = work / "x" / "collection.bin"
                if self.store_kind == "server":
                    # A Qdrant server fetches its native snapshot itself: give it a
                    # presigned URL of the copy stored beside the archive.
                    source = target.presign(f"{kb}/{snapshot_id}.snapshot", self.presign_seconds)
                self.store.import_collection(snap.collection, source)
                count = self.store.count(snap.collection)
                if count != inner["points"]:
                    self.store.drop_collection(snap.collection)
                    raise VerificationError(f"restored {count} points, the archive holds {inner['points']}")
                self._refill_vector_cache(snap)
                self.store.release(snap.collection)
                self.store.swap_alias(self.naming.alias(kb), snap.collection)
                self.registry.set_snapshot_active(snap.id, actor=actor, reason=f"restored from {target.uri}")
        return Restored(snapshot_id, kb=kb, points=count, sha256=digest)

    def _refill_vector_cache(self, snap: SnapshotInfo) -> None:
        """The restored points carry their vectors: put them back in the cache so
        later builds do not re-embed unchanged chunks."""
        ids = list(self.store.iter_ids(snap.collection))
        for i in range(0, len(ids), 1000):
            points = self.store.retrieve(snap.collection, ids[i : i + 1000], with_vectors=True)
            self.registry.cache_vectors(snap.embedding_model, {
                p.payload["content_hash"]: np.asarray(p.vector, dtype=np.float32)
                for p in points if p.vector is not None and p.payload.get("content_hash")
            })

