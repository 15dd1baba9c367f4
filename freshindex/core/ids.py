"""Identity from content.

Ids are derived, never allocated: the same source object always gets the same
document id, and the same chunk text at the same structural place of the same
document always gets the same chunk id.  That turns "what changed" into a set
difference and makes re-running any step a no-op.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable

_KB_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
#: The end of a snapshot id (``<kb>-v<version>``), which no knowledge base name may share.
_VERSION_SUFFIX = re.compile(r"-v(\d+)$")
_SOURCE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def sha256_hex(*parts: str | bytes) -> str:
    """sha256 over parts separated by NUL, so ("ab", "c") != ("a", "bc")."""
    h = hashlib.sha256()
    for i, part in enumerate(parts):
        if i:
            h.update(b"\0")
        h.update(part.encode("utf-8") if isinstance(part, str) else part)
    return h.hexdigest()


def content_hash(data: bytes) -> str:
    """The hash recorded for a source object's raw bytes."""
    return hashlib.sha256(data).hexdigest()


def document_id(source_id: str, key: str) -> str:
    """Canonical id of a document: its source and its key inside the source."""
    return sha256_hex("doc", source_id, key)[:32]


def chunk_point_id(document: str, structural_path: Iterable[str], text_hash: str) -> str:
    """A UUID (Qdrant accepts UUIDs and integers as point ids) for one chunk.

    Built from the canonical document id, the chunk's structural path (heading
    path plus an occurrence counter among identical siblings) and the hash of
    its normalized content, so an edit elsewhere in the document does not move
    it.
    """
    digest = hashlib.sha256(
        sha256_hex("chunk", document, "\x1f".join(structural_path), text_hash).encode()
    ).digest()
    return str(uuid.UUID(bytes=digest[:16], version=5))


def validate_kb_name(name: str) -> str:
    """Knowledge base names become collection and alias names: keep them tame."""
    if not _KB_NAME.match(name):
        from freshindex.core.errors import ConfigError

        raise ConfigError(
            f"invalid knowledge base name {name!r}: use 1-63 of a-z 0-9 _ -, starting with a letter or digit"
        )
    if _VERSION_SUFFIX.search(name):
        from freshindex.core.errors import ConfigError

        # "docs-v2" is how version 2 of knowledge base "docs" is named: its alias would
        # be that version's collection name, and a server read it as a version alias.
        instead = _VERSION_SUFFIX.sub(r"_v\1", name)
        raise ConfigError(f"invalid knowledge base name {name!r}: it ends like a version name "
                          f"(-v<digits>); name it {instead!r}, say")
    return name


def validate_source_id(source_id: str) -> str:
    if not _SOURCE_ID.match(source_id):
        from freshindex.core.errors import ConfigError

        raise ConfigError(
            f"invalid source id {source_id!r}: use 1-128 of A-Z a-z 0-9 _ . -, starting with a letter or digit"
        )
    return source_id
