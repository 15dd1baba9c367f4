"""Contract of :class:`registry.protocols.SourceCatalog` (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from freshindex.core.enums import DocumentState
from freshindex.core.errors import ConfigError, NotFoundError
from freshindex.core.ids import document_id
from freshindex.registry import Registry
from freshindex.registry.protocols import SourceCatalog
from tests.registry.contract.helpers import add_source, stage


def test_a_source_round_trips_and_is_listed_by_its_knowledge_base(reg: SourceCatalog, fresh) -> None:
    kb = fresh("kb")
    reg.add_source(fresh("b"), kind="folder", location="/b", owner="team", kb=kb, acl=["eng"], poll_interval_s=60)
    reg.add_source(fresh("a"), kind="http", location="https://x", owner="team", kb=kb, options={"depth": 2})
    got = reg.get_source(fresh("b"))
    assert (got.kind, got.location, got.acl, got.poll_interval_s, got.kb) == ("folder", "/b", ("eng",), 60, kb)
    assert reg.get_source(fresh("a")).options == {"depth": 2}
    assert [s.id for s in reg.list_sources(kb)] == [fresh("a"), fresh("b")]
    assert kb in reg.knowledge_bases()


def test_a_duplicate_is_refused_unless_replaced_and_a_source_never_moves(reg: SourceCatalog, fresh) -> None:
    sid, kb = fresh("docs"), fresh("kb")
    reg.add_source(sid, kind="folder", location="/one", owner="team", kb=kb)
    with pytest.raises(ConfigError, match="already exists"):
        reg.add_source(sid, kind="folder", location="/two", owner="team", kb=kb)
    assert reg.add_source(sid, kind="folder", location="/two", owner="team", kb=kb, replace=True).location == "/two"
    with pytest.raises(ConfigError, match="cannot move"):
        reg.add_source(sid, kind="folder", location="/two", owner="team", kb=fresh("other"), replace=True)


def test_unknown_and_invalid_ids(reg: SourceCatalog, fresh) -> None:
    with pytest.raises(NotFoundError):
        reg.get_source(fresh("nope"))
    assert reg.get_document(fresh("nope")) is None
    assert reg.documents_for_source(fresh("nope")) == {}
    with pytest.raises(ConfigError):
        reg.add_source("../evil", kind="folder", location="/", owner="x", kb=fresh("kb"))
    with pytest.raises(ConfigError):
        reg.add_source(fresh("ok"), kind="folder", location="/", owner="x", kb="Not A Name")


def test_staged_documents_appear_with_their_live_chunks(reg: Registry, fresh) -> None:
    source = add_source(reg, fresh("docs"), fresh("kb"))
    run, cs = reg.start_sync_run(source.id, "test")
    doc, chunks = stage(reg, run, cs, source, "a.md", ["one", "two"])
    assert set(reg.documents_for_source(source.id)) == {"a.md"}
    state = reg.get_document(doc)
    assert state is not None and (state.key, state.state, state.version) == ("a.md", DocumentState.ACTIVE, 1)
    assert reg.live_chunk_ids(doc) == chunks
    assert document_id(source.id, "a.md") == doc
