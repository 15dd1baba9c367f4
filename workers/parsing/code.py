"""Source files split by symbol.

* Python is read with :mod:`ast`: functions and classes, their methods,
  signatures (multi-line ones included) and docstrings.
* JavaScript, TypeScript (and TSX) and Go are read with tree-sitter:
  functions, classes and their methods, interfaces, type aliases, enums,
  arrow functions bound to a name, Go methods (``Type.Method``) and types.
* Other languages are split at top-level declarations recognised by
  pattern, which is exact for conventionally formatted code and degrades to
  one block for the file.

Each top-level symbol is one ``code`` block; a class carries its members
(``meta["members"]``) so the chunker can keep a small class whole and split
a large one by method.  Comments directly above a declaration belong to it.
A block's heading path is its qualified symbol name (``("Ledger.close",)``),
never the file path, so the text a chunk is embedded with does not change
when the file moves.  Every block says where it comes from: ``path``, ``symbol``,
``symbol_kind``, ``signature``, ``language``, ``lines`` and
``source_version`` (the git blob id of the file, the value
``git hash-object`` prints, so a chunk can be traced to a commit).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import re
import threading
import tokenize
from dataclasses import dataclass
from typing import Any

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block, BlockMeta, ParsedDocument, block_meta
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.decode import decode_text

VERSION = "code-5"  # code-3: a block's heading path is its symbol, not the file path
#: code-4: a Python signature ends at its colon (no comment below it); split parts name the symbol without
#: its parameters and cut by the words of a statement (workers.chunking.code), so code chunks re-embed once.
#: code-5: a Python signature keeps its string literals as written (``y=' )'``), and a split part names the
#: symbol, not a Go receiver of the same name (``func (s Send) Send(...)``).

LANGUAGES = {
    ".py": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".ts": "typescript",
    ".tsx": "typescript", ".jsx": "javascript", ".go": "go", ".rs": "rust", ".java": "java", ".rb": "ruby",
    ".sh": "shell", ".c": "c", ".h": "c", ".cpp": "cpp", ".hpp": "cpp", ".cs": "csharp", ".kt": "kotlin",
    ".sql": "sql", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml",
    # A project's tool configuration, read as written (the file is one block): tox.ini, setup.cfg.  Not .conf:
    # a server's configuration (redis.conf, nginx.conf) holds credentials more often than documentation.
    ".ini": "ini", ".cfg": "ini",
}

_DECL = re.compile(
    r"^(?:export\s+(?:default\s+)?)?(?:async\s+)?function\*?\s+(?P<js_fn>[\w$]+)"
    r"|^(?:export\s+(?:default\s+)?)?(?:abstract\s+)?class\s+(?P<cls>[\w$]+)"
    r"|^(?:export\s+)?(?:const|let)\s+(?P<arrow>[\w$]+)\s*=\s*(?:async\s*)?\([^)]*\)\s*=>"
    r"|^func\s+(?:\([^)]*\)\s*)?(?P<go_fn>\w+)"
    r"|^type\s+(?P<go_type>\w+)\s+(?:struct|interface)"
    r"|^(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?fn\s+(?P<rs_fn>\w+)"
    r"|^(?:pub\s+)?(?:struct|enum|trait)\s+(?P<rs_type>\w+)"
    r"|^impl(?:<[^>]*>)?\s+(?P<rs_impl>[\w:<>, ]+?)\s*\{"
    r"|^(?:public|private|protected)\s+(?:static\s+)?(?:final\s+)?(?:class|interface|enum)\s+(?P<java_cls>\w+)"
    r"|^def\s+(?P<rb_fn>[\w?!.]+)"
)
_TREE_SITTER = ("javascript", "typescript", "go")


def language_for(key: str) -> str | None:
    dot = key.rfind(".")
    return LANGUAGES.get(key[dot:].lower()) if dot >= 0 else None


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def parse_code(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    lang = language_for(key) or "text"
    blocks: list[Block] | None = None
    if lang == "python":
        blocks = _python_blocks(text, key)
    elif lang in _TREE_SITTER:
        grammar = "tsx" if key.lower().endswith(".tsx") else lang
        blocks = _tree_sitter_blocks(text, key, lang, grammar)
    if blocks is None:
        blocks = _pattern_blocks(text, key, lang)
    limits.check_blocks(len(blocks))
    version = f"git-blob:{git_blob_id(data)}"
    for b in blocks:
        b.meta["source_version"] = version
    return ParsedDocument(title=key, blocks=tuple(blocks), parser="code", parser_version=VERSION,
                          meta={"language": lang, "source_version": version})


@dataclass(frozen=True)
class _Symbol:
    """One symbol a code parser found: its name, kind and lines (1-based, inclusive), what it is declared as."""

    lang: str
    name: str
    kind: str
    start: int
    end: int
    signature: str | None = None
    doc: str | None = None
    members: list[dict] | None = None


def _block(key: str, lines: list[str], sym: _Symbol) -> Block:
    meta: dict[str, Any] = {"language": sym.lang, "symbol": sym.name, "symbol_kind": sym.kind,
                            "lines": [sym.start, sym.end], "path": key}
    if sym.signature:
        meta["signature"] = sym.signature
    if sym.doc:
        meta["docstring"] = sym.doc
    if sym.members:
        meta["members"] = sym.members
    return Block(BlockKind.CODE, "\n".join(lines[sym.start - 1 : sym.end]).rstrip(), (sym.name,),
                 meta=block_meta(meta))


def _module_block(key: str, lang: str, lines: list[str], covered: set[int], doc: str | None = None) -> Block | None:
    rest = [i for i in range(1, len(lines) + 1) if i not in covered and lines[i - 1].strip()]
    if not rest:
        return None
    meta: dict[str, Any] = {"language": lang, "symbol": "<module>", "symbol_kind": "module",
                            "lines": [rest[0], rest[-1]], "path": key}
    if doc:
        meta["docstring"] = doc
    return Block(BlockKind.CODE, "\n".join(lines[i - 1] for i in rest), (), meta=block_meta(meta))


def _comments_above(lines: list[str], start: int, markers: tuple[str, ...]) -> int:
    while start > 1 and lines[start - 2].strip().startswith(markers):
        start -= 1
    return start


# -- Python --------------------------------------------------------------------


#: CPython 3.11 keeps the AST constructor's recursion depth in process-wide state, so two threads
#: building trees at once (parse-ahead threads, a thread-pool worker) can fail a valid file with
#: "SystemError: AST constructor recursion depth mismatch" (python/cpython gh-106905): one tree at a time.
_AST_LOCK = threading.Lock()


def _python_blocks(text: str, key: str) -> list[Block] | None:
    try:
        with _AST_LOCK:
            tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    lines = text.splitlines()
    blocks: list[Block] = []
    covered: set[int] = set()

    def first_line(node: ast.stmt) -> int:
        decos = node.decorator_list if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) else []
        return min([node.lineno] + [d.lineno for d in decos])

    def signature(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
        found = _python_header(lines, node.lineno, node.body[0].lineno if node.body else node.lineno)
        if found is not None:
            return found
        body_start = node.body[0].lineno if node.body else node.lineno
        end = max(node.lineno, body_start - 1) if body_start > node.lineno else node.lineno
        head = " ".join(line.strip() for line in lines[node.lineno - 1 : end])
        if body_start == node.lineno:  # "def f(): return 1" on one line
            head = head.split(":", 1)[0] if node.body else head
        return re.sub(r"\s+", " ", head).rstrip(":").strip()

    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        start = _comments_above(lines, first_line(node), ("#",))
        end = node.end_lineno or node.lineno
        covered.update(range(start, end + 1))
        kind = "class" if isinstance(node, ast.ClassDef) else "function"
        members = []
        if isinstance(node, ast.ClassDef):
            for m in node.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members.append({
                        "symbol": f"{node.name}.{m.name}", "symbol_kind": "method", "signature": signature(m),
                        "lines": [_comments_above(lines, first_line(m), ("#",)), m.end_lineno or m.lineno],
                        **({"docstring": d} if (d := ast.get_docstring(m)) else {}),
                    })
        blocks.append(_block(key, lines, _Symbol("python", node.name, kind, start, end, signature(node),
                                                 ast.get_docstring(node), members)))
    module = _module_block(key, "python", lines, covered, ast.get_docstring(tree))
    if module is not None:
        blocks.insert(0, module)
    return blocks


def _python_header(lines: list[str], first: int, body_start: int) -> str | None:
    """The ``def``/``class`` header from line ``first`` to the colon that ends it, comments
    dropped (``def f(\\n    x,  # the x\\n):`` -> ``def f(x)``); None if it cannot be tokenized.

    Rebuilt from its tokens: a line break, continuation or run of blanks
    between two tokens becomes one space (none just inside brackets, and a
    trailing comma before a closing bracket goes), while every token, a
    string literal's inside included, stays as written (``y=' )'``).
    """
    source = "\n".join(lines[first - 1 : body_start]) + "\n"
    depth = 0
    out: list[str] = []
    prev: tokenize.TokenInfo | None = None
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in skip:
                continue
            if tok.type == tokenize.OP and tok.string == ":" and depth == 0:
                return "".join(out) if out else None
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
            if prev is not None:
                gap = tok.start != prev.end
                if tok.string in (")", "]") and prev.string == "," and gap:
                    out.pop()  # a trailing comma before a bracket that closes on its own line
                    gap = False
                if gap and prev.string not in ("(", "[") and tok.string not in (")", "]"):
                    out.append(" ")
            out.append(tok.string)
            prev = tok
    except (tokenize.TokenError, SyntaxError):
        return None
    return None


# -- tree-sitter: JavaScript, TypeScript, Go ---------------------------------------


@functools.lru_cache(maxsize=8)
def _parser(lang: str) -> Any:
    try:
        from tree_sitter import Language, Parser

        if lang == "javascript":
            import tree_sitter_javascript as javascript

            return Parser(Language(javascript.language()))
        if lang in ("typescript", "tsx"):
            import tree_sitter_typescript as typescript

            return Parser(Language(typescript.language_tsx() if lang == "tsx" else typescript.language_typescript()))
        if lang == "go":
            import tree_sitter_go as go

            return Parser(Language(go.language()))
    except ImportError:
        return None
    return None


_JS_KINDS = {
    "function_declaration": "function", "generator_function_declaration": "function",
    "class_declaration": "class", "abstract_class_declaration": "class", "interface_declaration": "interface",
    "type_alias_declaration": "type", "enum_declaration": "enum", "function_signature": "function",
}
_JS_MEMBERS = ("method_definition", "method_signature", "abstract_method_signature")
_FUNCTION_VALUES = ("arrow_function", "function_expression", "function", "generator_function", "class")


def _text_of(node: Any) -> str:
    return node.text.decode("utf-8", "replace")


def _signature_of(node: Any, source: bytes) -> str:
    body = node.child_by_field_name("body")
    end = body.start_byte if body is not None else node.end_byte
    head = source[node.start_byte : end].decode("utf-8", "replace")
    if body is None:
        head = head.split("\n", 1)[0]
    return re.sub(r"\s+", " ", head).strip().rstrip("{").strip().rstrip(";")


def _tree_sitter_blocks(text: str, key: str, lang: str, grammar: str) -> list[Block] | None:
    parser = _parser(grammar)
    if parser is None:
        return None
    source = text.encode("utf-8")
    tree = parser.parse(source)
    lines = text.splitlines()
    blocks: list[Block] = []
    covered: set[int] = set()
    marker = ("//", "/*", "*", "*/")
    for node in tree.root_node.named_children:
        found = _go_symbol(node, source) if lang == "go" else _js_symbol(node, source)
        if found is None:
            continue
        name, kind, decl, members = found
        for m in members:
            m_start = _comments_above(lines, m["lines"][0], marker)
            doc = _comment_text(lines[m_start - 1 : m["lines"][0] - 1])
            m["lines"][0] = m_start
            if doc:
                m["docstring"] = doc
        start = _comments_above(lines, node.start_point[0] + 1, marker)
        end = node.end_point[0] + 1
        covered.update(range(start, end + 1))
        doc = _comment_text(lines[start - 1 : node.start_point[0]])
        blocks.append(_block(key, lines, _Symbol(lang, name, kind, start, end, _signature_of(decl, source), doc,
                                                 members)))
    module = _module_block(key, lang, lines, covered)
    if module is not None:
        blocks.insert(0, module)
    return blocks


def _comment_text(lines: list[str]) -> str | None:
    words = [ln.strip().lstrip("/*").rstrip("*/").strip() for ln in lines]
    return " ".join(w for w in words if w) or None


def _js_symbol(node: Any, source: bytes) -> tuple[str, str, Any, list[dict]] | None:
    decl = node
    if node.type == "export_statement":
        decl = node.child_by_field_name("declaration") or next(
            (c for c in node.named_children if c.type in _JS_KINDS or c.type == "lexical_declaration"), None)
        if decl is None:
            return None
    if decl.type in _JS_KINDS:
        name_node = decl.child_by_field_name("name")
        if name_node is None:
            return None
        name = _text_of(name_node)
        members = []
        body = decl.child_by_field_name("body")
        if decl.type in ("class_declaration", "abstract_class_declaration") and body is not None:
            for m in body.named_children:
                if m.type in _JS_MEMBERS and (mn := m.child_by_field_name("name")) is not None:
                    members.append({"symbol": f"{name}.{_text_of(mn)}", "symbol_kind": "method",
                                    "signature": _signature_of(m, source),
                                    "lines": [m.start_point[0] + 1, m.end_point[0] + 1]})
        return name, _JS_KINDS[decl.type], decl, members
    if decl.type in ("lexical_declaration", "variable_declaration"):
        for d in decl.named_children:
            value = d.child_by_field_name("value")
            name_node = d.child_by_field_name("name")
            if value is not None and name_node is not None and value.type in _FUNCTION_VALUES:
                kind = "class" if value.type == "class" else "function"
                return _text_of(name_node), kind, decl, []
    return None


def _go_symbol(node: Any, source: bytes) -> tuple[str, str, Any, list[dict]] | None:
    if node.type == "function_declaration":
        name = node.child_by_field_name("name")
        return (_text_of(name), "function", node, []) if name is not None else None
    if node.type == "method_declaration":
        name = node.child_by_field_name("name")
        receiver = node.child_by_field_name("receiver")
        if name is None:
            return None
        owner = ""
        if receiver is not None:
            m = re.search(r"\*?\s*([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*\)$", _text_of(receiver))
            owner = m.group(1) if m else ""
        return (f"{owner}.{_text_of(name)}" if owner else _text_of(name)), "method", node, []
    if node.type == "type_declaration":
        specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias")]
        if len(specs) != 1:
            return None
        spec = specs[0]
        name = spec.child_by_field_name("name")
        type_node = spec.child_by_field_name("type")
        kind = {"struct_type": "struct", "interface_type": "interface"}.get(type_node.type if type_node else "", "type")
        return (_text_of(name), kind, node, []) if name is not None else None
    return None


# -- other languages -------------------------------------------------------------------


def _pattern_blocks(text: str, key: str, lang: str) -> list[Block]:
    lines = text.splitlines()
    starts: list[tuple[int, str, str]] = []
    for n, line in enumerate(lines, start=1):
        m = _DECL.match(line)
        if m:
            group = next(g for g, v in m.groupdict().items() if v)
            kind = "class" if group in ("cls", "go_type", "rs_type", "java_cls", "rs_impl") else "function"
            starts.append((n, m.group(group).strip(), kind))
    if not starts:
        return [Block(BlockKind.CODE, text.rstrip(), (), meta=BlockMeta(
            language=lang, symbol="<file>", path=key, symbol_kind="file", lines=[1, len(lines)]))]
    blocks: list[Block] = []
    bounds = [(_comments_above(lines, n, ("//", "#", "/*", "*", "///")), n, name, kind) for n, name, kind in starts]
    if bounds[0][0] > 1:
        pre = list(lines[: bounds[0][0] - 1])
        if any(line.strip() for line in pre):
            blocks.append(Block(BlockKind.CODE, "\n".join(pre).rstrip(), (),
                                meta=BlockMeta(language=lang, symbol="<module>", symbol_kind="module",
                                               lines=[1, bounds[0][0] - 1], path=key)))
    for idx, (start, decl, name, kind) in enumerate(bounds):
        end = bounds[idx + 1][0] - 1 if idx + 1 < len(bounds) else len(lines)
        while end > start and not lines[end - 1].strip():
            end -= 1
        blocks.append(_block(key, lines, _Symbol(lang, name, kind, start, end,
                                                 lines[decl - 1].strip().rstrip("{").strip())))
    return blocks
