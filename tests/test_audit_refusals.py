"""``freshindex audit refusals`` on a knowledge base whose refused questions are of two subjects.

A knowledge base of two sources (ops: deploying workers; billing: plans and
invoices) synced through the real pipeline (folder sources, SQLite registry,
Qdrant Edge, the hashing embedder); questions about SAML sign-on and about
Kubernetes, which no source covers, are refused by the real client and
recorded by the service's observer; the command runs in-process as a user
runs it (``CliRunner`` over the same data directory).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import text

from freshindex.api.app import create_app
from freshindex.cli import cli
from freshindex.services import ServiceObserver, Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

OPS = """# Deploying

## Rolling upgrades

Workers are upgraded one at a time. Drain a worker with `freshindex worker drain`, wait for its leases
to expire, then start the new version. The build queue keeps one writer per knowledge base.

## Backups

The registry database is backed up nightly. Restore it with the database's own tools before starting workers.
"""
BILLING = """# Plans and invoices

## Plans

The Team plan costs 199 a month and includes ten seats. The Enterprise plan is priced per seat.

## Invoices

Invoices are issued on the first day of each month and paid by card or bank transfer.
"""
SAML = ("How do I configure saml.entity_id for SAML single sign-on?",
        "Which SAML identity provider metadata does okta need?")
KUBERNETES = ("How many replicas does the kubernetes helm chart run?",
              "Which kubernetes namespace do the helm.values put workers in?")
ANSWERED = ("How much does the Team plan cost a month?", "How do I drain a worker during a rolling upgrade?")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory with the two sources synced and built (copied per test: each test records its own)."""
    root = tmp_path_factory.mktemp("refusals")
    for name, body in (("ops", OPS), ("billing", BILLING)):
        (root / name).mkdir()
        (root / name / "guide.md").write_text(body)
    svc = Services(load_settings(data_dir=root / "data", embedding={"provider": "hashing"}))
    try:
        for name in ("ops", "billing"):
            svc.registry.add_source(name, kind="folder", location=str(root / name), kb="default", owner="t")
            assert sync_inline(svc, name).build_status == "built"
    finally:
        svc.close()
    return root / "data"


def _services(built: Path, tmp_path: Path, **audit: Any) -> Services:
    data = tmp_path / "data"
    shutil.copytree(built, data)
    return Services(load_settings(data_dir=data, embedding={"provider": "hashing"}, audit=audit))


def _ask(svc: Services, questions: tuple[str, ...], *, refused: bool) -> None:
    for q in questions:
        assert svc.client.retrieve(q, kb="default").insufficient is refused, q


