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


@pytest.mark.parametrize("bad", ["", "Upper", "has space", "-lead", "a" * 64, "dot.ted"])
def test_kb_names_are_restricted(bad: str) -> None:
    with pytest.raises(ConfigError):
        validate_kb_name(bad)
