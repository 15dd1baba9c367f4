"""``/metrics`` carries the free space under the data folder: read from the real file system at each scrape.

The data dir is a real 16 MB tmpfs mounted by the test (root only: skipped
with the reason elsewhere), filled between two scrapes.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from freshindex.api.app import create_app
from freshindex.services import Services
from freshindex.settings import load_settings
from tests.vectorstore.tmpfs import fill, free, mounted

MiB = 1024 * 1024


def _gauge(text: str, name: str, folder: str) -> float:
    found = re.search(rf'^{name}\{{dir="{folder}"\}} (\S+)$', text, re.M)
    assert found, f"{name}{{dir={folder}}} not in /metrics"
    return float(found.group(1))


def test_free_space_under_the_data_dir_is_scraped_live(tmp_path: Path) -> None:
    with mounted(tmp_path / "data", "16m") as data:
        svc = Services(load_settings(data_dir=data, embedding={"provider": "hashing"}))
        try:
            with TestClient(create_app(svc)) as http:
                # Given an empty 16 MB tmpfs as the data dir (and the vector store under it)
                before = http.get("/metrics").text
                assert _gauge(before, "freshindex_disk_size_bytes", "data") == 16 * MiB
                assert _gauge(before, "freshindex_disk_size_bytes", "vectors") == 16 * MiB
                assert abs(_gauge(before, "freshindex_disk_free_bytes", "data") - free(data)) <= MiB
                # When it fills up
                fill(data)
                after = http.get("/metrics").text
                # Then the next scrape says so
                assert _gauge(after, "freshindex_disk_free_bytes", "data") < 64 * 1024
                assert _gauge(after, "freshindex_disk_free_bytes", "vectors") < 64 * 1024
        finally:
            svc.close()
