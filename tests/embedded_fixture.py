"""The embedded default with the hashing embedder as a fixture, for the test folders that use it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.services import Services
from freshindex.settings import load_settings


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    """The embedded default with the hashing embedder, closed after the test."""
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        yield services
    finally:
        services.close()
