"""Source files split by symbol.

Python is read with :mod:`ast` (functions, classes and their methods, with
their docstrings).  Other languages are split at top-level declarations
recognised by pattern (function, class, struct, impl, method), which is
exact for conventionally formatted code and degrades to whole-file blocks.
"""

from __future__ import annotations

import ast
import re

from core.types import Block, ParsedDocument
from workers.parsing.decode import decode_text

VERSION = "code-1"

LANGUAGES = {
    ".py": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".ts": "typescript",
    ".tsx": "typescript", ".jsx": "javascript", ".go": "go", ".rs": "rust", ".java": "java", ".rb": "ruby",
    ".sh": "shell", ".c": "c", ".h": "c", ".cpp": "cpp", ".hpp": "cpp", ".cs": "csharp", ".kt": "kotlin",
    ".sql": "sql", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml",
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


def language_for(key: str) -> str | None:
    dot = key.rfind(".")
    return LANGUAGES.get(key[dot:].lower()) if dot >= 0 else None


def parse_code(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    lang = language_for(key) or "text"
    blocks = _python_blocks(text, key) if lang == "python" else None
    if blocks is None:
        blocks = _pattern_blocks(text, key, lang)
    return ParsedDocument(
        title=key, blocks=tuple(blocks), parser="code", parser_version=VERSION, meta={"language": lang}
    )


def _block(key: str, lang: str, symbol: str, kind: str, lines: list[str], start: int, end: int,
           signature: str | None = None, doc: str | None = None) -> Block:
    meta = {"language": lang, "symbol": symbol, "symbol_kind": kind, "lines": [start, end], "path": key}
    if signature:
        meta["signature"] = signature
    if doc:
        meta["docstring"] = doc
    return Block("code", "\n".join(lines[start - 1 : end]).rstrip(), (key, symbol), meta=meta)


def _python_blocks(text: str, key: str) -> list[Block] | None:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    lines = text.splitlines()
    blocks: list[Block] = []
    covered: set[int] = set()

    def first_line(node: ast.AST) -> int:
        decos = getattr(node, "decorator_list", [])
        return min([node.lineno] + [d.lineno for d in decos])

    def signature(node: ast.AST) -> str:
        return lines[node.lineno - 1].strip().rstrip(":")

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            start, end = first_line(node), node.end_lineno or node.lineno
            covered.update(range(start, end + 1))
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] \
                if isinstance(node, ast.ClassDef) else []
            if methods and end - start > 60:
                # A long class: its header, then one block per method.
                head_end = first_line(methods[0]) - 1
                blocks.append(_block(key, "python", node.name, kind, lines, start, head_end, signature(node),
                                     ast.get_docstring(node)))
                for m in methods:
                    m_start, m_end = first_line(m), m.end_lineno or m.lineno
                    blocks.append(_block(key, "python", f"{node.name}.{m.name}", "method", lines, m_start, m_end,
                                         signature(m), ast.get_docstring(m)))
            else:
                blocks.append(_block(key, "python", node.name, kind, lines, start, end, signature(node),
                                     ast.get_docstring(node)))
    module_lines = [i for i in range(1, len(lines) + 1) if i not in covered and lines[i - 1].strip()]
    if module_lines:
        text_lines = [lines[i - 1] for i in module_lines]
        meta = {"language": "python", "symbol": "<module>", "symbol_kind": "module",
                "lines": [module_lines[0], module_lines[-1]], "path": key}
        doc = ast.get_docstring(tree)
        if doc:
            meta["docstring"] = doc
        blocks.insert(0, Block("code", "\n".join(text_lines), (key, "<module>"), meta=meta))
    return blocks


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
        return [Block("code", text.rstrip(), (key,), meta={"language": lang, "symbol": "<file>", "path": key,
                                                          "lines": [1, len(lines)]})]
    blocks: list[Block] = []
    # Comments directly above a declaration belong to it.
    bounds = []
    for n, name, kind in starts:
        start = n
        while start > 1 and lines[start - 2].strip().startswith(("//", "#", "/*", "*", "///")):
            start -= 1
        bounds.append((start, n, name, kind))
    if bounds[0][0] > 1:
        pre = [line for line in lines[: bounds[0][0] - 1]]
        if any(line.strip() for line in pre):
            blocks.append(Block("code", "\n".join(pre).rstrip(), (key, "<module>"),
                                meta={"language": lang, "symbol": "<module>", "symbol_kind": "module",
                                      "lines": [1, bounds[0][0] - 1], "path": key}))
    for idx, (start, decl, name, kind) in enumerate(bounds):
        end = bounds[idx + 1][0] - 1 if idx + 1 < len(bounds) else len(lines)
        while end > start and not lines[end - 1].strip():
            end -= 1
        blocks.append(_block(key, lang, name, kind, lines, start, end, lines[decl - 1].strip().rstrip("{").strip()))
    return blocks
