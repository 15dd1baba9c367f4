"""The configuration reference, ``docs/configuration.md``, generated from the settings models.

:func:`render_reference` walks :class:`~freshindex.settings.model.Settings`
and writes one Markdown table per section: every field's environment
variable (``FRESHINDEX_SECTION__FIELD``), type, default and description,
in declaration order.  Secret fields (``SecretStr``) are marked
``(secret)`` and their defaults are never printed.  A mapping of models
(``context.budgets``) gets a table of its row fields and one of its default
rows.  ``freshindex config reference`` prints it; ``tests/test_docs.py``
fails when the committed file differs from what this renders, and when a
field has no description.

What it does not do: read the environment or a config file (the reference
is of the models, not of one deployment; ``freshindex config show`` prints
the effective values), or check that a description is true.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from freshindex.settings.model import CLUSTER_PRESETS, QdrantClusterSettings, Settings

PREFIX = "FRESHINDEX_"
#: The command that writes the committed file; the docs test names it when the file is stale.
COMMAND = "freshindex config reference > docs/configuration.md"

_INTRO = f"""\
<!-- Generated from the settings models by `{COMMAND}`. Do not edit: change a
field's description where it is declared (its section's model in settings/sections/,
the top-level fields in settings/model.py) and run the command again. -->

# Configuration reference

Every setting freshindex reads, one table per section (the section models live
in `settings/sections/`), in the order `Settings` (`settings/model.py`) lists
them. A setting is an environment variable (`FRESHINDEX_` prefix, `__`
between levels), a `.env` entry, or a key of the TOML file
named by `--config` (the section is the table: `[registry] url = "..."`).
Lists and mappings are JSON in a variable. Secrets are marked (secret):
they are never printed by `freshindex config show` or logged. How settings
are read, precedence and unknown names: [configuration-guide.md](configuration-guide.md).
"""


@dataclass(frozen=True)
class Row:
    """One setting: its dotted name, environment variable and pydantic field."""

    dotted: str
    env: str
    field: FieldInfo
    model: type[BaseModel]
    name: str


def _optional(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (annotation, False)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) < len(typing.get_args(annotation)) and len(args) == 1:
            return args[0], True
    return annotation, False


def is_secret(annotation: Any) -> bool:
    """True when the value (or a value of its list or mapping) is a ``SecretStr``."""
    inner, _ = _optional(annotation)
    if inner is SecretStr:
        return True
    return any(is_secret(a) for a in typing.get_args(inner))


def _model_of(annotation: Any) -> type[BaseModel] | None:
    inner, _ = _optional(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _mapped_model(annotation: Any) -> type[BaseModel] | None:
    """The row model of ``dict[str, Model]``, else None."""
    inner, _ = _optional(annotation)
    if typing.get_origin(inner) is dict:
        return _model_of(typing.get_args(inner)[1])
    return None


def render_type(annotation: Any) -> str:
    """A reader's name for a field's type: ``int``, ``one of `a`, `b```, ``JSON list of int``."""
    inner, optional = _optional(annotation)
    origin = typing.get_origin(inner)
    if origin is Literal:
        text = "one of " + ", ".join(f"`{v}`" for v in typing.get_args(inner))
    elif origin is list:
        text = f"JSON list of {render_type(typing.get_args(inner)[0])}"
    elif origin is dict:
        key, value = typing.get_args(inner)
        text = f"JSON object of {render_type(key)} -> {render_type(value)}"
    elif inner is SecretStr:
        text = "str"
    elif isinstance(inner, type) and issubclass(inner, Path):
        text = "path"
    elif isinstance(inner, type) and issubclass(inner, BaseModel):
        text = f"`{inner.__name__}`"
    elif isinstance(inner, type):
        text = inner.__name__
    else:
        text = str(inner)
    return f"{text}, optional" if optional else text


def default_of(field: FieldInfo) -> Any:
    """The field's default value (calling its factory), or PydanticUndefined when it has none."""
    if field.default_factory is not None:
        return field.default_factory()  # type: ignore[call-arg]
    return field.default


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    return value


