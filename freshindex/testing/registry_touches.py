"""The registry contract's touches: unchanged documents written a batch at a time, and the attempts around them.

Checks, on whatever backend: a batch of touches (:meth:`Registry.touch_documents`)
writes each document as ``touch_document`` does (etag, size, shape hash, the
outcome ``unchanged``) and ends the attempts of the touching run in the same
transaction; a batch is written whole or not at all, and not at all for a
refused run; a document whose record moved since it was judged unchanged is
not touched, its attempt closed and, when the run holds no outcome for it,
recorded ``skipped`` (so the run's summary does not count it unchanged); a
concurrent writer between the re-check and the write is not overwritten;
many records are read in one call (``documents``); opening an attempt closes
the held attempts it is given (``closing=``) in its own transaction; and a
run that was taken over neither counts a crash on, nor closes or ends, the
attempts the run that took over holds.

What it does not check: the inline loop that holds and flushes the touches
(``tests/workers/test_touch_batch.py``), or the pipeline's decision that a
document is unchanged.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest
from sqlalchemy import select, text, update

from freshindex.acl.model import DocumentAcl
from freshindex.core.enums import DocumentOutcomeKind
from freshindex.core.errors import DocumentError, StaleTaskError
from freshindex.core.ids import sha256_hex
from freshindex.registry import Registry
from freshindex.registry import db as registry_db
from freshindex.registry import staging as registry_staging
from freshindex.registry import touches as registry_touches
from freshindex.registry.records import DocumentTouch
from freshindex.registry.schema import ChangesetEntry, Chunk, Document, DocumentAttempt, DocumentResult, Tombstone
from freshindex.testing.registry_base import RegistrySuite, stage, staged, sync

TEXTS = {f"k{n}": [f"text of document {n}"] for n in range(3)}


def _touch(doc_id: str, key: str, etag: str, **extra: object) -> DocumentTouch:
    fields: dict = dict(document_id=doc_id, etag=etag, size=7, content_hash=sha256_hex(*TEXTS[key]),
                        parser_version="v", seconds=0.5, shape_hash="shape-" + key)
    fields.update(extra)
    return DocumentTouch(**fields)


def _results(reg: Registry, run: int) -> dict[str, str]:
    with reg.session() as s:
        return {r.document_id: r.outcome for r in s.scalars(select(DocumentResult)
                                                            .where(DocumentResult.sync_run_id == run))}


def _written(reg: Registry, source_id: str, run: int) -> dict[str, object]:
    """What a source's stagings wrote, named by key and ordinal (not by ids, which carry the source)."""
    with reg.session() as s:
        docs = {d.id: d for d in s.scalars(select(Document).where(Document.source_id == source_id))}
        chunks = {c.id: c for c in s.scalars(select(Chunk).where(Chunk.document_id.in_(docs)))}
        name = {i: (docs[c.document_id].key, c.ordinal, c.text) for i, c in chunks.items()}
        return {
            "documents": sorted((d.key, d.state, d.version, d.content_hash, d.chunk_count) for d in docs.values()),
            "chunks": sorted((*name[i], c.state, c.tombstoned) for i, c in chunks.items()),
            "entries": sorted((name[e.chunk_id], e.op) for e in s.scalars(
                select(ChangesetEntry).where(ChangesetEntry.document_id.in_(docs)))),
            "tombstones": sorted(name[t.chunk_id] for t in s.scalars(
                select(Tombstone).where(Tombstone.document_id.in_(docs)))),
            "results": sorted((docs[r.document_id].key, r.outcome, r.chunks_added) for r in s.scalars(
                select(DocumentResult).where(DocumentResult.sync_run_id == run))),
        }


def _attempts(reg: Registry, ids: dict[str, str]) -> dict[str, bool]:
    """The attempts of the test's documents: document id -> open."""
    with reg.session() as s:
        return {a.document_id: a.open for a in s.scalars(select(DocumentAttempt)
                                                          .where(DocumentAttempt.document_id.in_(ids.values())))}


