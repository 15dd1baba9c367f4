"""What every part of the registry contract shares: the migrated registry, unique names, builders and a clock.

:func:`open_migrated` is the one way a test migrates, opens and closes a
registry (the contract's class fixture and ``tests/registry/contract``'s
module fixture both use it).  :class:`RegistrySuite` is the base of every
part of :class:`freshindex.testing.RegistryContract`: a subclass gives a
database URL, the suite migrates it once per class and shares it among the
tests, which keep apart by naming what they create with
:meth:`RegistrySuite.fresh`.  The builders (``add_source``, ``stage``,
``sync``, ``build``) write what a planner, a document task and the builder
would, with no connector, parser, model or vector store.  :class:`ManualClock`
stands in for the wall clock of the modules that read ``time.time()``
(leases with a TTL), so an interval is crossed without sleeping.

What it does not do: check anything by itself (the parts' ``test_*``
methods do), or clean rows between tests (names keep them apart).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from freshindex.core.enums import ChunkState, DocumentOutcomeKind
from freshindex.core.ids import chunk_point_id, document_id, sha256_hex
from freshindex.core.types import ChunkDraft
from freshindex.registry import DocumentOutcome, NewSnapshot, Registry, SnapshotInfo, SourceInfo, StagedDocument
from freshindex.registry import db as registry_db


@contextmanager
def open_migrated(url: str) -> Iterator[Registry]:
    """The registry at ``url``, migrated to head first, closed on exit (the database itself is left)."""
    engine = registry_db.make_engine(url)
    try:
        registry_db.upgrade(engine)
    finally:
        engine.dispose()
    registry = Registry.open(url, auto_migrate=False)
    try:
        yield registry
    finally:
        registry.close()


def draft(doc: str, n: int, text: str) -> ChunkDraft:
    h = sha256_hex(text)
    return ChunkDraft(id=chunk_point_id(doc, ("S", str(n)), h), ordinal=n, text=text, content_hash=h,
                      kind="paragraph", heading_path=("S",), anchor="s")


def add_source(reg: Registry, source_id: str, kb: str) -> SourceInfo:
    return reg.add_source(source_id, kind="folder", location="/kb", owner="team", kb=kb)


def staged(reg: Registry, source: SourceInfo, key: str, texts: list[str], *, acl: Any = None) -> StagedDocument:
    """``texts`` as the new version of document ``key``, diffed against its live chunks, as a task stages it."""
    doc = document_id(source.id, key)
    drafts = [draft(doc, i, t) for i, t in enumerate(texts)]
    new = {d.id for d in drafts}
    old = reg.live_chunk_ids(doc)
    return StagedDocument(
        source=source, document_id=doc, key=key, etag="e", size=1, content_hash=sha256_hex(*texts),
        title=key, parser="text", parser_version="v", chunks=drafts, added_ids=new - old, removed_ids=old - new,
        outcome=DocumentOutcome(document_id=doc, key=key, outcome=DocumentOutcomeKind.ADDED, chunks_added=len(new - old)),
        acl=acl,
    )


def stage(reg: Registry, run: int, cs: int, source: SourceInfo, key: str, texts: list[str], *,
          acl: Any = None) -> tuple[str, set[str]]:
    """Stage ``texts`` as the new version of document ``key``; returns (document id, chunk ids)."""
    d = staged(reg, source, key, texts, acl=acl)
    reg.stage_document(run, cs, d)
    return d.document_id, {c.id for c in d.chunks}


def sync(reg: Registry, source: SourceInfo, docs: dict[str, list[str]], *, delete: tuple[str, ...] = ()) -> int:
    """One finished run of ``source`` that staged ``docs`` and deleted the keys ``delete``; returns the run id."""
    run, cs = reg.start_sync_run(source.id, "test")
    for key, texts in docs.items():
        stage(reg, run, cs, source, key, texts)
    for key in delete:
        reg.stage_deletion(run, cs, reg.documents_for_source(source.id)[key].id)
    reg.finish_sync_run(run)
    return run


def build(reg: Registry, kb: str, *, lock: tuple[str, int] | None = None) -> tuple[SnapshotInfo, dict[str, str]]:
    """What the builder records: a snapshot over the staged changesets, verified and activated with their ops."""
    changesets = reg.staged_changesets(kb)
    ops = reg.changeset_ops(changesets)
    version = reg.next_snapshot_version(kb)
    active = reg.active_snapshot(kb)
    snap = reg.create_snapshot(NewSnapshot(
        snapshot_id=f"{kb}-v{version}", kb=kb, version=version, parent_id=active.id if active else None,
        collection=f"{kb}__v{version}", strategy="incremental", embedding_model="m", parser_version="p",
        changeset_ids=changesets, upserts=sum(op == "upsert" for op in ops.values()),
        deletes=sum(op == "delete" for op in ops.values()),
    ))
    reg.mark_verified(snap.id, point_count=len(ops), verification={"ok": True}, seconds=0.1)
    reg.activate_snapshot(snap.id, ops=ops, actor="test", reason="build", lock=lock)
    return reg.get_snapshot(snap.id), ops


def make_live(reg: Registry, ids: set[str]) -> None:
    """Mark chunks live, as a build's activation does, without a snapshot."""
    from sqlalchemy import update

    from freshindex.registry.schema import Chunk

    with reg.session() as s:
        s.execute(update(Chunk).where(Chunk.id.in_(sorted(ids))).values(state=ChunkState.LIVE))


class ManualClock:
    """A wall clock the test moves: ``time()`` is ``start`` plus what :meth:`advance` added.

    :meth:`install` puts it in place of the ``time`` module of the registry
    modules that read the wall clock (the leases' expiry); every other
    attribute of that module is the real one.
    """

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def utc(self) -> dt.datetime:
        """The same moment as an aware datetime (for the registry methods that take ``now=``)."""
        return dt.datetime.fromtimestamp(self.now, dt.UTC)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def install(self, monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> ManualClock:
        for module in modules:
            monkeypatch.setattr(module, "time", self)
        return self


class RegistrySuite:
    """The base of every part of the contract: the shared registry fixture and unique names."""

    def registry_url(self, tmp: Path) -> str:
        """A SQLAlchemy URL of an empty database (files, if any, under ``tmp``); the suite migrates it."""
        raise NotImplementedError

    def drop_url(self, url: str) -> None:
        """Remove the database :meth:`registry_url` made (nothing to do for a file under ``tmp``)."""

    @pytest.fixture(scope="class")
    @classmethod
    def reg(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
        """One migrated registry shared by the class's tests (each test gets a new instance: none is kept)."""
        owner = cls()
        url = owner.registry_url(tmp_path_factory.mktemp("registry"))
        try:
            with open_migrated(url) as registry:
                yield registry
        finally:
            owner.drop_url(url)

    @pytest.fixture(autouse=True)
    def _tag(self) -> None:
        self.tag = uuid.uuid4().hex[:8]

    def fresh(self, prefix: str) -> str:
        """A name unique to this test (valid as a source id, knowledge base, lock name)."""
        return f"{prefix}-{self.tag}"

    def source(self, reg: Registry, name: str = "docs", kb: str = "kb") -> SourceInfo:
        """A folder source ``fresh(name)`` of the knowledge base ``fresh(kb)``."""
        return add_source(reg, self.fresh(name), self.fresh(kb))


__all__ = [
    "ManualClock",
    "RegistrySuite",
    "add_source",
    "build",
    "draft",
    "make_live",
    "open_migrated",
    "stage",
    "sync",
]