def _audit(data: Path, *args: str) -> Any:
    env = {"FRESHINDEX_DATA_DIR": str(data), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    result = CliRunner().invoke(cli, ["audit", "refusals", *args], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output) if "--json" in args else result.output


def _observer(svc: Services) -> ServiceObserver:
    [observer] = [o for o in svc.client.observer.observers if isinstance(o, ServiceObserver)]
    return observer


def test_refused_questions_of_two_subjects_group_by_term_and_source_without_the_questions(
        built: Path, tmp_path: Path) -> None:
    # Given two refused questions of each subject and two answered ones, with the default audit settings
    svc = _services(built, tmp_path)
    try:
        _ask(svc, SAML + KUBERNETES, refused=True)
        _ask(svc, ANSWERED, refused=False)
        rows = svc.registry.refusals("default")
    finally:
        svc.close()
    # Then only the refusals are recorded, and no question text is kept
    assert len(rows) == 4 and all(r.question is None for r in rows)
    # When the operator asks for the week's refusals by topic
    report = _audit(tmp_path / "data", "--kb", "default", "--since", "7d", "--json")
    # Then both subjects lead the terms, each refused twice, missing from the evidence both times
    assert report["refusals"] == 4 and report["with_question"] == 0 and not report["truncated"]
    top = {t["term"]: t for t in report["terms"][:2]}
    assert set(top) == {"saml", "kubernete"}, report["terms"]
    assert all((t["refusals"], t["missing"], t["example"]) == (2, 2, None) for t in top.values())
    assert top["kubernete"]["reasons"] == {"key_terms_missing": 2} and top["saml"]["reasons"] == {"no_evidence": 2}
    assert top["saml"]["sources"] == ["billing", "ops"]  # the sources searched, both readable
    assert {s["source"]: s["refusals"] for s in report["sources"]} == {"billing": 4, "ops": 4}
    assert report["reasons"] == {"key_terms_missing": 2, "no_evidence": 2}
    # and the human report says the same, one subject per line, with no example question
    human = _audit(tmp_path / "data", "--kb", "default", "--limit", "2")
    lines = human.splitlines()
    assert lines[0].startswith("default: 4 refusals since ") and "0 with the question kept" in lines[0]
    assert any(line.startswith("  saml  2 refused, missing in 2") for line in lines), human
    assert any(line.startswith("  kubernete  2 refused, missing in 2") for line in lines), human
    assert "e.g." not in human and "more terms (--limit)" in human


def test_questions_are_kept_when_the_audit_settings_allow_it_cut_to_their_bound(built: Path, tmp_path: Path) -> None:
    svc = _services(built, tmp_path, store_questions=True, question_max_chars=40)
    try:
        _ask(svc, SAML + KUBERNETES, refused=True)
    finally:
        svc.close()
    report = _audit(tmp_path / "data", "--kb", "default", "--json")
    examples = {t["term"]: t["example"] for t in report["terms"]}
    # Then each subject's example is its newest question, cut to 40 characters
    assert examples["saml"] == SAML[1][:40] and examples["kubernete"] == KUBERNETES[1][:40]
    assert report["with_question"] == 4
    assert f'e.g. "{SAML[1][:40]}"' in _audit(tmp_path / "data", "--kb", "default")


def test_a_question_refused_over_http_is_recorded_the_same_way(built: Path, tmp_path: Path) -> None:
    """``POST /v1/query`` (the query runs on a pool thread) records a refusal as the library does."""
    svc = _services(built, tmp_path, store_questions=True)
    try:
        key = svc.registry.create_api_key("bob", ["eng"]).key
        with TestClient(create_app(svc)) as http:
            r = http.post("/v1/query", json={"question": KUBERNETES[1]}, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200 and r.json()["insufficient_evidence"] is True
        [row] = svc.registry.refusals("default")
    finally:
        svc.close()
    # the key terms the evidence lacked, the identifier it names whole first, with the sources searched
    assert row.reason == "key_terms_missing" and row.missing[0] == "helm.values" and "kubernete" in row.missing
    assert row.sources == ("billing", "ops") and row.question == KUBERNETES[1] and row.snapshot_id


def test_a_failed_write_is_counted_and_the_refusal_still_goes_out(built: Path, tmp_path: Path) -> None:
    svc = _services(built, tmp_path)
    try:
        with svc.registry.engine.begin() as conn:  # the audit table is gone: every write fails
            conn.execute(text("DROP TABLE query_refusals"))
        packet = svc.client.retrieve(SAML[0], kb="default")
        assert packet.insufficient and packet.search is not None
        assert svc.metrics.value("freshindex_refusals_unrecorded_total") == 1
    finally:
        svc.close()


def test_refusals_past_the_retention_are_gone_at_the_next_refusal(built: Path, tmp_path: Path) -> None:
    svc = _services(built, tmp_path, refusals_retention_s=7 * 86400)
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    try:
        observer = _observer(svc)
        observer.clock = lambda: now
        _ask(svc, SAML[:1], refused=True)
        now += dt.timedelta(days=7)  # inside the interval: kept
        _ask(svc, KUBERNETES[:1], refused=True)
        assert len(svc.registry.refusals("default")) == 2
        now += dt.timedelta(seconds=1)  # past it, but this process deleted expired rows under an hour ago
        _ask(svc, KUBERNETES[1:], refused=True)
        assert len(svc.registry.refusals("default")) == 3
        now += dt.timedelta(hours=1)  # the next deletion is due: the first refusal goes
        _ask(svc, SAML[1:], refused=True)
        rows = svc.registry.refusals("default")
    finally:
        svc.close()
    assert len(rows) == 3 and rows[-1].at == dt.datetime(2026, 12, 8, tzinfo=dt.UTC)
    assert all("saml.entity_id" not in r.terms for r in rows)


def test_off_records_nothing_and_an_unknown_kb_is_one_line(built: Path, tmp_path: Path) -> None:
    svc = _services(built, tmp_path, record_refusals=False)
    try:
        _ask(svc, SAML, refused=True)
        assert svc.registry.refusals("default") == []
    finally:
        svc.close()
    env = {"FRESHINDEX_DATA_DIR": str(tmp_path / "data"), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    result = CliRunner().invoke(cli, ["audit", "refusals", "--kb", "nope"], env=env)
    assert result.exit_code == 1 and "no knowledge base 'nope'" in result.output
    assert _audit(tmp_path / "data", "--kb", "default").startswith("no refusals recorded for default since ")


def test_a_record_takes_the_decision_s_terms_and_falls_back_to_the_question_s_names() -> None:
    from freshindex.injection.refusal import RefusalReason, Signals
    from freshindex.injection.types import ContextPacket, SearchReport
    from freshindex.services import refusal_record

    at = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    packet = ContextPacket(SAML[0], "default", "default-v1", (), True, "insufficient evidence (weak_match): x", "",
                           search=SearchReport(kb="default", snapshot_id="default-v1", sources=("ops",)))
    # With the decision's signals: its missing terms first, then its other key terms; the question not kept
    sig = Signals(coverage=0.5, lexical=0.1, dense=0.2, terms=("saml", "configure", "entity"),
                  missing=("saml.entity_id",), key_terms=("saml", "saml.entity_id"))
    rec = refusal_record(packet, RefusalReason.WEAK_MATCH, sig, store_question=False, at=at)
    assert (rec.terms, rec.missing, rec.sources, rec.question) == \
        (("saml.entity_id", "saml"), ("saml.entity_id",), ("ops",), None)
    # Without signals (nothing admitted): the question's names, not its general-English words nor an
    # identifier's parts, every one missing; the reason read from the packet when none was heard
    rec = refusal_record(packet, None, None, store_question=True, at=at)
    assert "saml.entity_id" in rec.terms and "saml" in rec.terms and "entity" not in rec.terms
    assert "single" not in rec.terms and rec.missing == rec.terms
    assert rec.reason == "weak_match" and rec.question == SAML[0]
    # A budget refusal had evidence: nothing is said to be missing
    assert refusal_record(packet, RefusalReason.BUDGET, None, store_question=False, at=at).missing == ()
