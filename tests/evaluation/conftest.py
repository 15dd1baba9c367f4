"""A generated knowledge base in which each verdict of ``freshindex eval`` happens for a real reason."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

#: Blocks holding this word are dropped by the knowledge base's parser (a parser that loses a block).
DROPPED_WORD = "zebra"

LONG = " ".join(f"Step {n} of the rollout checks the canary gauge number {n} before the next wave." for n in range(40))

DOCS = {
    "install.md": "# Install\n\nTo install freshindex run pip install freshindex on a machine with Python 3.11 or newer.\n",
    "removed.md": "# Retention\n\nAudit records of the billing ledger are kept for seven years.\n",
    "dropped.md": ("# Audits\n\nThe quarterly zebra audit happens every March in the west office.\n\n"
                   "Audits are announced two weeks ahead by the compliance team.\n"),
    "rollout.md": f"# Rollout\n\n{LONG}\n",
    "expired.md": ("---\nvalid_until: 2020-01-01\n---\n# Parking\n\n"
                   "Visitor parking permits are issued at the north gate reception desk.\n"),
    "v1/guide.md": "# Guide\n\nThe backup window opens at 02:00 UTC and lasts ninety minutes every night.\n",
    "v2/guide.md": ("# Guide\n\nThe backup window opens at 02:00 UTC and lasts ninety minutes every night, "
                    "weekends included.\n"),
}
SECRET = {"salaries.md": "# Salaries\n\nThe salary bands for engineering are reviewed every October by the board.\n"}


class DroppingParsers:
    """The real parsers, except that a block holding :data:`DROPPED_WORD` never reaches the chunker."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def for_source(self, options: Any) -> DroppingParsers:
        return DroppingParsers(self.real.for_source(options))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def parse(self, data: bytes, key: str, media_type: str | None = None) -> Any:
        doc = self.real.parse(data, key, media_type)
        return dataclasses.replace(doc, blocks=tuple(b for b in doc.blocks if DROPPED_WORD not in b.text))


@dataclasses.dataclass
class Kb:
    services: Services
    root: Path
    data: Path


def _write(root: Path, docs: dict[str, str]) -> None:
    for key, text in docs.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_text(text)


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kb]:
    """Two sources in kb ``docs`` (``wiki``: everyone; ``hr``: group ``hr`` only), synced; ``removed.md`` then
    deleted from ``wiki`` and synced again."""
    base = tmp_path_factory.mktemp("evalkb")
    wiki, hr = base / "wiki", base / "hr"
    _write(wiki, DOCS)
    _write(hr, SECRET)
    settings = load_settings(data_dir=base / "data", embedding={"provider": "hashing"},
                             sources={"chunk_tokens": 40, "chunk_overlap_tokens": 0})
    svc = Services(settings)
    svc.pipeline = dataclasses.replace(svc.pipeline, parsers=DroppingParsers(svc.pipeline.parsers))
    try:
        svc.registry.add_source("wiki", kind="folder", location=str(wiki), owner="t", kb="docs")
        svc.registry.add_source("hr", kind="folder", location=str(hr), owner="t", kb="docs",
                                setup=SourceSetup(acl=["hr"]))
        sync_inline(svc, "wiki")
        sync_inline(svc, "hr")
        (wiki / "removed.md").unlink()
        sync_inline(svc, "wiki")
        yield Kb(svc, wiki, base / "data")
    finally:
        svc.close()
        shutil.rmtree(base, ignore_errors=True)
