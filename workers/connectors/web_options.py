"""A web source's options and start URL, checked when the source is added and when it is crawled.

The crawl itself is :mod:`workers.connectors.web`; what each option bounds is
described there and in ``docs/configuration.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from limits import RateLimitItem, parse

from freshindex.core.errors import ConfigError


@dataclass(frozen=True)
class WebOptions:
    """How one web source is crawled: settings ``sources.web`` with the source's own ``--option`` values."""

    max_pages: int = 1000
    max_depth: int = 20
    max_total_bytes: int = 256 * 1024 * 1024
    max_page_bytes: int = 10 * 1024 * 1024
    concurrency: int = 4
    rate_limit: str = "10/second"
    timeout_s: float = 30.0
    user_agent: str = "freshindex-crawler/1"
    prefix: str | None = None
    directory_index: str = "index.html"
    sitemap: bool | None = None

    @classmethod
    def of(cls, defaults: Any, options: Mapping[str, Any], *, max_file_bytes: int | None = None) -> WebOptions:
        """Options from the settings block ``sources.web`` (or None) overridden by a source's string options.

        ``max_file_bytes`` (``sources.max_file_bytes``) caps ``max_page_bytes``."""
        base = cls()
        if defaults is not None:
            base = replace(base, **{f: getattr(defaults, f) for f in (
                "max_pages", "max_depth", "max_total_bytes", "max_page_bytes", "concurrency", "rate_limit",
                "timeout_s", "user_agent",
            )})
        kw: dict[str, Any] = {}
        ints = ("max_pages", "max_depth", "max_total_bytes", "max_page_bytes", "concurrency")
        for name, value in options.items():
            if name in ints:
                kw[name] = _int_option(name, value)
            elif name == "timeout_s":
                kw[name] = _float_option(name, value)
            elif name == "sitemap":
                kw[name] = str(value).strip().lower() in ("1", "true", "yes", "on")
            elif name in ("rate_limit", "user_agent", "prefix", "directory_index"):
                kw[name] = str(value)
        out = replace(base, **kw)
        if max_file_bytes is not None:
            out = replace(out, max_page_bytes=min(out.max_page_bytes, max_file_bytes))
        if out.max_pages < 1 or out.max_depth < 0 or out.max_total_bytes < 1 or out.max_page_bytes < 1:
            raise ConfigError("web source: max_pages, max_total_bytes and max_page_bytes must be positive, "
                              "max_depth not negative")
        if not 1 <= out.concurrency <= 64:
            raise ConfigError(f"web source: concurrency must be 1..64, got {out.concurrency}")
        out.rate_item()  # raises on a bad rate
        return out

    def rate_item(self) -> RateLimitItem:
        try:
            return parse(self.rate_limit)
        except ValueError as exc:
            raise ConfigError(f"web source: rate_limit {self.rate_limit!r} is not a rate such as "
                              "'10/second' or '1 per 2 seconds'") from exc


def _int_option(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"web source: option {name} must be a whole number, got {value!r}") from exc


def _float_option(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"web source: option {name} must be a number, got {value!r}") from exc


def check_start_url(location: str) -> str:
    """The start URL as stored: http(s) with a host, no credentials, no fragment; else :class:`ConfigError`."""
    parts = urlsplit(location.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"a web source's location must be an http:// or https:// URL, got {location!r}")
    if parts.username or parts.password:
        raise ConfigError("a web source's URL must not carry credentials")
    return urlunsplit((parts.scheme, parts.netloc.lower(), parts.path or "/", parts.query, ""))
