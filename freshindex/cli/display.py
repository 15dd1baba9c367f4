"""How the CLI prints data it did not write: one escaping rule for every table and line.

Names, keys, titles and error details come from documents and sources, and a
file name may hold a newline, a carriage return or an ANSI escape.  Printed
raw, such a name splits a table row in two or rewrites the operator's
terminal.  :func:`printable` shows every control and other non-printable
character as a visible escape (``\\n``, ``\\t``, ``\\x1b``, ``\\u202e``);
:func:`escaped` applies it to every string in a report, and :func:`emit`
prints a report either as exact JSON (``--json``: never escaped beyond JSON's
own rules) or as text built from the escaped report.  What it does not do:
escape a backslash, so a literal ``\\n`` in a name prints the same as an
escaped newline; ``--json`` tells them apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every non-printable character shown as a visible escape."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def escaped(data: Any) -> Any:
    """``data`` with :func:`printable` applied to every string in it (dict keys included)."""
    if isinstance(data, str):
        return printable(data)
    if isinstance(data, dict):
        return {escaped(k): escaped(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [escaped(v) for v in data]
    return data


def emit(data: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    """Print ``data`` as JSON, or as ``human`` renders its escaped copy."""
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str, ensure_ascii=False))
    else:
        click.echo(human(escaped(data)))


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str], empty: str) -> str:
    """``rows`` as aligned columns (every cell escaped), or ``empty`` when there is none."""
    if not rows:
        return empty
    cells = [[("" if r.get(c) is None else printable(str(r.get(c)))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


__all__ = ["emit", "escaped", "printable", "table"]
