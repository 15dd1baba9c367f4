"""Setting names no field takes: a misspelt ``FRESHINDEX_`` variable or config key is said, not ignored.

pydantic-settings ignores what it does not know (``extra="ignore"``), so
``FRESHINDEX_DATA_DIRR`` or ``FRESHINDEX_CONTEXT__REFUSAL_BIASS`` would
leave the default in force without a word.  :func:`check_unknown` walks the
environment, a ``.env`` file in the working directory and the TOML config
file against the models (nested names too: ``__`` between levels in
variables, tables in the file) and reports each unknown name with the
closest known one (:func:`difflib.get_close_matches`).  Reported, not
refused, unless strict (``--strict``, ``FRESHINDEX_STRICT=1``).

Names the project reads from the environment itself are not settings and
are never reported: :data:`DIRECT_ENV` and the :data:`DIRECT_ENV_PREFIXES`
of the test suite and the benchmarks.  A mapping field (``webhooks.secrets``,
``context.budgets``) takes any name below it.  What it does not check: the
values (the models do) and names without the ``FRESHINDEX_`` prefix.
"""

from __future__ import annotations

import difflib
import logging
import os
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from freshindex.core.errors import ConfigError

log = logging.getLogger("freshindex.settings")

PREFIX = "FRESHINDEX_"
#: Variables read with ``os.environ`` rather than through the models.
#: FRESHINDEX_URL and FRESHINDEX_TOKEN are a client's (`freshindex mcp`): the API to ask and the caller's own
#: credential, never a server setting.
DIRECT_ENV = frozenset({"FRESHINDEX_CONFIG", "FRESHINDEX_STRICT", "FRESHINDEX_URL", "FRESHINDEX_TOKEN"})
#: The test suite's (``FRESHINDEX_TEST_PG``, ...) and the benchmarks' (``FRESHINDEX_BENCH_CACHE``, ...) own.
DIRECT_ENV_PREFIXES = ("FRESHINDEX_TEST_", "FRESHINDEX_BENCH_")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class UnknownKey:
    """One name no setting takes, where it was found, and the closest known name (or None)."""

    name: str
    origin: str
    suggestion: str | None

    def message(self) -> str:
        hint = (f"did you mean {self.suggestion}?" if self.suggestion
                else "no known setting is close (`freshindex config show` lists them)")
        return f"unknown setting {self.name} ({self.origin}): {hint}"


def strict_from_env(environ: Mapping[str, str]) -> bool:
    """``FRESHINDEX_STRICT`` as a flag (1/true/yes/on, 0/false/no/off or unset); anything else is a ConfigError."""
    raw = environ.get("FRESHINDEX_STRICT", "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"FRESHINDEX_STRICT={raw!r} is not a flag: use 1 or 0")


def _unwrap(annotation: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _model_of(annotation: Any) -> type[BaseModel] | None:
    inner = _unwrap(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _is_mapping(annotation: Any) -> bool:
    inner = _unwrap(annotation)
    return inner is dict or typing.get_origin(inner) is dict


def is_known(model: type[BaseModel], parts: Sequence[str]) -> bool:
    """Whether the nested name ``parts`` (case-insensitive) is a setting of ``model`` or lies under a mapping."""
    fields = {name.lower(): f for name, f in model.model_fields.items()}
    field = fields.get(parts[0].lower()) if parts else None
    if field is None:
        return False
    if len(parts) == 1:
        return True
    sub = _model_of(field.annotation)
    if sub is not None:
        return is_known(sub, parts[1:])
    return _is_mapping(field.annotation)


def _paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        yield path
        sub = _model_of(field.annotation)
        if sub is not None:
            yield from _paths(sub, path)


def _closest(name: str, candidates: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def _env_unknown(model: type[BaseModel], environ: Mapping[str, str], origin: str) -> list[UnknownKey]:
    names = ["__".join(p).upper() for p in _paths(model)]  # compared without the prefix every name shares
    out = []
    for key in sorted(environ):
        upper = key.upper()
        if not upper.startswith(PREFIX) or upper in DIRECT_ENV or upper.startswith(DIRECT_ENV_PREFIXES):
            continue
        if not is_known(model, upper[len(PREFIX):].split("__")):
            close = _closest(upper[len(PREFIX):], names)
            out.append(UnknownKey(key, origin, PREFIX + close if close else None))
    return out


def _toml_unknown(model: type[BaseModel], data: Mapping[str, Any], origin: str,
                  prefix: tuple[str, ...] = ()) -> list[UnknownKey]:
    out = []
    fields = {name.lower(): f for name, f in model.model_fields.items()}
    for key, value in data.items():
        path = (*prefix, str(key))
        field = fields.get(str(key).lower())
        if field is None:
            names = [".".join(p) for p in _paths(model, prefix)]
            out.append(UnknownKey(".".join(path), origin, _closest(".".join(path), names)))
            continue
        sub = _model_of(field.annotation)
        if sub is not None and isinstance(value, Mapping):
            out += _toml_unknown(sub, value, origin, path)
    return out


def unknown_keys(model: type[BaseModel], *, environ: Mapping[str, str] | None = None,
                 config_file: Path | None = None, dotenv: Path | None = Path(".env")) -> list[UnknownKey]:
    """Every name in the environment, ``dotenv`` and ``config_file`` that ``model`` does not take."""
    environ = os.environ if environ is None else environ
    found = _env_unknown(model, environ, "environment")
    if dotenv is not None and dotenv.is_file():
        from dotenv import dotenv_values

        values = {k: v or "" for k, v in dotenv_values(dotenv).items()}
        found += _env_unknown(model, values, str(dotenv))
    if config_file is not None:
        import tomllib

        try:
            data = tomllib.loads(config_file.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {config_file}: {exc}") from exc
        found += _toml_unknown(model, data, str(config_file))
    return found


def check_unknown(model: type[BaseModel], *, config_file: Path | None = None, strict: bool | None = None,
                  report: Callable[[str], None] | None = None, environ: Mapping[str, str] | None = None) -> None:
    """Report each unknown name (``report``, default a log warning), or raise one ConfigError naming them if strict.

    ``strict`` None reads ``FRESHINDEX_STRICT``.
    """
    environ = os.environ if environ is None else environ
    if strict is None:
        strict = strict_from_env(environ)
    found = unknown_keys(model, environ=environ, config_file=config_file)
    if not found:
        return
    if strict:
        raise ConfigError("; ".join(u.message() for u in found) + " (strict: unknown settings are errors)")
    for u in found:
        if report is not None:
            report(u.message())
        else:
            log.warning(u.message(), extra={"event": "unknown_setting", "setting": u.name, "origin": u.origin,
                                            "suggestion": u.suggestion})


__all__ = ["DIRECT_ENV", "DIRECT_ENV_PREFIXES", "UnknownKey", "check_unknown", "is_known", "strict_from_env",
           "unknown_keys"]
