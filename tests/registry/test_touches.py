"""A batch of touched documents is one fenced transaction (registry/touches.py), on SQLite and PostgreSQL.

Each touch is written as ``touch_document`` writes one (etag, size, shape
hash, the outcome ``unchanged``) and the documents' attempts end in the same
transaction; a batch is all written or none of it; a document whose record
moved since it was found unchanged is not touched.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from freshindex.core.enums import DocumentOutcomeKind
from freshindex.core.errors import StaleTaskError
from freshindex.core.ids import sha256_hex
from freshindex.registry import Registry
from freshindex.registry.records import DocumentTouch
from freshindex.registry.schema import DocumentAttempt, DocumentResult
from freshindex.testing.registry_base import add_source, stage, sync

TEXTS = {f"k{n}": [f"text of document {n}"] for n in range(3)}


def _indexed(registry: Registry) -> tuple[str, dict[str, str]]:
    """A source whose three documents were synced once; (source id, key -> document id)."""
    source = add_source(registry, "touched", "kb")
    sync(registry, source, TEXTS)
    return source.id, {k: d.id for k, d in registry.documents_for_source(source.id).items()}


def _touch(doc_id: str, key: str, etag: str, **extra: object) -> DocumentTouch:
    fields: dict = dict(document_id=doc_id, etag=etag, size=7, content_hash=sha256_hex(*TEXTS[key]),
                        parser_version="v", seconds=0.5, shape_hash="shape-" + key)
    fields.update(extra)
    return DocumentTouch(**fields)


def _results(registry: Registry, run: int) -> dict[str, str]:
    with registry.session() as s:
        return {r.document_id: r.outcome for r in s.scalars(select(DocumentResult)
                                                            .where(DocumentResult.sync_run_id == run))}


def _attempts(registry: Registry) -> dict[str, bool]:
    with registry.session() as s:
        return {a.document_id: a.open for a in s.scalars(select(DocumentAttempt))}


def test_a_batch_records_every_touch_and_ends_the_attempts_in_one_transaction(registry: Registry) -> None:
    source_id, ids = _indexed(registry)
    run, cs = registry.start_sync_run(source_id, "test")
    for doc_id in ids.values():
        registry.begin_document_attempt(doc_id, etag="e2", run_id=run)
    # When the three documents are touched as one batch
    moved = registry.touch_documents(run, cs, source_id, [_touch(ids[k], k, "e2") for k in TEXTS])
    # Then each holds its new etag and shape hash, each has its outcome, and no attempt is left
    assert moved == []
    docs = registry.documents(list(ids.values()))
    assert sorted((d.etag, d.size, d.shape_hash) for d in docs.values()) == [("e2", 7, f"shape-{k}") for k in TEXTS]
    assert _results(registry, run) == {d: DocumentOutcomeKind.UNCHANGED for d in ids.values()}
    assert _attempts(registry) == {}


def test_a_batch_is_written_whole_or_not_at_all(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    source_id, ids = _indexed(registry)
    run, cs = registry.start_sync_run(source_id, "test")
    for doc_id in ids.values():
        registry.begin_document_attempt(doc_id, etag="e2", run_id=run)

    # When the transaction fails after the documents were updated (the ACLs' step raises)
    def fail(*_args: object, **_kwargs: object) -> bool:
        raise RuntimeError("the process died here")

    monkeypatch.setattr("freshindex.registry.touches._acls_current", fail)
    with pytest.raises(RuntimeError):
        registry.touch_documents(run, cs, source_id, [_touch(ids[k], k, "e2", acl=object()) for k in TEXTS])
    # Then nothing of the batch is written: the old etags, no outcome, the attempts still open
    assert {d.etag for d in registry.documents(list(ids.values())).values()} == {"e"}
    assert _results(registry, run) == {}
    assert _attempts(registry) == {d: True for d in ids.values()}


def test_a_refused_run_writes_nothing_of_its_batch(registry: Registry) -> None:
    source_id, ids = _indexed(registry)
    run, cs = registry.start_sync_run(source_id, "test")
    registry.finish_sync_run(run)  # closed (by another process that found it dead)
    with pytest.raises(StaleTaskError):
        registry.touch_documents(run, cs, source_id, [_touch(ids["k0"], "k0", "e2")])
    assert registry.documents([ids["k0"]])[ids["k0"]].etag == "e"


def test_a_document_whose_record_moved_since_the_decision_is_not_touched(registry: Registry) -> None:
    source_id, ids = _indexed(registry)
    run, cs = registry.start_sync_run(source_id, "test")
    # Given k1 staged with new content after the batch found it unchanged
    stage(registry, run, cs, registry.get_source(source_id), "k1", ["new text of document 1"])
    registry.begin_document_attempt(ids["k1"], etag="e2", run_id=run)
    moved = registry.touch_documents(run, cs, source_id, [_touch(ids[k], k, "e2") for k in ("k0", "k1")])
    # Then k1 keeps what its staging wrote, k0 is touched, and k1's attempt is closed, not ended
    assert moved == [ids["k1"]]
    docs = registry.documents([ids["k0"], ids["k1"]])
    assert (docs[ids["k0"]].etag, docs[ids["k1"]].etag) == ("e2", "e")
    assert docs[ids["k1"]].content_hash == sha256_hex("new text of document 1")
    assert _results(registry, run)[ids["k0"]] == DocumentOutcomeKind.UNCHANGED
    assert _results(registry, run)[ids["k1"]] == DocumentOutcomeKind.ADDED  # staging's outcome, not overwritten
    assert _attempts(registry) == {ids["k1"]: False}


def test_many_records_are_read_in_one_call(registry: Registry) -> None:
    _source_id, ids = _indexed(registry)
    got = registry.documents([*ids.values(), "no-such-document"])
    assert set(got) == set(ids.values())
    assert {got[ids[k]].key for k in TEXTS} == set(TEXTS)


def test_opening_an_attempt_closes_the_held_attempts_it_is_given_in_the_same_transaction(registry: Registry) -> None:
    source_id, ids = _indexed(registry)
    run, _cs = registry.start_sync_run(source_id, "test")
    k0, k1, k2 = (ids[k] for k in TEXTS)
    # Given k0 and k1 done with (their touches held for a batch), their attempts still open
    registry.begin_document_attempt(k0, etag="e2", run_id=run)
    assert registry.begin_attempt_ahead(k1, etag="e2", run_id=run)
    # When k2's attempt is opened ahead with them to close, then by the loop with itself and k1 to close
    assert registry.begin_attempt_ahead(k2, etag="e2", run_id=run, closing=[k0, k1])
    # Then they are closed, no crash counted, and k2 is open
    assert _attempts(registry) == {k0: False, k1: False, k2: True}
    # And a document is never closed by its own opening; a crash is still counted on an open attempt
    assert registry.begin_document_attempt(k2, etag="e2", run_id=run, closing=[k2, k1]) == (1, True)
    assert _attempts(registry) == {k0: False, k1: False, k2: True}
    assert registry.document_crashes(k0) == registry.document_crashes(k1) == 0


def test_a_writer_between_the_recheck_and_the_touch_is_not_overwritten(
    registry: Registry, registry_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a batch whose re-check has just passed, when another connection clears the document's etag (what the
    # freshness reconcile does to a document whose points are missing) before the batch writes
    import threading

    from sqlalchemy import create_engine, text

    import freshindex.registry.touches as touches

    source_id, ids = _indexed(registry)
    run, cs = registry.start_sync_run(source_id, "test")
    other = create_engine(registry_url)
    still, cleared = touches._still, threading.Event()

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

    monkeypatch.setattr(touches, "_still", recheck_then_write_elsewhere)
    try:
        registry.touch_documents(run, cs, source_id, [_touch(ids["k0"], "k0", "e2")])
        for _ in range(100):  # the other writer goes on once the batch commits
            if registry.get_document(ids["k0"]).etag is None:  # type: ignore[union-attr]
                break
            threading.Event().wait(0.05)
    finally:
        other.dispose()
    # Then the other writer's clear is what stays: the document is read again by the next sync
    doc = registry.get_document(ids["k0"])
    assert doc is not None and doc.etag is None and doc.content_hash is None
