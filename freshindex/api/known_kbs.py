"""Which knowledge bases a request may name: the registry's, cached; an unknown one is a 404 before it is counted.

Request input never becomes a metric label: a name the registry does not
know is refused (and counted under the endpoint, not the name) before any
per-kb metric sees it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from freshindex.api.services import ApiServices
from freshindex.core.errors import NotFoundError


class KnownKbs:
    """The registry's knowledge bases, re-read at most every ``ttl`` seconds for names found in it.

    A name not in the cached set triggers one re-read (rate limited to one
    per ``miss_interval``), so a knowledge base registered a moment ago is
    found without a restart. What it does not do: notice removals before the
    ttl expires (a removed kb answers "no snapshot yet" until then).
    """

    def __init__(self, load: Any, *, ttl: float = 30.0, miss_interval: float = 1.0) -> None:
        self._load, self._ttl, self._miss_interval = load, ttl, miss_interval
        self._names: frozenset[str] = frozenset()
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()

    def contains(self, kb: str) -> bool:
        now = time.monotonic()
        with self._lock:
            fresh = now - self._loaded_at < self._ttl
            if kb in self._names and fresh:
                return True
            if now - self._loaded_at < self._miss_interval:
                return kb in self._names
            self._names, self._loaded_at = frozenset(self._load()), now
            return kb in self._names


def kb_check(services: ApiServices, known: KnownKbs) -> Callable[[str, str], str]:
    """``require_kb(kb, endpoint)``: ``kb`` when ``known`` has it, else count ``endpoint`` and raise NotFoundError (404)."""

    def require_kb(kb: str, endpoint: str) -> str:
        if not known.contains(kb):
            services.metrics.unknown_kb_requests.labels(endpoint).inc()
            raise NotFoundError(f"unknown knowledge base {kb!r}")
        return kb

    return require_kb


__all__ = ["KnownKbs", "kb_check"]
