"""The registry contract: one class a registry backend subclasses to get every protocol's suite.

A subclass gives a database URL (:meth:`RegistryContract.registry_url`, and
:meth:`RegistryContract.drop_url` to clean up); the suite migrates it once
per class (:func:`open_migrated`) and shares that registry among its tests,
which keep apart by naming everything they create with
:meth:`RegistryContract.fresh`.  :class:`RegistryContract` is the sum of
the parts, each a class of its own module that states the guarantees of one
concern of :mod:`registry.protocols` and of the registry's other stores:

- the source catalog (here): sources round-trip and never move between
  knowledge bases;
- the run ledger, its lease, dispatch cursor and start markers, the attempt
  counter, source state and planned cursors (``registry_runs``);
- staging, chunk reads, the vector cache, document ACLs, twins and mirrors
  (``registry_chunks``);
- snapshot records, canaries, golden sets, archives, tombstone collection
  and stranded repair (``registry_snapshots``);
- locks and their fencing tokens, a pending build behind its lock, API keys
  (``registry_leases``): every TTL crossed on a clock the test moves;
- webhook deliveries and tickets, the refusal audit (``registry_intake``);
- freshness labels, policies, withdrawals past their expiry, pause
  (``registry_freshness``);
- batches of touched documents, many records read at once, attempts closed
  with the opening of the next and left to a run that took over
  (``registry_touches``).

What it does not check: migrations between versions (``tests/registry``),
query plans, performance, or the consumers' decisions over these records
(the reaper's, the builder's: their own tests).
"""

from __future__ import annotations

import pytest

from freshindex.core.enums import DocumentState
from freshindex.core.errors import ConfigError, NotFoundError
from freshindex.core.ids import document_id
from freshindex.registry import Registry
from freshindex.registry.records import SourceSetup
from freshindex.testing.registry_base import (
    ManualClock,
    RegistrySuite,
    add_source,
    build,
    draft,
    make_live,
    open_migrated,
    stage,
    sync,
)
from freshindex.testing.registry_chunks import DocumentAclContract, StagingContract, TwinContract, VectorCacheContract
from freshindex.testing.registry_freshness import FreshnessContract
from freshindex.testing.registry_intake import RefusalContract, WebhookContract
from freshindex.testing.registry_leases import ApiKeyContract, LocksContract
from freshindex.testing.registry_runs import AttemptsContract, RunLedgerContract, SourceStateContract
from freshindex.testing.registry_snapshots import (
    GoldenSetContract,
    SnapshotArchiveContract,
    SnapshotRecordsContract,
    StrandedRepairContract,
)
from freshindex.testing.registry_touches import TouchContract


class SourceCatalogContract(RegistrySuite):
    """:class:`registry.protocols.SourceCatalog`."""

    def test_a_source_round_trips_and_is_listed_by_its_knowledge_base(self, reg: Registry) -> None:
        kb = self.fresh("kb")
        reg.add_source(self.fresh("b"), kind="folder", location="/b", owner="team", kb=kb,
                       setup=SourceSetup(acl=["eng"], poll_interval_s=60))
        reg.add_source(self.fresh("a"), kind="http", location="https://x", owner="team", kb=kb,
                       setup=SourceSetup(options={"depth": 2}))
        got = reg.get_source(self.fresh("b"))
        assert (got.kind, got.location, got.acl, got.poll_interval_s, got.kb) == ("folder", "/b", ("eng",), 60, kb)
        assert reg.get_source(self.fresh("a")).options == {"depth": 2}
        assert [s.id for s in reg.list_sources(kb)] == [self.fresh("a"), self.fresh("b")]
        assert kb in reg.knowledge_bases()

    def test_a_duplicate_is_refused_unless_replaced_and_a_source_never_moves(self, reg: Registry) -> None:
        sid, kb = self.fresh("docs"), self.fresh("kb")
        reg.add_source(sid, kind="folder", location="/one", owner="team", kb=kb)
        with pytest.raises(ConfigError, match="already exists"):
            reg.add_source(sid, kind="folder", location="/two", owner="team", kb=kb)
        assert reg.add_source(sid, kind="folder", location="/two", owner="team", kb=kb, replace=True).location == "/two"
        with pytest.raises(ConfigError, match="cannot move"):
            reg.add_source(sid, kind="folder", location="/two", owner="team", kb=self.fresh("other"), replace=True)

    def test_unknown_and_invalid_ids(self, reg: Registry) -> None:
        with pytest.raises(NotFoundError):
            reg.get_source(self.fresh("nope"))
        assert reg.get_document(self.fresh("nope")) is None
        assert reg.documents_for_source(self.fresh("nope")) == {}
        with pytest.raises(ConfigError):
            reg.add_source("../evil", kind="folder", location="/", owner="x", kb=self.fresh("kb"))
        with pytest.raises(ConfigError):
            reg.add_source(self.fresh("ok"), kind="folder", location="/", owner="x", kb="Not A Name")

    def test_staged_documents_appear_with_their_live_chunks(self, reg: Registry) -> None:
        source = self.source(reg)
        run, cs = reg.start_sync_run(source.id, "test")
        doc, chunks = stage(reg, run, cs, source, "a.md", ["one", "two"])
        assert set(reg.documents_for_source(source.id)) == {"a.md"}
        state = reg.get_document(doc)
        assert state is not None and (state.key, state.state, state.version) == ("a.md", DocumentState.ACTIVE, 1)
        assert reg.live_chunk_ids(doc) == chunks
        assert document_id(source.id, "a.md") == doc


class RegistryContract(
    SourceCatalogContract,
    RunLedgerContract,
    AttemptsContract,
    SourceStateContract,
    StagingContract,
    VectorCacheContract,
    DocumentAclContract,
    TwinContract,
    SnapshotRecordsContract,
    GoldenSetContract,
    SnapshotArchiveContract,
    StrandedRepairContract,
    LocksContract,
    ApiKeyContract,
    WebhookContract,
    RefusalContract,
    FreshnessContract,
    TouchContract,
):
    """Subclass as ``TestMyBackend(RegistryContract)`` and implement :meth:`registry_url` (and :meth:`drop_url`)."""


__all__ = ["ManualClock", "RegistryContract", "SourceCatalogContract", "add_source", "build", "draft", "make_live",
           "open_migrated", "stage", "sync"]
