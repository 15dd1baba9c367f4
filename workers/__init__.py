"""Celery workers and the pipeline steps they run.

``celery -A freshindex.workers worker`` works: the app is built on first access from the
process's settings (environment and optional ``FRESHINDEX_CONFIG`` file), not
at import time.  ``freshindex worker`` is the supported way to start one; it
checks the registry, vector store and broker before taking tasks.
"""

from __future__ import annotations

from typing import Any

_app: Any = None


def __getattr__(name: str) -> Any:
    global _app
    if name in ("app", "celery"):
        if _app is None:
            from freshindex.settings import load_settings
            from freshindex.workers.app import create_app

            _app = create_app(load_settings())
        return _app
    raise AttributeError(name)
