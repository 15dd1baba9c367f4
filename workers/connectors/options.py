"""The options a source takes, checked by a pydantic model per connector kind when the source is registered.

Every kind's model extends :class:`SourceOptions`, the options any source
takes whatever its kind (the planner's ``include``/``exclude`` patterns, the
ACL sources, the parsers' OCR options), and forbids any other key, so a
misspelt or ill-typed ``--option`` is a :class:`ConfigError` at ``sources
add`` naming it, not a setting silently ignored at the next sync.  Values
arrive as the CLI stores them (strings) or typed; the model converts
leniently (``"10"`` is an int, ``"true"`` a bool) only to check them.

What it does not do: store or apply the converted values (the registry keeps
the options as given; each connector, the planner and the parsers read their
own, with their own range checks), nor check options stored before this
check existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from freshindex.core.errors import ConfigError


class SourceOptions(BaseModel):
    """The options every source takes; a kind's model adds its own (a kind without any uses this one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    include: list[str] | None = Field(None, description="gitignore-style patterns of the keys that are documents")
    exclude: list[str] | None = Field(None, description="gitignore-style patterns of the keys skipped")
    acl_sources: str | None = Field(None, description="where document ACLs come from, comma-separated")
    ocr_psm: str | int | None = Field(None, description="tesseract page segmentation modes, tried in order")
    ocr_retry_confidence: float | None = Field(None, description="0-1: a reading under it tries the next mode")
    ocr_low_confidence: float | None = Field(None, description="0-100: words under it are flagged")
    ocr_page_floor: float | None = Field(None, description="0-1: pages read under it are warnings")
    ocr_language: str | None = Field(None, description="tesseract language(s), e.g. eng+deu")


def check_options(kind: str, model: type[BaseModel], options: Mapping[str, Any]) -> BaseModel:
    """``options`` read by ``model``; an unknown or ill-typed option is a :class:`ConfigError` naming each."""
    try:
        return model.model_validate(dict(options))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = ".".join(str(part) for part in err["loc"]) or "options"
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown option {name!r}")
            else:
                problems.append(f"option {name}={err.get('input')!r}: {err['msg']}")
        known = ", ".join(sorted(model.model_fields))
        raise ConfigError(f"a {kind} source: {'; '.join(problems)} (it takes: {known})") from None


__all__ = ["SourceOptions", "check_options"]
