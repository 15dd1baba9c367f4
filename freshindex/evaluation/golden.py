"""The golden set format: one JSON object a line, each a question with what a good answer must cite.

A line is a question (``docs/golden.schema.json``; ``docs/eval.md``)::

    {"id": "q1", "question": "...", "expected": "guide/install.md",
     "required_passage": "pip install freshindex", "principal": {"id": "ann", "groups": ["eng"]},
     "as_of": "docs-v3", "answer": "must_answer", "tags": ["install"]}

``expected`` is a document key, or ``{"source", "key"}`` (or ``{"id"}``, a canonical document id), with an
optional ``page`` (a PDF page), ``anchor`` or ``commit``.  A line ``{"thresholds": {...}}`` (anywhere; the
last wins) sets the set's gates (``min_hit``, ``min_passage``, ``min_mrr``, ``min_refusal_precision``,
``min_refusal_recall``, ``min_pass``).  The repository's benchmark goldens (``bench/goldens/*``) load as
they are: ``page`` -> ``expected`` (a ``<file>.pdf#page=N`` page -> key and page), ``passage`` ->
``required_passage``, ``kind`` ``unanswerable`` -> ``must_refuse`` (any other kind: ``must_answer``),
``kind`` and ``split`` -> tags.  What this module does not do: check that an expected document exists
(the evaluator does, as the verdict ``not_synced``) or read anything but the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from freshindex.core.errors import ConfigError

__all__ = ["ANSWERS", "Expected", "GoldenQuestion", "GoldenSet", "Thresholds", "load_golden", "parse_golden"]

#: What a question allows: an answer only, either, or a refusal only.
ANSWERS = ("must_answer", "may_refuse", "must_refuse")


@dataclass(frozen=True)
class Expected:
    """The document a good answer cites: ``key`` (a path, a URL, an S3 key), optionally in ``source``.

    ``document_id``: a canonical document id instead of a key.  ``page``: the PDF page the passage is on.
    ``anchor``: the citation anchor; ``commit``: the revision the answer must come from (a git source).
    """

    key: str | None = None
    source: str | None = None
    document_id: str | None = None
    page: int | None = None
    anchor: str | None = None
    commit: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class GoldenQuestion:
    """One question of a golden set (see the module docstring for the fields' meaning)."""

    id: str
    question: str
    expected: Expected | None = None
    required_passage: str | None = None
    principal: Mapping[str, Any] = field(default_factory=dict)
    as_of: str | None = None
    answer: str = "must_answer"
    tags: tuple[str, ...] = ()

    @property
    def answerable(self) -> bool:
        return self.answer != "must_refuse"


@dataclass(frozen=True)
class Thresholds:
    """The gates of a run: each a minimum ratio in [0, 1]; None is not checked."""

    min_hit: float | None = None
    min_passage: float | None = None
    min_mrr: float | None = None
    min_refusal_precision: float | None = None
    min_refusal_recall: float | None = None
    min_pass: float | None = None

    def merged(self, other: Thresholds) -> Thresholds:
        """These thresholds with every one ``other`` sets replacing ours (the command line over the file)."""
        return Thresholds(**{f.name: getattr(other, f.name) if getattr(other, f.name) is not None
                             else getattr(self, f.name) for f in fields(self)})

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def of(cls, data: Mapping[str, Any], where: str = "thresholds") -> Thresholds:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"{where}: unknown thresholds {unknown}; known: {sorted(names)}")
        out: dict[str, float] = {}
        for name, value in data.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ConfigError(f"{where}: {name} must be a number in [0, 1], not {value!r}")
            out[name] = float(value)
        return cls(**out)


@dataclass(frozen=True)
class GoldenSet:
    """The questions of a file and the thresholds its header set."""

    questions: tuple[GoldenQuestion, ...]
    thresholds: Thresholds = field(default_factory=Thresholds)
    name: str = ""


