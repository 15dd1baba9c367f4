"""A long symbol split into parts re-embeds only the parts an edit touches.

Given a Python function long enough to be cut into several parts, when its
parameter list changes, then only the first part (the one holding the
signature) gets a new content hash: the later parts' ``(continued)`` line
names the function without its parameters.  When a blank line is added or
removed anywhere in it, no content hash changes at all: whether a statement
ends a part depends on its words, not on the blank lines or the indentation
around them.  And a Python signature ends at its colon: a comment between the
header and the body is not part of it.
"""

from __future__ import annotations

from freshindex.workers.chunking import Chunker
from freshindex.workers.chunking.code import short_signature
from freshindex.workers.parsing import Parsers


def parts_of(source: str, symbol: str = "settle") -> list:
    chunks = Chunker(max_tokens=200).chunk("doc", Parsers().parse(source.encode(), "billing/ledger.py"))
    return [c for c in chunks if c.meta.get("symbol") == symbol]


def long_function(params: str = "ledger, rates, region") -> str:
    steps = []
    for i in range(36):
        steps.append(f"    # step {i}: apply the {('tax', 'fee', 'discount')[i % 3]} rule {i}\n"
                     f"    amount_{i} = ledger.lookup('{i}-{region_name(i)}') * rates.get({i}, 1)\n"
                     f"    ledger.post(amount_{i}, memo='rule {i}')")
        if i % 4 == 3:
            steps.append("")  # a blank line between logical steps
    body = "\n".join(steps)
    return f'def settle({params}):\n    """Settle one ledger."""\n    total = 0\n{body}\n    return total\n'


def region_name(i: int) -> str:
    return ("north", "south", "east", "west", "centre")[i % 5]


def test_an_edited_parameter_list_re_embeds_only_the_first_part() -> None:
    before = parts_of(long_function())
    after = parts_of(long_function("ledger, rates, region, *, dry_run=False, currency='EUR'"))
    assert len(before) >= 4 and len(after) == len(before)
    assert after[0].content_hash != before[0].content_hash
    assert [c.content_hash for c in after[1:]] == [c.content_hash for c in before[1:]]
    assert after[1].text.startswith("# def settle(...) (continued)\n")
    assert after[0].meta["signature"] == "def settle(ledger, rates, region, *, dry_run=False, currency='EUR')"


def test_adding_or_removing_a_blank_line_changes_no_part() -> None:
    source = long_function()
    lines = source.split("\n")
    hashes = [c.content_hash for c in parts_of(source)]
    assert len(hashes) >= 4
    blanks = [i for i, line in enumerate(lines) if not line.strip() and 0 < i < len(lines) - 1]
    assert len(blanks) >= 8
    for i in blanks:  # every blank line removed, one at a time
        edited = "\n".join(lines[:i] + lines[i + 1 :])
        assert [c.content_hash for c in parts_of(edited)] == hashes, f"removing line {i + 1}"
    code_lines = [i for i, line in enumerate(lines) if line.startswith("    ledger.post(")]
    for i in code_lines[::3]:  # a blank line added after a statement
        edited = "\n".join([*lines[: i + 1], "", *lines[i + 1 :]])
        assert [c.content_hash for c in parts_of(edited)] == hashes, f"adding a blank line after line {i + 1}"


def test_a_python_signature_ends_at_its_colon() -> None:
    source = (
        "class Request(\n    Base,  # the base class\n    Mixin,\n):\n    # what a request holds\n\n"
        "    def __init__(\n        self,\n        method=None,  # an HTTP verb\n        url=None,\n    ):\n\n"
        "        # Default empty dicts for dict params.\n        self.method = method\n        self.url = url\n"
    )
    parsed = Parsers().parse(source.encode(), "models.py")
    block = next(b for b in parsed.blocks if b.meta.get("symbol") == "Request")
    assert block.meta["signature"] == "class Request(Base, Mixin)"
    assert [m["signature"] for m in block.meta["members"]] == ["def __init__(self, method=None, url=None)"]


def test_the_short_signature_keeps_the_keyword_and_the_name() -> None:
    assert short_signature("def f(x, y=2) -> int", "f") == "def f(...)"
    assert short_signature("async def send(self, request, **kw)", "Session.send") == "async def send(...)"
    assert short_signature("func (l *Ledger) Close(ctx context.Context) error", "Ledger.Close") == \
        "func (l *Ledger) Close(...)"
    assert short_signature("export function pick<T>(xs: T[]): T", "pick") == "export function pick(...)"
    assert short_signature("class Ledger", "Ledger") == "class Ledger"
