"""Chunk boundaries and chunk identity."""

from __future__ import annotations

import itertools

from tests.conftest import EXAMPLES
from workers.chunking import Chunker, estimate_tokens
from workers.parsing import Parsers

KB = EXAMPLES / "kb"


def chunks_of(key: str, data: bytes | None = None, **kw):
    data = data if data is not None else (KB / key).read_bytes()
    return Chunker(**kw).chunk("doc-" + key, Parsers().parse(data, key))


def test_the_condition_stays_with_the_rollback_step() -> None:
    chunks = chunks_of("guides/release.md")
    step = next(c for c in chunks if "migrate down 1" in c.text)
    assert "only if the migration has not" in step.text
    assert step.heading_path == ("Release procedure", "Rollback", "Database migration")


def test_every_table_chunk_repeats_the_header() -> None:
    rows = "\n".join(f"plan{i},{i * 10},\"{i},000\",0.{i},email" for i in range(200))
    data = (KB / "reference/pricing.csv").read_bytes().splitlines()[0] + b"\n" + rows.encode()
    chunks = chunks_of("big.csv", data, max_tokens=120)
    assert len(chunks) > 5
    for c in chunks:
        assert c.text.startswith("| plan | monthly price (USD) |")
        assert c.meta["columns"][1] == "monthly price (USD)"
        assert estimate_tokens(c.text) <= 120 * 1.5


def test_ids_are_stable_when_a_section_is_inserted_above() -> None:
    original = (KB / "guides/release.md").read_bytes()
    before = chunks_of("guides/release.md", original)
    inserted = original.replace(b"## Preparation", b"## Scope\n\nThis applies to billing only.\n\n## Preparation")
    after = chunks_of("guides/release.md", inserted)
    assert {c.id for c in before} <= {c.id for c in after}
    assert len(after) == len(before) + 1


def test_an_edited_paragraph_changes_only_its_chunk() -> None:
    original = (KB / "guides/release.md").read_bytes()
    edited = original.replace(b"for 15\nminutes", b"for 30\nminutes")
    before, after = chunks_of("guides/release.md", original), chunks_of("guides/release.md", edited)
    assert len({c.id for c in after} - {c.id for c in before}) == 1


def test_long_prose_is_split_with_overlap_and_code_symbols_stay_whole() -> None:
    para = " ".join(f"Sentence number {i} explains one more detail of the procedure." for i in range(80))
    chunks = chunks_of("long.md", f"# Title\n\n{para}\n".encode(), max_tokens=100, overlap_tokens=20)
    assert len(chunks) >= 5
    for a, b in itertools.pairwise(chunks):
        first_of_b = b.text.split(". ")[0]
        assert first_of_b in a.text  # overlap: b starts with the tail of a
    code = chunks_of("code/retry.py")
    assert any(c.meta.get("symbol") == "retry" and "raise RetryError" in c.text for c in code)
