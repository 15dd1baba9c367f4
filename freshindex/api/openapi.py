"""The app's OpenAPI document (``freshindex api openapi``, committed as ``docs/openapi.json``).

Built by :func:`openapi_document` from :func:`api.app.create_app` over
default settings and services that refuse every use, so the document depends
on no running service.  It neither serves the document (FastAPI does, at
``/openapi.json``) nor declares the models it is made of (:mod:`api.schema`,
which does not import the app: this module sits above both).
"""

from __future__ import annotations

from typing import Any

from freshindex.api.app import create_app
from freshindex.settings import Settings


def openapi_document() -> dict[str, Any]:
    """The app's OpenAPI document, built from default settings (the document depends on none of them)."""
    return create_app(_SpecOnly(Settings.model_validate({}))).openapi()


class _SpecOnly:
    """Services for building the app only: settings, and nothing else may be reached."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"building the OpenAPI document must not reach services.{name}")


__all__ = ["openapi_document"]
