"""The Celery entry point: ``celery -A freshindex.celery worker|beat|inspect ...``.

The app is built on first access to ``app`` (PEP 562), from the process's
settings (environment and optional ``FRESHINDEX_CONFIG`` file), not at import
time, and its tasks get their services from :class:`freshindex.services.Services`
(one per worker process, built after the fork).  ``freshindex worker`` and
``freshindex beat`` build the same app with :func:`build_app`; beat's
schedule is installed by the app factory, so plain ``celery beat`` needs no
extra step.  What it does not do: check the registry, vector store or broker
before taking tasks (``freshindex worker`` does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from freshindex.settings import Settings

if TYPE_CHECKING:
    from celery import Celery

_app: Any = None


def build_app(settings: Settings) -> Celery:
    """The Celery app for ``settings`` wired to this process's composition root."""
    from freshindex.services import Services
    from freshindex.workers.app import create_app

    return create_app(settings, services_factory=lambda: Services(settings))


def __getattr__(name: str) -> Any:
    global _app
    if name in ("app", "celery"):
        if _app is None:
            from freshindex.settings import load_settings

            _app = build_app(load_settings())
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["build_app"]  # and `app`, built on first access
