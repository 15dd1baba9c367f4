"""Conflicting sources: admitted evidence from different documents that states different values for one thing.

After assembly, each evidence item's text is read for a few explicit
statement shapes that bind a value to a named subject:

* ``timeout defaults to 30``; ``the default timeout is 30``; ``the default
  value of timeout is 30``; ``--timeout SECONDS (default: 30)``;
* ``MAX_SIZE = 5`` (an upper-case name of two characters or more: a
  setting or constant, not a variable of a code example; a value without
  spaces or ``$``, not a build example's flags);
* ``freshindex requires Python 3.10`` / ``requires version 3.10`` after a
  name (the subject is the name and what it requires).

Values are literals only: numbers (with the same unit or none), versions,
``True``/``False``/``None``, quoted strings.  A *conflict* is a subject the
question names, stated with different values by evidence from different
documents, each of which states one value for it (a document that states
two is describing a change, not disagreeing; nor does an older release of
a document beside the version to answer from,
``injection.duplicates.passed_over``).  The packet then carries
``conflicts``, its ``reason`` says ``conflicting``, its search report
``conflicting: true``, and the rendered block says inside its fence that
the sources disagree, citing each value's source: both are presented,
labelled; the answer is not refused.

What it does not guarantee: recall.  It is built for precision (a false
conflict hurts an answer more than a missed one): paraphrases, tables,
values in prose ("thirty seconds"), unit conversions and subjects the
question does not name are not compared.  It says nothing about which
value is right.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from freshindex.injection.duplicates import passed_over
from freshindex.injection.render import with_conflicts
from freshindex.injection.types import Conflict, ConflictValue, ContextPacket, Evidence
from freshindex.vectorstore.lexical import tokenize as lexical_tokens

#: At most this many conflicts per packet, this many values per conflict (the notice stays a few lines).
MAX_CONFLICTS = 3
MAX_VALUES = 4
#: Each evidence text is read up to this many characters.
MAX_CHARS = 20_000

#: A subject starts a word (one match start per word keeps a scan linear) and is at most 64 characters.
_SUBJ = (r"(?<![\w.\-`'\"])[`'\"]{0,2}(?P<subject>--?[A-Za-z][\w.\-]{0,63}|[A-Za-z_][\w.]{0,63})(?![\w.\-])"
         r"[`'\"]{0,2}")
_UNIT = r"(?:\s*(?:%|ms|s|sec|secs|seconds?|minutes?|hours?|days?|bytes|[KMG]i?B|kb|mb|gb))?"
_NUMBER = rf"-?\d+(?:\.\d+)?(?![\w.]*\d){_UNIT}"
_LITERAL = r"True|False|None|true|false|null"
_VALUE = rf"[`'\"]{{0,2}}(?P<value>\"[^\"\n]{{1,40}}\"|'[^'\n]{{1,40}}'|{_NUMBER}|(?:{_LITERAL})\b)`{{0,2}}"
_SETTING_VALUE = rf"(?P<value>\"[^\"\s$]{{1,40}}\"|'[^'\s$]{{1,40}}'|{_NUMBER}|(?:{_LITERAL})\b)"
_END = r"(?=\s*(?:$|[,;.:)\]]|\s(?!\s*[-+*/%]\s*\w)))"
_SHAPES = [
    re.compile(rf"{_SUBJ}\s+defaults\s+to\s+{_VALUE}{_END}", re.M),
    re.compile(rf"\b[Tt]he\s+default\s+(?:value\s+)?(?:of|for)\s+{_SUBJ}\s+is\s+{_VALUE}{_END}", re.M),
    re.compile(rf"\b[Tt]he\s+default\s+{_SUBJ}\s+is\s+{_VALUE}{_END}", re.M),
    re.compile(rf"{_SUBJ}(?:\s+[A-Z_]+)?\s*\(\s*default(?:s\s+to)?\s*[:=]?\s*{_VALUE}\s*\)", re.M),
    # A setting or constant: an upper-case name of two characters or more (``X = 5`` is a code example's
    # variable), a value without spaces or ``$`` (``CFLAGS="-g -O2"`` in a build example is not a setting).
    re.compile(rf"^[ \t]*(?P<subject>[A-Z][A-Z0-9_]+)\s*=\s*{_SETTING_VALUE}\s*(?:#.*)?$", re.M),
]
#: A word each shape needs (lower case): a text without it is not scanned for that shape.
_KEYWORDS = ("default", "default", "default", "default", "=")
_REQUIRES = re.compile(
    r"(?<![\w.\-])(?P<subject>[A-Za-z_][\w.\-]{0,63})(?![\w.\-])\s+requires?\s+(?:(?P<what>[A-Z][\w+\-]*|version)\s+)?(?:version\s+)?"
    r"(?:>=\s*|at\s+least\s+)?(?P<value>\d+(?:\.\d+)+)(?![\w.]*\d)")
#: Subjects too vague to bind a value to (a pronoun, the word "value"): no claim is read for them.
GENERIC = frozenset("""it this that which what there here each one value values default option options setting
settings parameter parameters argument arguments field fields attribute attributes feature function method module
class type key name number size also and or but then now only still always often which whose its they these those
he she we you user users version versions""".split())


_NUMERIC = re.compile(r"(-?\d+(?:\.\d+)?)\s*(\S*)")
_UNITS = {"sec": "s", "secs": "s", "second": "s", "seconds": "s", "minute": "min", "minutes": "min",
          "hour": "h", "hours": "h", "day": "d", "days": "d", "byte": "bytes"}


def _norm_value(raw: str) -> tuple[str, str | None]:
    """(a value in a comparable form, its unit for a number (``""`` for none), None for a literal).

    Numbers lose trailing zeros (``30.0`` is ``30``); unit spellings are unified (``seconds`` is ``s``);
    ``null`` is ``none``; quoted strings are compared as written.
    """
    v = raw.strip().strip("`")
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":  # 'fast' and "fast" are one string
        return '"' + v[1:-1] + '"', None
    m = _NUMERIC.fullmatch(v)
    if m is not None:
        number, unit = m.group(1), m.group(2).lower()
        if "." in number:
            number = number.rstrip("0").rstrip(".")
        return number, _UNITS.get(unit, unit)
    if v.lower() in ("true", "false", "none", "null"):
        return {"null": "none"}.get(v.lower(), v.lower()), None
    return v, None


def _comparable(a: tuple[str, str | None], b: tuple[str, str | None]) -> bool:
    """Whether two values can be said to differ: two numbers only in the same unit (or both without)."""
    return a[1] is None or b[1] is None or a[1] == b[1]


def claims(text: str) -> list[tuple[str, str, str]]:
    """(subject key, subject as written, value as written) for each statement shape found in ``text``."""
    out: list[tuple[str, str, str]] = []
    text = text[:MAX_CHARS]
    lowered = text.lower()
    for shape, word in zip(_SHAPES, _KEYWORDS, strict=True):
        if word not in lowered:  # most chunks state no default: skip the scan
            continue
        for m in shape.finditer(text):
            subject = m.group("subject").strip(".-`'\"") if not m.group("subject").startswith("--") else \
                m.group("subject").rstrip(".")
            if subject.lower().lstrip("-") in GENERIC or len(subject) < 1:
                continue
            out.append((subject.lower(), subject, m.group("value")))
    for m in _REQUIRES.finditer(text) if "requir" in lowered else ():
        subject = m.group("subject").strip(".-")
        if not subject or subject.lower() in GENERIC or subject.lower() in ("require", "requires"):
            continue
        what = m.group("what") or "version"
        out.append((f"{subject.lower()} requires {what.lower()}", f"{subject} requires {what}", m.group("value")))
    return out


def _named(subject_key: str, question_tokens: set[str]) -> bool:
    """Whether the question names the subject: every lexical token of its name is among the question's."""
    name = subject_key.split(" requires ")[0]
    tokens = set(lexical_tokens(name))
    return bool(tokens) and tokens <= question_tokens