class TouchContract(RegistrySuite):
    """:class:`registry.touches.TouchStore` and the attempts it ends (:class:`registry.attempts.AttemptsStore`)."""

    def indexed(self, reg: Registry) -> tuple[str, dict[str, str]]:
        """A source whose three documents were synced once; (source id, key -> document id)."""
        source = self.source(reg, "touched")
        sync(reg, source, TEXTS)
        return source.id, {k: d.id for k, d in reg.documents_for_source(source.id).items()}

    def test_a_batch_records_every_touch_and_ends_the_attempts_in_one_transaction(self, reg: Registry) -> None:
        source_id, ids = self.indexed(reg)
        run, cs = reg.start_sync_run(source_id, "test")
        for doc_id in ids.values():
            reg.begin_document_attempt(doc_id, etag="e2", run_id=run)
        # When the three documents are touched as one batch
        moved = reg.touch_documents(run, cs, source_id, [_touch(ids[k], k, "e2") for k in TEXTS])
        # Then each holds its new etag and shape hash, each has its outcome, and no attempt is left
        assert moved == []
        docs = reg.documents(list(ids.values()))
        assert sorted((d.etag, d.size, d.shape_hash) for d in docs.values()) == [("e2", 7, f"shape-{k}")
                                                                                  for k in TEXTS]
        assert _results(reg, run) == {d: DocumentOutcomeKind.UNCHANGED for d in ids.values()}
        assert _attempts(reg, ids) == {}

    def test_a_batch_is_written_whole_or_not_at_all(self, reg: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
        source_id, ids = self.indexed(reg)
        run, cs = reg.start_sync_run(source_id, "test")
        for doc_id in ids.values():
            reg.begin_document_attempt(doc_id, etag="e2", run_id=run)

        # When the transaction fails after the documents were updated (the ACLs' step raises)
        def fail(*_args: object, **_kwargs: object) -> bool:
            raise RuntimeError("the process died here")

        monkeypatch.setattr(registry_touches, "_acls_current", fail)
        with pytest.raises(RuntimeError):
            reg.touch_documents(run, cs, source_id, [_touch(ids[k], k, "e2", acl=object()) for k in TEXTS])
        # Then nothing of the batch is written: the old etags, no outcome, the attempts still open
        assert {d.etag for d in reg.documents(list(ids.values())).values()} == {"e"}
        assert _results(reg, run) == {}
        assert _attempts(reg, ids) == {d: True for d in ids.values()}

    def test_a_batch_of_stagings_writes_what_each_staged_alone_writes_and_ends_their_attempts(
            self, reg: Registry) -> None:
        # Given the same two versions of three documents, staged one transaction each in one source and as
        # one batch (stage_documents) in another: a second version that changes k0, drops k1's chunk, keeps k2
        alone, batched = self.source(reg, "alone"), self.source(reg, "batched")
        versions = [TEXTS, {"k0": ["text of document 0", "a new part"], "k1": ["another text"], "k2": TEXTS["k2"]}]
        for texts in versions:
            runs = {}
            for src in (alone, batched):
                runs[src.id] = run_cs = reg.start_sync_run(src.id, "test")
                if src is alone:
                    for key, t in texts.items():
                        stage(reg, *run_cs, src, key, t)
                    continue
                held = [staged(reg, src, key, t) for key, t in texts.items()]
                for d in held:
                    reg.begin_document_attempt(d.document_id, etag="e", run_id=run_cs[0])
                reg.stage_documents(*run_cs, held)
                # Then the batch's attempts ended with it (the crash count starts again)
                assert _attempts(reg, {d.key: d.document_id for d in held}) == {}
            # Then the batch wrote exactly what the documents staged alone wrote: rows, entries, tombstones, outcomes
            assert _written(reg, batched.id, runs[batched.id][0]) == _written(reg, alone.id, runs[alone.id][0])
            for src in (alone, batched):
                reg.finish_sync_run(runs[src.id][0])
        assert _written(reg, batched.id, 0)["tombstones"] == [("k1", 0, "text of document 1")]

    def test_a_batch_of_stagings_is_written_whole_or_not_at_all(self, reg: Registry,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
        source = self.source(reg, "whole")
        run, cs = reg.start_sync_run(source.id, "test")
        held = [staged(reg, source, key, t) for key, t in TEXTS.items()]
        calls = [0]
        real = registry_staging.apply_acl

        def fail_on_the_third(*args: object, **kwargs: object) -> bool:  # the process dies in the third document
            calls[0] += 1
            if calls[0] == 3:
                raise RuntimeError("the process died here")
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(registry_staging, "apply_acl", fail_on_the_third)
        for d in held:
            reg.begin_document_attempt(d.document_id, etag="e", run_id=run)
        with pytest.raises(RuntimeError):
            reg.stage_documents(run, cs, [dataclasses.replace(d, acl=DocumentAcl(("public",))) for d in held])
        # Then nothing of the batch is written (no document, chunk or outcome) and the attempts are still open
        assert _written(reg, source.id, run) == {"documents": [], "chunks": [], "entries": [], "tombstones": [],
                                                 "results": []}
        assert _attempts(reg, {d.key: d.document_id for d in held}) == {d.document_id: True for d in held}
        # And a document twice in one batch is refused before anything is written
        monkeypatch.undo()
        with pytest.raises(ValueError, match="twice"):
            reg.stage_documents(run, cs, [held[0], held[0]])
        assert _written(reg, source.id, run)["documents"] == []
        # And a refused run's batch is not written either
        reg.finish_sync_run(run)
        with pytest.raises(StaleTaskError):
            reg.stage_documents(run, cs, held)
        assert _written(reg, source.id, run)["documents"] == []

    def test_a_refused_run_writes_nothing_of_its_batch(self, reg: Registry) -> None:
        source_id, ids = self.indexed(reg)
        run, cs = reg.start_sync_run(source_id, "test")
        reg.finish_sync_run(run)  # closed (by another process that found it dead)
        with pytest.raises(StaleTaskError):
            reg.touch_documents(run, cs, source_id, [_touch(ids["k0"], "k0", "e2")])
        assert reg.documents([ids["k0"]])[ids["k0"]].etag == "e"

    def test_a_document_whose_record_moved_since_the_decision_is_not_touched(self, reg: Registry) -> None:
        source_id, ids = self.indexed(reg)
        run, cs = reg.start_sync_run(source_id, "test")
        # Given k1 staged with new content after the batch found it unchanged
        stage(reg, run, cs, reg.get_source(source_id), "k1", ["new text of document 1"])
        reg.begin_document_attempt(ids["k1"], etag="e2", run_id=run)
        moved = reg.touch_documents(run, cs, source_id, [_touch(ids[k], k, "e2") for k in ("k0", "k1")])
        # Then k1 keeps what its staging wrote, k0 is touched, and k1's attempt is closed, not ended
        assert moved == [ids["k1"]]
        docs = reg.documents([ids["k0"], ids["k1"]])
        assert (docs[ids["k0"]].etag, docs[ids["k1"]].etag) == ("e2", "e")
        assert docs[ids["k1"]].content_hash == sha256_hex("new text of document 1")
        assert _results(reg, run)[ids["k0"]] == DocumentOutcomeKind.UNCHANGED
        assert _results(reg, run)[ids["k1"]] == DocumentOutcomeKind.ADDED  # staging's outcome, not overwritten
        assert _attempts(reg, ids) == {ids["k1"]: False}

    def test_a_moved_document_with_no_outcome_is_recorded_skipped_not_counted_unchanged(self, reg: Registry) -> None:
        source_id, ids = self.indexed(reg)
        run, cs = reg.start_sync_run(source_id, "test")
        reg.set_run_planned(run, listed=3, planned=3, documents=[(k, "e2", 1) for k in TEXTS])
        # Given k1's record changed by another writer (no outcome of this run) after it was judged unchanged
        with reg.session() as s:
            s.execute(update(Document).where(Document.id == ids["k1"]).values(content_hash="other"))
        moved = reg.touch_documents(run, cs, source_id, [_touch(ids[k], k, "e2") for k in TEXTS])
        assert moved == [ids["k1"]]
        # Then it is recorded skipped with why, and the run's summary says so instead of "unchanged"
        assert _results(reg, run)[ids["k1"]] == DocumentOutcomeKind.SKIPPED
        [skip] = [e for e in reg.document_errors(run_id=run, outcome=DocumentOutcomeKind.SKIPPED)]
        assert (skip.key, skip.reason, skip.detail) == ("k1", DocumentError.TOUCH_MOVED,
                                                        registry_touches.MOVED_DETAIL)
        # And its reason is one of the declared per-document codes, as every other recorded reason is
        declared = {v for k, v in vars(DocumentError).items() if k.isupper() and isinstance(v, str)}
        assert skip.reason in declared
        info, _ = reg.finish_sync_run(run)
        counts = info.summary["documents"]
        assert (counts[DocumentOutcomeKind.UNCHANGED], counts[DocumentOutcomeKind.SKIPPED]) == (2, 1)

    def test_many_records_are_read_in_one_call(self, reg: Registry) -> None:
        _source_id, ids = self.indexed(reg)
        got = reg.documents([*ids.values(), self.fresh("no-such-document")])
        assert set(got) == set(ids.values())
        assert {got[ids[k]].key for k in TEXTS} == set(TEXTS)

    def test_opening_an_attempt_closes_the_held_attempts_it_is_given_in_the_same_transaction(
        self, reg: Registry
    ) -> None:
        source_id, ids = self.indexed(reg)
        run, _cs = reg.start_sync_run(source_id, "test")
        k0, k1, k2 = (ids[k] for k in TEXTS)
        # Given k0 and k1 done with (their touches held for a batch), their attempts still open
        reg.begin_document_attempt(k0, etag="e2", run_id=run)
        assert reg.begin_attempt_ahead(k1, etag="e2", run_id=run)
        # When k2's attempt is opened ahead with them to close, then by the loop with itself and k1 to close
        assert reg.begin_attempt_ahead(k2, etag="e2", run_id=run, closing=[k0, k1])
        # Then they are closed, no crash counted, and k2 is open
        assert _attempts(reg, ids) == {k0: False, k1: False, k2: True}
        # And a document is never closed by its own opening; a crash is still counted on an open attempt
        assert reg.begin_document_attempt(k2, etag="e2", run_id=run, closing=[k2, k1]) == (1, True)
        assert _attempts(reg, ids) == {k0: False, k1: False, k2: True}
        assert reg.document_crashes(k0) == reg.document_crashes(k1) == 0

    def test_a_run_taken_over_leaves_the_attempts_of_the_run_that_took_over(self, reg: Registry) -> None:
        source_id, ids = self.indexed(reg)
        k0, k1, k2 = (ids[k] for k in TEXTS)
        # Given run A refused (finished by another process) while its loop goes on, and run B holding k0..k2 open
        old, _ = reg.start_sync_run(source_id, "test")
        reg.begin_document_attempt(k2, etag="e2", run_id=old)  # A died on k2 earlier: still a crash for B
        reg.finish_sync_run(old)
        new, _ = reg.start_sync_run(source_id, "test")
        assert reg.begin_document_attempt(k2, etag="e2", run_id=new) == (1, True)
        reg.begin_document_attempt(k0, etag="e2", run_id=new)
        assert reg.begin_attempt_ahead(k1, etag="e2", run_id=new)
        # When A, between its refusal checks, opens k0 (closing k1), and ends and closes their attempts
        assert reg.begin_document_attempt(k0, etag="e2", run_id=old, closing=[k1]) == (0, False)
        reg.end_document_attempts([k0, k1], outcome=False, run_id=old)
        reg.end_document_attempts([k2], outcome=True, run_id=old)
        reg.end_document_attempt(k2, outcome=True, run_id=old)
        # Then no crash is counted and B's attempts are as B left them
        assert _attempts(reg, ids) == {k0: True, k1: True, k2: True}
        assert (reg.document_crashes(k0), reg.document_crashes(k2)) == (0, 1)
        with reg.session() as s:
            assert set(s.scalars(select(DocumentAttempt.sync_run_id)
                                 .where(DocumentAttempt.document_id.in_(ids.values())))) == {new}

    def test_a_touch_ends_an_attempt_a_finished_run_left_open(self, reg: Registry) -> None:
        source_id, ids = self.indexed(reg)
        k0, k1, k2 = (ids[k] for k in TEXTS)
        # Given a run that died holding k0's attempt open (closed since, as the reaper does)
        dead, _ = reg.start_sync_run(source_id, "test")
        reg.begin_document_attempt(k0, etag="e2", run_id=dead)
        reg.finish_sync_run(dead, error="its process died")
        # When the next run touches k0 without opening an attempt of its own (found unchanged ahead, with a
        # pool), and k1 in the attempt it opened, and holds k2's attempt open
        run, cs = reg.start_sync_run(source_id, "test")
        reg.begin_document_attempt(k1, etag="e2", run_id=run)
        reg.begin_document_attempt(k2, etag="e2", run_id=run)
        assert reg.touch_documents(run, cs, source_id, [_touch(ids[k], k, "e2") for k in ("k0", "k1")]) == []
        # Then k0's and k1's attempts ended with their outcomes (their counts start again); k2's is as it was
        assert _attempts(reg, ids) == {k2: True}
        assert reg.document_crashes(k0) == 0

    def test_a_writer_between_the_recheck_and_the_touch_is_not_overwritten(
        self, reg: Registry, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Given a batch whose re-check has just passed, when another connection clears the document's etag (what
        # the freshness reconcile does to a document whose points are missing) before the batch writes
        source_id, ids = self.indexed(reg)
        run, cs = reg.start_sync_run(source_id, "test")
        other = registry_db.make_engine(reg.engine.url.render_as_string(hide_password=False))
        still, cleared = registry_touches._still, threading.Event()

        def recheck_then_write_elsewhere(doc: object, touch: DocumentTouch) -> bool:
            if not cleared.is_set():
                cleared.set()

                def clear() -> None:
                    with other.begin() as c:
                        c.execute(text("UPDATE documents SET etag = NULL, content_hash = NULL WHERE id = :i"),
                                  {"i": ids["k0"]})

                writer = threading.Thread(target=clear)
                writer.start()
                writer.join(1.0)  # it waits on the batch's lock (PostgreSQL FOR UPDATE, SQLite's one writer)
            return still(doc, touch)  # type: ignore[arg-type]

        monkeypatch.setattr(registry_touches, "_still", recheck_then_write_elsewhere)
        try:
            reg.touch_documents(run, cs, source_id, [_touch(ids["k0"], "k0", "e2")])
            for _ in range(100):  # the other writer goes on once the batch commits
                if reg.get_document(ids["k0"]).etag is None:  # type: ignore[union-attr]
                    break
                threading.Event().wait(0.05)
        finally:
            other.dispose()
        # Then the other writer's clear is what stays: the document is read again by the next sync
        doc = reg.get_document(ids["k0"])
        assert doc is not None and doc.etag is None and doc.content_hash is None


__all__ = ["TouchContract"]
