"""Sensitive documents are rechecked at the permission service before they are returned.

A real HTTP permission service (tests/acl/test_resolution.py's) decides a
confidential source's ACL at sync time; afterwards the service changes its
mind (a user leaves a group, a document is narrowed, the service goes
down) and the very next query follows it, through the real pipeline and
the query path, with each denial audited.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.acl import Principal
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.acl.test_resolution import _Service

TEXT = "The incident review for the March outage found the failover runbook was out of date."
QUESTION = "What did the incident review for the March outage find about the failover runbook?"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Services, _Service]]:
    service = _Service()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "review.md").write_text(f"# Incident review\n\n{TEXT}\n")
    service.acls["sec:review.md"] = {"groups": ["sre"], "sensitivity": "confidential"}
    service.members["ana"] = {"groups": ["sre"]}
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 acl={"service_url": service.url, "cache_ttl_s": 0, "recheck_ttl_s": 0}))
    svc.registry.add_source("sec", kind="folder", location=str(docs), owner="t", kb="default",
                            setup=SourceSetup(options={"acl_sources": "http"}))
    assert sync_inline(svc, "sec").build_status == "built"
    try:
        yield svc, service
    finally:
        svc.close()
        service.close()


def test_the_service_decides_again_at_query_time_and_fails_closed(world: tuple[Services, _Service]) -> None:
    svc, service = world
    ana = Principal.of("ana", ["sre"])
    # Given the sync took the document's ACL from the service
    assert [e.key for e in svc.client.retrieve(QUESTION, kb="default", principal=ana).evidence] == ["review.md"]
    assert svc.client.retrieve(QUESTION, kb="default", principal=Principal.of("bob", ["eng"])).insufficient
    # When ana leaves sre in the directory (her credential still claims it)
    service.members["ana"] = {"groups": []}
    # Then the next query denies it, and says so only in the audit trail
    packet = svc.client.retrieve(QUESTION, kb="default", principal=ana)
    assert packet.insufficient and packet.dropped == {} and packet.withheld == {"recheck": 1}
    assert svc.registry.denials()[0]["reason"] == "recheck"
    # When she is back but the service is down, it fails closed
    service.members["ana"] = {"groups": ["sre"]}
    assert svc.client.retrieve(QUESTION, kb="default", principal=ana).evidence
    service.close()
    packet = svc.client.retrieve(QUESTION, kb="default", principal=ana)
    assert packet.insufficient and packet.withheld == {"recheck_unavailable": 1}
    assert svc.metrics.value("freshindex_acl_denials_total", reason="recheck_unavailable") == 1


def test_the_recheck_cache_keys_on_the_scope(world: tuple[Services, _Service]) -> None:
    svc, service = world
    ana = Principal.of("ana", ["sre"])
    recheck = svc.sensitive_recheck
    recheck._ttl = 60.0  # a long cache for this test
    assert svc.client.retrieve(QUESTION, kb="default", principal=ana).evidence
    before = len(service.requests)
    assert svc.client.retrieve(QUESTION, kb="default", principal=ana).evidence
    assert len(service.requests) == before  # the same scope: answered from the cache
    # ana with another set of groups is another scope: asked again
    assert svc.client.retrieve(QUESTION, kb="default", principal=Principal.of("ana", ["sre", "eng"])).evidence
    assert len(service.requests) > before
    # and one without sre is denied by the registry's ACL before the service is even asked
    asked = len(service.requests)
    assert svc.client.retrieve(QUESTION, kb="default", principal=Principal.of("ana", [])).insufficient
    assert len(service.requests) == asked