def detect(question: str, evidence: Sequence[Evidence]) -> tuple[Conflict, ...]:
    """The subjects ``question`` names on which evidence from different documents states different values."""
    asked = set(lexical_tokens(question))
    # subject key -> document -> {normalised value: (value as written, first n)}; subject key -> as written
    stated: dict[str, dict[tuple[str, str], dict[tuple[str, str | None], tuple[str, int]]]] = {}
    written: dict[str, str] = {}
    # An older release of a document beside the one to answer from states what changed, not a second opinion.
    over = passed_over(question, [e.key for e in evidence])
    for e in sorted((e for e, o in zip(evidence, over, strict=True) if not o), key=lambda e: e.n):
        for key, subject, value in claims(e.text):
            if not _named(key, asked):
                continue
            written.setdefault(key, subject)
            by_doc = stated.setdefault(key, {}).setdefault((e.source_id, e.key), {})
            by_doc.setdefault(_norm_value(value), (value.strip("`"), e.n))
    out: list[Conflict] = []
    for key, docs in stated.items():
        # A document stating two values for one subject describes a change or a range: it takes no side.
        single = sorted(((doc, *next(iter(vals.items()))) for doc, vals in docs.items() if len(vals) == 1),
                        key=lambda row: row[2][1])
        disagree = {i for i, a in enumerate(single) for b in single
                    if a[0] != b[0] and a[1] != b[1] and _comparable(a[1], b[1])}
        if not disagree:
            continue
        values: list[ConflictValue] = []
        seen: set[tuple[str, str | None]] = set()
        for i, ((_source, doc_key), norm, (value, n)) in enumerate(single):
            if i not in disagree or norm in seen:
                continue  # the same value from another document is agreement: cited once
            seen.add(norm)
            values.append(ConflictValue(value, n, doc_key))
        out.append(Conflict(written[key], tuple(values[:MAX_VALUES])))
    out.sort(key=lambda c: (min(v.n for v in c.values), c.subject))
    return tuple(out[:MAX_CONFLICTS])


def mark_conflicts(packet: ContextPacket, *, deterministic: bool = False) -> ContextPacket:
    """``packet`` with its conflicts: listed, noted inside the rendered fence, ``reason``/``search`` ``conflicting``.

    An insufficient packet, or one whose sources agree, is returned as is.
    """
    if packet.insufficient or len(packet.evidence) < 2:
        return packet
    found = detect(packet.question, packet.evidence)
    if not found:
        return packet
    subjects = ", ".join(c.subject for c in found)
    search = replace(packet.search, conflicting=True) if packet.search is not None else None
    return replace(packet, conflicts=found, search=search,
                   reason=f"conflicting: the sources disagree on {subjects}; each value is cited",
                   rendered=with_conflicts(packet.rendered, found, deterministic=deterministic))
