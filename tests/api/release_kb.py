"""One synced knowledge base of one release note, behind API keys (shared by the query-path API tests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

RELEASE = "Releases are cut every Tuesday from the main branch after the code freeze ends."


@contextmanager
def release_kb(tmp_path: Path, **settings: Any) -> Iterator[Services]:
    """Services over ``default`` holding ``RELEASE`` (source ``docs``, owner ``docs-team``), built."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "release.md").write_text(f"# Releases\n\n{RELEASE}\n")
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                      auth={"mode": "keys"}, **settings))
    try:
        services.registry.add_source("docs", kind="folder", location=str(docs), owner="docs-team", kb="default")
        assert sync_inline(services, "docs").build_status == "built"
        yield services
    finally:
        services.close()