def _expected(value: Any, where: str) -> Expected | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _page_key(value)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected is a document key or an object, not {type(value).__name__}")
    unknown = sorted(set(value) - {"key", "source", "id", "page", "anchor", "commit"})
    if unknown:
        raise ConfigError(f"{where}: expected has unknown fields {unknown}")
    if not value.get("key") and not value.get("id"):
        raise ConfigError(f"{where}: expected needs a key (or a canonical id)")
    page = value.get("page")
    if page is not None and (isinstance(page, bool) or not isinstance(page, int) or page < 1):
        raise ConfigError(f"{where}: expected.page must be a page number from 1")
    base = _page_key(str(value["key"])) if value.get("key") else Expected()
    return Expected(key=base.key, source=value.get("source"), document_id=value.get("id"),
                    page=page if page is not None else base.page, anchor=value.get("anchor"),
                    commit=value.get("commit"))


def _page_key(page: str) -> Expected:
    """A key, or a bench ``<file>.pdf#page=N`` page id as key and page."""
    name, sep, n = page.partition("#page=")
    if sep and n.isdigit():
        return Expected(key=name, page=int(n))
    return Expected(key=page)


def _answer(raw: Mapping[str, Any], where: str) -> str:
    answer = raw.get("answer")
    if answer is None:  # a bench golden: its kind says whether it has an answer
        return "must_refuse" if raw.get("kind") == "unanswerable" else "must_answer"
    if answer not in ANSWERS:
        raise ConfigError(f"{where}: answer must be one of {', '.join(ANSWERS)}, not {answer!r}")
    return str(answer)


def _principal(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or set(value) - {"id", "groups", "tenant"}:
        raise ConfigError(f"{where}: principal is an object with id, groups and tenant")
    groups = value.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise ConfigError(f"{where}: principal.groups is a list of group names")
    return {"id": str(value.get("id") or "anonymous"), "groups": tuple(groups), "tenant": value.get("tenant")}


def question_of(raw: Mapping[str, Any], where: str) -> GoldenQuestion:
    """One line's object as a :class:`GoldenQuestion` (ConfigError naming ``where`` when it is not one)."""
    text = raw.get("question")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: question is required (a non-empty string)")
    answer = _answer(raw, where)
    expected = _expected(raw.get("expected", raw.get("page")), where)
    passage = raw.get("required_passage", raw.get("passage"))
    if answer == "must_answer" and expected is None:
        raise ConfigError(f"{where}: a must_answer question needs expected")
    tags = raw.get("tags")
    if tags is not None and (not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)):
        raise ConfigError(f"{where}: tags is a list of strings")
    bench_tags = [str(raw[k]) for k in ("kind", "split") if isinstance(raw.get(k), str)]
    as_of = raw.get("as_of")
    return GoldenQuestion(id=str(raw.get("id") or where), question=text, expected=expected,
                          required_passage=str(passage) if passage else None,
                          principal=_principal(raw.get("principal"), where),
                          as_of=str(as_of) if as_of is not None else None, answer=answer,
                          tags=tuple(dict.fromkeys([*(tags or []), *bench_tags])))


def parse_golden(lines: Iterable[str], name: str = "") -> GoldenSet:
    """The golden set in ``lines`` (JSONL: blank lines skipped); ConfigError naming the line of a bad one."""
    questions: list[GoldenQuestion] = []
    thresholds = Thresholds()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{name or 'golden'}:{n}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: each line is a JSON object")
        if "thresholds" in raw and "question" not in raw:
            if not isinstance(raw["thresholds"], dict):
                raise ConfigError(f"{where}: thresholds is an object")
            thresholds = Thresholds.of(raw["thresholds"], where)
            continue
        questions.append(question_of(raw, where))
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{name or 'golden'}: question ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return GoldenSet(tuple(questions), thresholds, name)


def load_golden(path: Path | str) -> GoldenSet:
    """The golden set of the JSONL file at ``path`` (ConfigError when it is missing or malformed)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read golden set {path}: {exc.strerror or exc}") from None
    return parse_golden(text.splitlines(), path.name)
