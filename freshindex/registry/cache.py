"""The vector cache: embeddings keyed by (model id, content hash).

An unchanged chunk is never re-embedded (design invariant 2) because its
vector is found here.  The cache never expires entries and does not check
that a vector came from the model its key names; that is the writer's word.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy import func, select

from freshindex.registry.base import _Base, _batches
from freshindex.registry.schema import Embedding, utcnow

if TYPE_CHECKING:  # numpy is imported where vectors are read or written, not by every registry user
    import numpy as np


class VectorCacheStore(_Base):
    """Read and write cached float32 vectors by model id and content hash."""

    def cached_vectors(self, model_id: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        import numpy as np

        wanted = sorted(set(hashes))
        found: dict[str, np.ndarray] = {}
        with self.session() as s:
            for batch in _batches(wanted):
                q = select(Embedding.content_hash, Embedding.dim, Embedding.vector).where(
                    Embedding.model_id == model_id, Embedding.content_hash.in_(batch)
                )
                for h, dim, blob in s.execute(q):
                    vec = np.frombuffer(blob, dtype=np.float32)
                    if vec.shape[0] == dim:
                        found[h] = vec
        return found

    def cache_vectors(self, model_id: str, vectors: dict[str, np.ndarray]) -> None:
        import numpy as np

        rows = [
            dict(model_id=model_id, content_hash=h, dim=int(v.shape[0]), vector=np.asarray(v, np.float32).tobytes(),
                 created_at=utcnow())
            for h, v in vectors.items()
        ]
        if not rows:
            return
        with self.session() as s:
            # One statement for all rows (executemany): a multi-row VALUES per batch was compiled
            # anew for every batch size, a third of the cache's time.
            s.connection().execute(self._insert(Embedding).on_conflict_do_nothing(), rows)

    def cache_size(self, model_id: str | None = None) -> int:
        with self.session() as s:
            q = select(func.count()).select_from(Embedding)
            if model_id:
                q = q.where(Embedding.model_id == model_id)
            return s.scalar(q) or 0
