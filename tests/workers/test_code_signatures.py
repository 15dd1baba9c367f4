"""Code signatures as written: string literals untouched, the symbol's own name found (review finding 10)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from freshindex.workers import parsing
from freshindex.workers.chunking import Chunker
from freshindex.workers.chunking.code import short_signature
from freshindex.workers.parsing import Parsers
from freshindex.workers.parsing import code as code_parser


def _signature(source: str, symbol: str) -> str:
    parsed = Parsers().parse(source.encode(), "pkg/mod.py")
    for block in parsed.blocks:
        if block.meta.get("symbol") == symbol:
            return str(block.meta["signature"])
        for member in block.meta.get("members") or ():
            if member["symbol"] == symbol:
                return str(member["signature"])
    raise AssertionError(f"no {symbol} in {[b.meta.get('symbol') for b in parsed.blocks]}")


def test_string_defaults_keep_their_spaces_and_brackets() -> None:
    source = "def f(x=' )', y=\"[ a\",\n      z='a  b'):\n    return x\n"
    assert _signature(source, "f") == "def f(x=' )', y=\"[ a\", z='a  b')"


def test_layout_outside_literals_is_still_normalised() -> None:
    source = ("class K:\n    def m(self,\n          x,  # the x\n          ):\n        return 1\n\n"
              "def g(a, \\\n      b) -> 'A:B':  # trailing\n    pass\n")
    assert _signature(source, "K.m") == "def m(self, x)"
    assert _signature(source, "g") == "def g(a, b) -> 'A:B'"


_LITERAL = st.text(alphabet=" ()[]{},:ab#\\", max_size=12).map(lambda s: repr(s))


@settings(max_examples=150, deadline=None)
@given(_LITERAL, _LITERAL)
def test_any_string_default_survives_as_written(a: str, b: str) -> None:
    assert _signature(f"def f(x={a},\n      y={b}):\n    pass\n", "f") == f"def f(x={a}, y={b})"


def test_a_go_method_named_like_its_receiver_type_keeps_its_name() -> None:
    assert short_signature("func (s Send) Send(x int) error", "Send.Send") == "func (s Send) Send(...)"
    assert short_signature("func (s *Send[T]) Send(x T) error", "Send.Send") == "func (s *Send[T]) Send(...)"
    assert short_signature("def send(self, send=None)", "Session.send") == "def send(...)"
    assert short_signature("def f(x=f(1))", "f") == "def f(...)"
    assert short_signature("type Foo struct", "Foo") == "type Foo"


def test_the_continued_line_of_a_long_go_method_names_the_method() -> None:
    body = "\n".join(f"\tv{i} := s.lookup({i}) * {i}\n\ts.post(v{i}, \"rule {i}\")" for i in range(60))
    source = f"package send\n\ntype Send struct{{}}\n\nfunc (s Send) Send(x int) error {{\n{body}\n\treturn nil\n}}\n"
    chunks = Chunker(max_tokens=200).chunk("doc", Parsers().parse(source.encode(), "send/send.go"))
    continued = [c.text.split("\n", 1)[0] for c in chunks if "(continued)" in c.text.split("\n", 1)[0]]
    assert continued and all(line == "// func (s Send) Send(...) (continued)" for line in continued), continued


def test_the_parser_versions_moved_with_the_chunk_text() -> None:
    assert code_parser.VERSION == "code-5" and parsing.Parsers().version_for("send/send.go") == "code-5"
