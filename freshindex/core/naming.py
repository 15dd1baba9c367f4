"""How snapshots, collections and aliases are named.

A snapshot id is ``<kb>-v<version>``; its collection is the id behind a
configurable prefix, and the knowledge base's alias is the kb name behind the
same prefix.  Readers and the builder share this so a result can always be
traced from collection back to snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Naming:
    prefix: str = "fi_"

    def alias(self, kb: str) -> str:
        return f"{self.prefix}{kb}"

    def snapshot_id(self, kb: str, version: int) -> str:
        return f"{kb}-v{version}"

    def collection(self, snapshot_id: str) -> str:
        return f"{self.prefix}{snapshot_id}"

    def snapshot_of(self, collection: str) -> str | None:
        if not collection.startswith(self.prefix):
            return None
        return collection[len(self.prefix):]

    def kb_of_collection(self, collection: str) -> str | None:
        sid = self.snapshot_of(collection)
        if not sid or "-v" not in sid:
            return None
        return sid.rsplit("-v", 1)[0]
