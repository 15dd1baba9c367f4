"""Query planning: exact identifiers searched lexically alone, fused after the question, never past the ACL.

Real pipeline (folder sources, SQLite registry, Qdrant Edge, the hashing
embedder): planning decides what is searched, the engine filter and the
registry recheck decide who may read it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from freshindex.acl import Principal
from freshindex.injection.planning import fuse, identifiers, plan
from freshindex.injection.types import ContextPacket
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.vectorstore.base import ScoredHit
from freshindex.workers.runner import sync_inline

ROTATION = ("# Key rotation\n\nSigning keys are rotated on a schedule. The rotation window is set by "
            "SECRET_ROTATION_DAYS in the vault settings; operators read it before a release.\n")
PUBLIC = ("# Operations\n\nKeys are rotated by the operations team on a schedule agreed with security. "
          "Ask the team when the next rotation of the signing keys is due.\n")


def _world(tmp_path: Path, **context: object) -> Services:
    public, vault = tmp_path / "public", tmp_path / "vault"
    public.mkdir()
    vault.mkdir()
    (public / "operations.md").write_text(PUBLIC)
    (vault / "rotation.md").write_text(ROTATION)
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}, context=context))
    svc.registry.add_source("docs", kind="folder", location=str(public), owner="ops@example.com", kb="default")
    svc.registry.add_source("vault", kind="folder", location=str(vault), owner="sec@example.com", kb="default",
                            setup=SourceSetup(acl=["security"]))
    for source in ("docs", "vault"):
        assert sync_inline(svc, source).build_status == "built"
    return svc


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Services]:
    svc = _world(tmp_path, query_planning=True)
    try:
        yield svc
    finally:
        svc.close()


def test_identifiers_are_found_in_their_shapes_and_prose_is_not() -> None:
    # Given questions naming identifiers of every shape, and one naming none
    q = "Does QuerySet.select_related() honour max_retries, HttpResponse, --no-input, DJANGO_SETTINGS_MODULE, `os.walk`?"
    # Then each shape is found once, whole, in order
    assert identifiers(q) == ("QuerySet.select_related", "max_retries", "HttpResponse", "--no-input",
                              "DJANGO_SETTINGS_MODULE", "os.walk")
    # and prose, abbreviations and version numbers are not identifiers (the version stays in the text)
    prose = plan("How do I deploy a site, e.g. on Django 4.0 or in 3.2?")
    assert [s.mode for s in prose.subqueries] == ["hybrid"]
    assert prose.versions == ("4.0", "3.2") and prose.subqueries[0].text.endswith("in 3.2?")


def test_fusion_puts_the_question_first_and_merges_by_chunk_id() -> None:
    # Given the question's hits and an identifier sub-query's (one shared, one only lexical)
    q = plan("What is SECRET_ROTATION_DAYS?")
    question = [ScoredHit("a", 0.5, {}, fused=0.03, lexical=2.0, lexical_rank=3), ScoredHit("b", 0.4, {}, fused=0.02)]
    lexical = [ScoredHit("c", 0.1, {}, fused=0.01, lexical=9.0, lexical_rank=1),
               ScoredHit("b", 0.4, {}, fused=0.02, lexical=8.0, lexical_rank=2)]
    fused = fuse(list(zip(q.subqueries, [question, lexical], strict=True)))
    # Then "b" (found by both) leads, "a" (the question's first) beats "c" (the identifiers' first), one hit per id
    assert [h.id for h in fused] == ["b", "a", "c"]
    # and the question's fields are kept; a lexical-only hit keeps its rank (admission) but not a BM25 score
    # computed for another query than the question (the refusal signals read it)
    by_id = {h.id: h for h in fused}
    assert (by_id["a"].lexical, by_id["a"].lexical_rank, by_id["b"].lexical) == (2.0, 3, None)
    assert (by_id["c"].lexical, by_id["c"].lexical_rank, by_id["c"].score) == (None, 1, 0.1)


def test_an_identifier_question_lists_its_lexical_subquery_and_a_plain_one_only_itself(world: Services) -> None:
    # Given a reader of the vault asking about a setting by its exact name
    reader = Principal.of("sec-reader", ["security"])
    packet = world.client.retrieve("What does SECRET_ROTATION_DAYS set?", kb="default", principal=reader)
    # Then the search report lists the question as asked and the identifier searched lexically alone
    assert packet.search is not None
    assert [(s.text, s.mode) for s in packet.search.subqueries] == [
        ("What does SECRET_ROTATION_DAYS set?", "hybrid"), ("SECRET_ROTATION_DAYS", "lexical")]
    assert packet.search.subqueries[1].hits >= 1
    assert any(e.key.endswith("rotation.md") for e in packet.evidence)
    # and it travels in the JSON a thin client reads
    again = ContextPacket.from_dict(packet.as_dict())
    assert again.search is not None and again.search.subqueries == packet.search.subqueries
    # When a question names no identifier, only the question is searched
    plain = world.client.retrieve("When are the signing keys rotated?", kb="default", principal=reader)
    assert plain.search is not None and [s.mode for s in plain.search.subqueries] == ["hybrid"]


def test_planning_never_returns_a_document_the_caller_may_not_read(world: Services) -> None:
    # Given a document only the security group may read, which matches the identifier exactly
    packet = world.client.retrieve("What does SECRET_ROTATION_DAYS set?", kb="default")
    # Then an anonymous caller gets nothing of it: not as evidence, not as a source, not in a count
    assert packet.search is not None
    assert all("rotation.md" not in e.key and "SECRET_ROTATION_DAYS" not in e.text for e in packet.evidence)
    assert "vault" not in packet.search.sources and "SECRET_ROTATION_DAYS" not in packet.rendered.replace(
        "What does SECRET_ROTATION_DAYS set?", "")
    # and its lexical sub-query counts one hit fewer than a vault reader's (the identifier's parts still
    # match the public page): the engine filter kept the vault out, the recheck had nothing to drop
    reader = world.client.retrieve("What does SECRET_ROTATION_DAYS set?", kb="default",
                                   principal=Principal.of("sec-reader", ["security"]))
    assert reader.search is not None
    [anonymous_lexical] = [s for s in packet.search.subqueries if s.mode == "lexical"]
    [reader_lexical] = [s for s in reader.search.subqueries if s.mode == "lexical"]
    assert anonymous_lexical.text == "SECRET_ROTATION_DAYS"
    assert anonymous_lexical.hits == reader_lexical.hits - 1
    assert packet.withheld.get("acl", 0) == 0


def test_planning_is_off_by_default(tmp_path: Path) -> None:
    # Given the default settings (planning is off: it cost a held-out passage@5, docs/architecture.md)
    svc = _world(tmp_path)
    try:
        packet = svc.client.retrieve("What does SECRET_ROTATION_DAYS set?", kb="default",
                                     principal=Principal.of("sec-reader", ["security"]))
    finally:
        svc.close()
    # Then only the question as asked is searched
    assert packet.search is not None
    assert [(s.text, s.mode) for s in packet.search.subqueries] == [("What does SECRET_ROTATION_DAYS set?", "hybrid")]
