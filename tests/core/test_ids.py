from __future__ import annotations

import uuid

import pytest

from freshindex.core.errors import ConfigError
from freshindex.core.ids import chunk_point_id, document_id, sha256_hex, validate_kb_name


def test_hash_parts_are_separated() -> None:
    assert sha256_hex("ab", "c") != sha256_hex("a", "bc")


def test_ids_are_deterministic_and_point_ids_are_uuids() -> None:
    doc = document_id("src", "a/b.md")
    assert doc == document_id("src", "a/b.md") != document_id("src2", "a/b.md")
    pid = chunk_point_id(doc, ("H", "paragraph", "0"), "h1")
    assert uuid.UUID(pid).version == 5
    assert pid == chunk_point_id(doc, ("H", "paragraph", "0"), "h1")
    assert pid != chunk_point_id(doc, ("H", "paragraph", "1"), "h1")


@pytest.mark.parametrize("bad", ["", "Upper", "has space", "-lead", "a" * 64, "dot.ted", "docs-v2", "kb-v10"])
def test_kb_names_are_restricted(bad: str) -> None:
    with pytest.raises(ConfigError):
        validate_kb_name(bad)


@pytest.mark.parametrize("good", ["docs", "docs_v2", "docs-v", "docs-v2a", "v2", "docs-2"])
def test_kb_names_may_not_end_like_a_version(good: str) -> None:
    """``docs-v2`` is version 2 of ``docs``: as a knowledge base, its alias would be that
    version's collection name (and a Qdrant server with renames reads it as a version)."""
    assert validate_kb_name(good) == good
    with pytest.raises(ConfigError, match=r"ends like a version name.*'docs_v2'"):
        validate_kb_name("docs-v2")
