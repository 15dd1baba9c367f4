"""Chunk boundaries and chunk identity."""

from __future__ import annotations

import itertools

from freshindex.workers.chunking import Chunker, estimate_tokens
from freshindex.workers.parsing import Parsers
from tests.conftest import EXAMPLES

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
    inserted = original.replace(b"## Deployment", b"## Scope\n\nThis applies to billing only.\n\n## Deployment")
    after = chunks_of("guides/release.md", inserted)
    assert {c.id for c in before} <= {c.id for c in after}
    assert len(after) == len(before) + 1


def test_a_section_inserted_right_under_a_short_lead_takes_the_lead_along() -> None:
    # The lead (two sentences under the title) shares a chunk with the first subsection, under the
    # lead's own heading path; a new first subsection takes it over: the old host is re-chunked, every
    # other id stays.
    original = (KB / "guides/release.md").read_bytes()
    before = chunks_of("guides/release.md", original)
    inserted = original.replace(b"## Preparation", b"## Scope\n\nThis applies to billing only.\n\n## Preparation")
    after = chunks_of("guides/release.md", inserted)
    assert len({c.id for c in before} - {c.id for c in after}) == 1
    host = next(c for c in after if "announced in #releases" in c.text)
    assert host.heading_path == ("Release procedure",)
    assert host.text.index("announced in #releases") < host.text.index("Scope") < host.text.index("billing only")
    assert not any("announced in #releases" in c.text for c in after if c is not host)


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


# -- structure-aware chunking --------------------------------------------------------

FIXTURES = EXAMPLES / "fixtures"


def fixture_chunks(rel: str, **kw):
    path = FIXTURES / rel
    return Chunker(**kw).chunk("doc-" + rel, Parsers().parse(path.read_bytes(), path.name))


def test_a_condition_in_its_own_list_item_stays_with_the_step_it_qualifies() -> None:
    """The condition is item 6, the step item 5; packing alone would cut between them."""
    chunks = fixture_chunks("guides/schema-rollback.md")
    step = next(c for c in chunks if "`migrate down 1`" in c.text)
    assert "6. Only if the migration has not been committed to the shared ledger" in step.text
    assert step.heading_path == ("Rolling back a schema release", "Rollback")
    restore = next(c for c in chunks if "dbctl snapshot restore" in c.text)
    assert "This does not apply to the archive replicas" in restore.text


def test_a_chinese_condition_stays_with_its_step() -> None:
    chunks = fixture_chunks("guides/schema-rollback.zh.md")
    step = next(c for c in chunks if "使用 `migrate down 1` 回滚" in c.text)
    assert "仅当该迁移尚未提交到共享账本时" in step.text


def test_conditions_warnings_and_lead_ins_join_their_step() -> None:
    from freshindex.core.types import Block
    from freshindex.workers.chunking.units import build_units, is_condition

    for text in ("Only if the cluster is idle.", "Unless you hold the lock, skip this.", "- Except for archives.",
                 "This step does not apply to replicas.", "除非已经提交。", "不适用于归档副本。",
                 "Do the restore first; it does not apply to replicas."):
        assert is_condition(text), text
    assert not is_condition("Restart the worker and check the logs for errors in the first minute.")
    blocks = [Block("paragraph", "To roll back:"), Block("list", "1. Stop the workers.\n2. Restore."),
              Block("admonition", "Never restore during business hours."), Block("paragraph", "Then page the owner."),
              Block("code", "dbctl restore"), Block("paragraph", "This command takes a minute.")]
    units = build_units(blocks, 200)
    assert [len(u.parts) for u in units] == [3, 3]


def test_table_chunks_carry_caption_headers_and_units() -> None:
    chunks = fixture_chunks("tables/support-sla.md")
    table = next(c for c in chunks if c.kind == "table")
    assert table.text.startswith("Table 1: Response targets by support plan\n"
                                 "| plan | first response (hours) | resolution target (business days) | "
                                 "monthly fee (EUR) |")
    assert table.meta["units"] == {"first response (hours)": "hours",
                                   "resolution target (business days)": "business days",
                                   "monthly fee (EUR)": "EUR"}
    assert "| Enterprise | 1 | 1 | 1,900 |" in table.text
    rows = fixture_chunks("tables/regions.csv")
    assert len(rows) > 2
    for c in rows:
        assert c.text.startswith("| region | city | storage price (USD per GB-month) | egress price (USD per GB) |")
        assert c.meta["units"]["p99 read latency (ms)"] == "ms"
    covered = [r for c in rows for r in range(c.meta["rows"][0], c.meta["rows"][1] + 1)]
    assert covered == list(range(1, 23))  # every row exactly once, in order


