"""Chunk boundaries that keep context: a short section lead shares its first subsection's chunk,
and a comment that ends a code part moves to the part holding the code it explains."""

from __future__ import annotations

from freshindex.workers.chunking import Chunker
from freshindex.workers.chunking.pack import estimate_tokens, split_lines
from freshindex.workers.parsing import Parsers

NOTES = b"""# Release 3.2.1 notes

May 4, 2021

Release 3.2.1 fixes a security issue and several bugs in 3.2.

## CVE-2021-31542: directory traversal via uploaded files

The multipart parser allowed directory traversal with crafted file names. Stricter basename
sanitation is now applied.

## Bugfixes

Fixed a regression in the admin changelist.
"""


def chunks_of(data: bytes, key: str = "notes.md", **kw):
    return Chunker(**kw).chunk("doc", Parsers().parse(data, key))


def test_a_short_lead_shares_the_chunk_of_its_first_subsection_under_its_own_path() -> None:
    chunks = chunks_of(NOTES)
    host = next(c for c in chunks if "fixes a security issue" in c.text)
    # the lead, the subsection's heading, then the subsection's text: what the release fixed, in one chunk
    assert host.text.index("fixes a security issue") < host.text.index("CVE-2021-31542") \
        < host.text.index("crafted file names")
    assert host.heading_path == ("Release 3.2.1 notes",)  # cited where the chunk starts
    # the lead is nowhere on its own, and the next subsection keeps its own chunk and path
    assert sum("fixes a security issue" in c.text for c in chunks) == 1
    bugfixes = next(c for c in chunks if "admin changelist" in c.text)
    assert bugfixes.heading_path == ("Release 3.2.1 notes", "Bugfixes") and "security issue" not in bugfixes.text


def test_a_long_lead_or_one_followed_by_a_sibling_stays_a_chunk_of_its_own() -> None:
    long_lead = NOTES.replace(b"several bugs in 3.2.", b"several bugs in 3.2. " + b"It also explains more. " * 30)
    chunks = chunks_of(long_lead)
    lead = next(c for c in chunks if "fixes a security issue" in c.text)
    assert "crafted file names" not in lead.text and lead.heading_path == ("Release 3.2.1 notes",)

    siblings = b"## Scope\n\nApplies to billing only.\n\n## Deployment\n\nDeploy to the canary pool first.\n"
    chunks = chunks_of(siblings)
    scope = next(c for c in chunks if "billing only" in c.text)
    assert "canary" not in scope.text and scope.heading_path == ("Scope",)


def test_the_lead_merge_is_stable_for_edits_elsewhere() -> None:
    before = chunks_of(NOTES)
    after = chunks_of(NOTES.replace(b"admin changelist", b"admin change list view"))
    assert len({c.id for c in after} - {c.id for c in before}) == 1  # only the edited chunk


def _code() -> str:
    blocks = []
    for i in range(30):
        blocks.append(f"def step_{i}(value):\n    total = value * {i}\n"
                      f"    # The marker for step {i} must not collide with a real value,\n"
                      f"    # so it is written before the data.\n    emit(b'-{i}')\n    return total\n")
    return "\n".join(blocks)


def test_a_comment_is_never_cut_away_from_the_code_below_it() -> None:
    parts = split_lines(_code(), 120, count=estimate_tokens)  # room for a function and a half
    assert len(parts) > 5
    for part in parts[:-1]:
        assert not part.rstrip().split("\n")[-1].lstrip().startswith("#"), part
    for part in parts:
        for i in range(30):
            if f"# The marker for step {i} " in part:
                assert f"emit(b'-{i}')" in part  # the explanation and the line it explains, together
    assert "\n".join(parts).count("def step_") == 30  # nothing lost or repeated
    assert all(estimate_tokens(p) <= 120 for p in parts)
