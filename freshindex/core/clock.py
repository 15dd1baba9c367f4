"""Times read from outside the registry: the one rule that a naive time means UTC.

The registry's column type (``registry.schema.UTCDateTime``) applies the same
rule to every stored time, so registry records are aware already; this helper
is for what arrives from elsewhere (Qdrant payloads, HTTP headers, a CLI
argument, a caller's freshness record).
"""

from __future__ import annotations

import datetime as dt
from typing import overload


@overload
def as_utc(t: dt.datetime) -> dt.datetime: ...
@overload
def as_utc(t: None) -> None: ...
@overload
def as_utc(t: dt.datetime | None) -> dt.datetime | None: ...
def as_utc(t: dt.datetime | None) -> dt.datetime | None:
    """``t`` as an aware UTC datetime: a naive value is taken as UTC, an aware one converted; None stays None."""
    if t is None:
        return None
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


__all__ = ["as_utc"]