def test_code_is_chunked_by_symbol_in_python_typescript_javascript_and_go() -> None:
    from freshindex.workers.parsing.code import git_blob_id

    expected = {
        "kb/code/retry.py": ("python", {"retry": "def retry(call, attempts=5, retry_on=(ConnectionError, TimeoutError))",
                                        "RetryError": "class RetryError(Exception)"}),
        "kb/code/ratelimit.ts": ("typescript", {"TokenBucket": "class TokenBucket",
                                                "rejectStatus": "function rejectStatus(): number"}),
        "fixtures/code/webhooks.js": ("javascript", {"signPayload": "function signPayload(secret, body)",
                                                     "DeliveryQueue.deliver": "async deliver(item)"}),
        "fixtures/code/ledger.go": ("go", {"Period.Append": "func (p *Period) Append(e Entry) error",
                                           "Prorate": "func Prorate(amount int64, days, daysInPeriod int) int64"}),
    }
    for rel, (language, symbols) in expected.items():
        path = EXAMPLES / rel
        chunks = Chunker().chunk("doc", Parsers().parse(path.read_bytes(), rel))
        by_symbol = {c.meta["symbol"]: c for c in chunks}
        for symbol, signature in symbols.items():
            c = by_symbol[symbol]
            assert c.kind == "code" and c.heading_path == (symbol,)  # the qualified name, never the file path
            assert c.meta["path"] == rel and c.meta["language"] == language
            assert c.meta["signature"] == signature
            assert c.meta["source_version"] == f"git-blob:{git_blob_id(path.read_bytes())}"
            first, last = c.meta["lines"]
            assert c.anchor == f"L{first}-L{last}"
    go = {c.meta["symbol"]: c for c in fixture_chunks("code/ledger.go")}
    assert go["Period.Close"].meta["symbol_kind"] == "method"
    assert go["Period.Close"].text.startswith("// Close freezes the period")  # its doc comment travels with it
    js = {c.meta["symbol"]: c for c in fixture_chunks("code/webhooks.js")}
    assert "Receivers compare it in constant time" in js["signPayload"].text
    assert js["DeliveryQueue"].meta["members"] == ["DeliveryQueue.constructor", "DeliveryQueue.enqueue",
                                                   "DeliveryQueue.deliver"]


def test_a_long_symbol_is_split_into_linked_parts() -> None:
    body = "\n".join(f"    total += item_{i}.amount * rate_{i}  # line {i} of the pricing rules" for i in range(120))
    source = f'def price(items):\n    """Price every item."""\n    total = 0\n{body}\n    return total\n'.encode()
    chunks = Chunker(max_tokens=200).chunk("doc", Parsers().parse(source, "pricing.py"))
    parts = [c for c in chunks if c.meta.get("symbol") == "price"]
    assert len(parts) >= 3
    assert [c.meta["part"] for c in parts] == list(range(1, len(parts) + 1))
    assert all(c.meta["parts"] == len(parts) for c in parts)
    for a, b in itertools.pairwise(parts):
        assert a.meta["next"] == b.id and b.meta["prev"] == a.id
    assert parts[0].text.startswith("def price(items):")
    assert parts[1].text.startswith("# def price(...) (continued)")
    assert all(estimate_tokens(c.text) <= 220 for c in parts)


def test_an_edit_in_a_long_section_changes_at_most_two_chunks() -> None:
    """Content-defined boundaries: a longer paragraph does not shift the cuts after it."""
    import random

    rng = random.Random(5)
    words = "ledger shard replica invoice queue worker region tenant snapshot quota".split()
    paras = [" ".join(rng.choice(words) for _ in range(rng.randint(25, 60))).capitalize() + "." for _ in range(40)]
    before = chunks_of("long.md", ("# Manual\n\n## Operations\n\n" + "\n\n".join(paras)).encode())
    for n in (3, 17, 30):
        edited = list(paras)
        edited[n] = edited[n][:-1] + " and then a much longer tail that shifts everything after it by a few lines."
        after = chunks_of("long.md", ("# Manual\n\n## Operations\n\n" + "\n\n".join(edited)).encode())
        assert len({c.id for c in after} - {c.id for c in before}) <= 2
        assert len(before) > 10


def test_identity_ignores_the_page_and_the_banner_but_not_the_text() -> None:
    from freshindex.core.types import Block, ParsedDocument

    def doc(blocks):
        return ParsedDocument("t", tuple(blocks), "pdf", "pdf-x")

    a = Chunker().chunk("d", doc([Block("paragraph", "Keep raw events for 13 months.", ("Retention",), page=2)]))
    b = Chunker().chunk("d", doc([Block("paragraph", "Keep  raw events\nfor 13 months.", ("Retention",), page=9)]))
    c = Chunker().chunk("d", doc([Block("paragraph", "Keep raw events for 14 months.", ("Retention",), page=2)]))
    assert a[0].id == b[0].id and a[0].content_hash == b[0].content_hash and b[0].page == 9
    assert c[0].content_hash != a[0].content_hash
    page = (EXAMPLES / "kb/guides/onboarding.html").read_bytes()
    rebannered = page.replace(b"Last updated 2026-11-01", b"Last updated 2027-02-14").replace(
        b"<main>", b'<main><div class="version-banner">Docs for version 9.1</div><p>Version 9.1 - updated 2027-02-14</p>')
    assert {x.id for x in chunks_of("guides/onboarding.html", page)} == \
        {x.id for x in chunks_of("guides/onboarding.html", rebannered)}


def test_the_chunker_version_enters_the_hash(monkeypatch) -> None:
    import freshindex.workers.chunking as chunking
    before = chunks_of("guides/release.md")
    monkeypatch.setattr(chunking, "CHUNKER_VERSION", "c-next")
    after = chunks_of("guides/release.md")
    assert not {c.content_hash for c in before} & {c.content_hash for c in after}


def test_a_long_paragraph_is_split_into_linked_parts_within_the_budget() -> None:
    para = " ".join(f"Step {i} of the failover moves replica {i} to the standby region and waits." for i in range(60))
    chunks = chunks_of("failover.md", f"# Failover\n\n{para}\n".encode(), max_tokens=120, overlap_tokens=16)
    assert len(chunks) >= 4 and all(estimate_tokens(c.text) <= 120 for c in chunks)
    assert [c.meta["part"] for c in chunks] == list(range(1, len(chunks) + 1))
    for a, b in itertools.pairwise(chunks):
        assert a.meta["next"] == b.id and b.meta["prev"] == a.id
    assert "Step 0 of" in chunks[0].text and "Step 59 of" in chunks[-1].text
