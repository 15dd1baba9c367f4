"""An insufficient-evidence report names only sources the caller read something from (review finding 6).

A source's default ACL may admit a caller while per-document rules deny it
every document; naming that source (and its owner) would tell the caller
what it cannot read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.acl import Principal
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

RELEASE = "Releases are cut every Tuesday from the main branch after the code freeze ends."
SALARY = "Salary bands for staff engineers are reviewed each March by the compensation committee."
UNANSWERABLE = "Which quantum entanglement protocol does the zeppelin hangar use?"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Services]:
    public, narrowed = tmp_path / "public", tmp_path / "narrowed"
    public.mkdir()
    narrowed.mkdir()
    (public / "release.md").write_text(f"# Releases\n\n{RELEASE}\n")
    (narrowed / "salaries.md").write_text(f"# Compensation\n\n{SALARY}\n")
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    svc.registry.add_source("docs", kind="folder", location=str(public), owner="docs-team", kb="default")
    # Public by default, but a rule narrows every document to hr
    svc.registry.add_source("comp", kind="folder", location=str(narrowed), owner="comp-lead", kb="default",
                            setup=SourceSetup(acl_rules=[{"glob": "*", "groups": ["hr"]}]))
    for source in ("docs", "comp"):
        assert sync_inline(svc, source).build_status == "built"
    try:
        yield svc
    finally:
        svc.close()


def test_a_source_whose_every_document_is_denied_is_not_named(world: Services) -> None:
    packet = world.client.retrieve(UNANSWERABLE, kb="default")
    assert packet.insufficient and packet.search is not None
    assert packet.search.sources == ("docs",)
    body = json.dumps(packet.as_dict())
    assert "comp" not in body and "comp-lead" not in body and "comp-lead" not in packet.rendered
    # while a reader of its documents is pointed at it
    hr = world.client.retrieve(SALARY, kb="default", principal=Principal.of("hana", ["hr"]))
    assert hr.search is not None and "comp" in hr.search.sources


def test_a_caller_who_reads_nothing_is_told_no_source(world: Services) -> None:
    stranger = Principal(id="mallory", groups=frozenset({"nobody"}), tenant="elsewhere")
    packet = world.client.retrieve(SALARY, kb="default", principal=stranger)
    assert packet.insufficient and packet.search is not None
    assert packet.search.sources == () and packet.search.candidates == 0
    assert [(a.action, a.reason, a.source_id, a.owner) for a in packet.search.next_actions] == [
        ("ask_owner", "not_found", None, None)]
    body = json.dumps(packet.as_dict())
    for name in ("docs", "docs-team", "comp", "comp-lead"):
        assert f'"{name}"' not in body and name not in packet.rendered
