"""Snapshot export and import: the registry rows a restored snapshot needs elsewhere.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from freshindex.core.enums import ChunkState, SnapshotStatus
from freshindex.core.errors import ConfigError
from freshindex.registry.base import _Base, _batches, _snap_info
from freshindex.registry.records import SnapshotInfo
from freshindex.registry.schema import Canary, Chunk, Document, Snapshot, Source, UTCDateTime


class ArchiveStore(_Base):
    """Export one snapshot's rows as JSON-ready dicts and load them into a fresh registry."""

    if TYPE_CHECKING:  # the snapshot records' part (registry/snapshots.py), composed beside this one in Registry
        def get_snapshot(self, snapshot_id: str) -> SnapshotInfo: ...

    def export_snapshot(self, snapshot_id: str, chunk_ids: Sequence[str], *, current: bool) -> dict[str, Any]:
        """Everything needed to serve ``snapshot_id`` elsewhere: its manifest,
        the chunk rows it holds, their documents and sources, the canaries.

        ``current`` says the documents' etags and hashes describe this
        snapshot (it is the active one); otherwise they are left out so a
        restored registry re-checks every document against its source.
        """
        snap = self.get_snapshot(snapshot_id)
        with self.session() as s:
            chunks: list[Chunk] = []
            for batch in _batches(sorted(chunk_ids)):
                chunks.extend(s.scalars(select(Chunk).where(Chunk.id.in_(batch))))
            doc_ids = sorted({c.document_id for c in chunks})
            docs: list[Document] = []
            for batch in _batches(doc_ids):
                docs.extend(s.scalars(select(Document).where(Document.id.in_(batch))))
            sources = list(s.scalars(select(Source).where(Source.id.in_(sorted({d.source_id for d in docs})))))
            canaries = list(s.scalars(select(Canary).where(Canary.kb == snap.kb)))

            def row(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
                out = {}
                for col in obj.__table__.columns:
                    if col.key in skip:
                        continue
                    v = getattr(obj, col.key)
                    out[col.key] = v.isoformat() if isinstance(v, dt.datetime) else v
                return out

            doc_skip = () if current else ("etag", "content_hash")
            return {
                "snapshot": row(s.get(Snapshot, snapshot_id)),
                "sources": [row(x) for x in sources],
                "documents": [row(x, doc_skip) for x in docs],
                "chunks": [row(x) for x in chunks],
                "canaries": [row(x, ("id",)) for x in canaries],
            }

    def import_snapshot(self, data: dict[str, Any]) -> SnapshotInfo:
        """Load an :meth:`export_snapshot` into a registry that does not know this
        knowledge base yet.  Chunks arrive live; the snapshot arrives
        ``verified`` (the caller swaps the alias, then activates it)."""
        snap = data["snapshot"]
        kb = snap["kb"]
        with self.session() as s:
            if s.scalar(select(func.count()).select_from(Snapshot).where(Snapshot.kb == kb)):
                raise ConfigError(f"knowledge base {kb!r} already has snapshots here; restore into a fresh data "
                                  "directory (or a fresh registry)")

            def load(model: Any, values: dict[str, Any]) -> Any:
                kwargs = {}
                for col in model.__table__.columns:
                    if col.key not in values:
                        continue
                    v = values[col.key]
                    if v is not None and isinstance(col.type, UTCDateTime):
                        v = dt.datetime.fromisoformat(v)
                    kwargs[col.key] = v
                return model(**kwargs)

            for src in data["sources"]:
                if s.get(Source, src["id"]) is None:
                    s.add(load(Source, src))
            s.flush()
            for doc in data["documents"]:
                if s.get(Document, doc["id"]) is None:
                    s.add(load(Document, doc))
            s.flush()
            for chunk in data["chunks"]:
                s.merge(load(Chunk, {**chunk, "state": ChunkState.LIVE, "tombstoned": False}))
            for canary in data["canaries"]:
                s.add(load(Canary, canary))
            row = load(Snapshot, {**snap, "status": SnapshotStatus.VERIFIED, "activated_at": None})
            s.add(row)
            s.flush()
            return _snap_info(row)