def render_default(row: Row) -> str:
    """The default as a reader would write it: ``none``, ``true``, ``30.0``, ``["RS256","ES256"]``."""
    value = default_of(row.field)
    if value is PydanticUndefined:
        return "required"
    if value is None:
        if row.model is QdrantClusterSettings and row.name in CLUSTER_PRESETS["1m"]:
            return "the preset's"
        return "none"
    if is_secret(row.field.annotation):
        return "(secret)"
    if _mapped_model(row.field.annotation) is not None:
        return "the rows below"
    value = _plain(value)
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, list | dict):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value)
    return f"`{text}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def iter_rows(model: type[BaseModel] = Settings, env: str = PREFIX, dotted: str = "") -> Iterator[Row]:
    """Every leaf setting of ``model`` in declaration order, nested models expanded in place."""
    for name, field in model.model_fields.items():
        sub = _model_of(field.annotation)
        if sub is not None and not is_secret(field.annotation):
            yield from iter_rows(sub, f"{env}{name.upper()}__", f"{dotted}{name}.")
        else:
            yield Row(f"{dotted}{name}", f"{env}{name.upper()}", field, model, name)


def missing_descriptions() -> list[str]:
    """Dotted names of the settings (and mapped row fields) without a description; the docs test wants none."""
    missing = [row.dotted for row in iter_rows() if not (row.field.description or "").strip()]
    for row in iter_rows():
        mapped = _mapped_model(row.field.annotation)
        if mapped is not None:
            missing += [f"{row.dotted}.<key>.{name}" for name, f in mapped.model_fields.items()
                        if not (f.description or "").strip()]
    return missing


def _table(rows: list[Row]) -> list[str]:
    out = ["| variable | type | default | description |", "| --- | --- | --- | --- |"]
    for row in rows:
        kind = render_type(row.field.annotation) + (" (secret)" if is_secret(row.field.annotation) else "")
        out.append(f"| `{row.env}` | {_cell(kind)} | {_cell(render_default(row))} | "
                   f"{_cell(row.field.description or '')} |")
    return out


def _summary(model: type[BaseModel]) -> str:
    """The first paragraph of a model's docstring, on one line."""
    doc = (model.__doc__ or "").strip().split("\n\n", 1)[0].replace("``", "`")
    return " ".join(doc.split())


def _mapping_section(row: Row, mapped: type[BaseModel]) -> list[str]:
    env = f"{row.env}__<KEY>__"
    out = ["", f"### `{row.dotted}` rows", "",
           f"{_summary(mapped)} One variable per field of a row (`<KEY>` in capitals: `FACT`), or the whole "
           f"mapping as JSON in `{row.env}`.", "",
           "| variable | type | default | description |", "| --- | --- | --- | --- |"]
    for name, field in mapped.model_fields.items():
        sub = Row(f"{row.dotted}.<key>.{name}", f"{env}{name.upper()}", field, mapped, name)
        out.append(f"| `{sub.env}` | {_cell(render_type(field.annotation))} | {_cell(render_default(sub))} | "
                   f"{_cell(field.description or '')} |")
    defaults = _plain(default_of(row.field))
    if isinstance(defaults, dict) and defaults:
        names = list(mapped.model_fields)
        out += ["", "Defaults:", "", "| key | " + " | ".join(f"`{n}`" for n in names) + " |",
                "| --- |" + " --- |" * len(names)]
        for key, values in defaults.items():
            cells = ["none" if values.get(n) is None else str(values.get(n)) for n in names]
            out.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return out


def _presets() -> list[str]:
    names = list(CLUSTER_PRESETS["1m"])
    sizes = list(CLUSTER_PRESETS)
    out = ["", "Presets (`CLUSTER_PRESETS`):", "", "| field | " + " | ".join(f"`{s}`" for s in sizes) + " |",
           "| --- |" + " --- |" * len(sizes)]
    for name in names:
        cells = [json.dumps(CLUSTER_PRESETS[s][name]).strip('"') for s in sizes]
        out.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return out


def render_reference() -> str:
    """The whole reference as Markdown, deterministic (the same models give the same bytes)."""
    lines = [_INTRO.rstrip("\n")]
    groups: dict[str, list[Row]] = {}
    order: list[tuple[str, type[BaseModel]]] = [("", Settings)]
    for row in iter_rows():
        section = row.dotted.rpartition(".")[0]
        if section not in groups:
            groups[section] = []
            if section:
                order.append((section, row.model))
        groups[section].append(row)
    for section, model in order:
        depth = "##" if "." not in section else "###"
        title = f"`{section}`" if section else "Top level"
        lines += ["", f"{depth} {title}", ""]
        summary = _summary(model)
        if summary:
            lines += [summary, ""]
        lines += _table(groups[section])
        if model is QdrantClusterSettings:
            lines += _presets()
        for row in groups[section]:
            mapped = _mapped_model(row.field.annotation)
            if mapped is not None:
                lines += _mapping_section(row, mapped)
    return "\n".join(lines) + "\n"
