"""Which listed keys of a source are documents: its ``--include`` / ``--exclude`` patterns.

Patterns have gitignore semantics (matched by :mod:`pathspec`'s
``GitIgnoreSpec``, the rules git itself applies): ``*.html`` matches at any
depth, ``/index.html`` only at the root, ``_static/`` a folder and
everything under it, ``**`` any number of folders, and ``!pattern`` takes a
key back.  A key is selected when it matches an include pattern (or the
source has none) and no exclude pattern.  They are applied once, by the
planner (:func:`workers.planner.plan_sync`), to the keys every connector
lists (folder, S3 and any later one), so no connector matches patterns of
its own.  A key left out is recorded as ``skipped`` with reason
``excluded``, never as an error; a document indexed before its key was
excluded is deleted like any other (the deletion guard counts it).

Stored in the source's options (``options["include"]``, ``options["exclude"]``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pathspec

from freshindex.core.errors import ConfigError

INCLUDE, EXCLUDE = "include", "exclude"


def _spec(patterns: Sequence[str], flag: str) -> pathspec.GitIgnoreSpec | None:
    if not patterns:
        return None
    try:
        return pathspec.GitIgnoreSpec.from_lines(patterns)
    except (ValueError, TypeError) as exc:  # pathspec's GitWildMatchPatternError is a ValueError
        raise ConfigError(f"invalid --{flag} pattern: {exc}") from exc


def check_patterns(patterns: Iterable[str], flag: str) -> list[str]:
    """The patterns as stored (stripped, blanks dropped); raises :class:`ConfigError` on one that cannot match."""
    out = [p.strip() for p in patterns if p and p.strip()]
    _spec(out, flag)
    return out


@dataclass(frozen=True)
class Selection:
    """A source's include and exclude patterns, compiled once per sync."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    _inc: Any = field(default=None, repr=False, compare=False)
    _exc: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, options: Mapping[str, Any] | None) -> Selection:
        opts = options or {}
        include, exclude = tuple(opts.get(INCLUDE) or ()), tuple(opts.get(EXCLUDE) or ())
        return cls(include, exclude, _spec(include, INCLUDE), _spec(exclude, EXCLUDE))

    @property
    def everything(self) -> bool:
        return not self.include and not self.exclude

    def why_excluded(self, key: str) -> str | None:
        """Why ``key`` is left out (the skip detail), or None when it is a document of the source."""
        if self._inc is not None and not self._inc.match_file(key):
            return "matches no --include pattern (" + ", ".join(repr(p) for p in self.include) + ")"
        if self._exc is not None:
            hit = self._exc.check_file(key)
            if hit.include:  # "include" in pathspec's terms: the exclude spec matched the key
                pattern = self.exclude[hit.index] if hit.index is not None and hit.index < len(self.exclude) else None
                return f"matches --exclude {pattern!r}" if pattern else "matches an --exclude pattern"
        return None


__all__ = ["EXCLUDE", "INCLUDE", "Selection", "check_patterns"]
