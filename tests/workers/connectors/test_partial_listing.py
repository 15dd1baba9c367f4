"""The worked example of an incremental connector: a journal whose listing after the first is partial.

Given a source whose connector keeps a change journal (puts and deletes, in
order) and lists, after its first complete listing, only what changed since
its cursor (``SourceListing.partial``), when one key is deleted and another
changed, then only the reported deletion is tombstoned and the document the
listing does not mention stays; the cursor moves only when the run
succeeds, and a run killed after listing (then closed as failed) is listed
again from the previous cursor by the next sync.  A document that failed
for a passing reason in a partial run (whose cursor moved past it) is tried
again by the next sync although its listing does not name it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from freshindex.core.enums import DocumentState
from freshindex.core.errors import DocumentError
from freshindex.core.types import ObjectRef
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import planner
from freshindex.workers.connectors import ConnectorSpec, SourceListing, StateStore, last_cursor, register, unregister
from freshindex.workers.runner import sync_inline

#: The journal: (op, key, text) in order; a cursor is how many entries were listed.
JOURNAL: list[tuple[str, str, str]] = []
#: Keys whose fetch fails for now (a passing reason: unreadable).
FAILING: set[str] = set()


class JournalConnector:
    """Complete listing without a cursor; afterwards the journal's entries past the cursor."""

    def __init__(self, state: StateStore | None) -> None:
        self.state = state
        self.asked: list[dict[str, Any] | None] = []  # the cursor each listing started from

    def _files(self, upto: int) -> dict[str, str]:
        files: dict[str, str] = {}
        for op, key, text in JOURNAL[:upto]:
            if op == "put":
                files[key] = text
            else:
                files.pop(key, None)
        return files

    def _ref(self, key: str, text: str) -> ObjectRef:
        return ObjectRef(key=key, etag=str(hash(text)), size=len(text.encode()))

    def list(self) -> SourceListing:
        cursor = last_cursor(self.state)
        self.asked.append(cursor)
        end = len(JOURNAL)
        if cursor is None:
            return SourceListing.complete([self._ref(k, t) for k, t in sorted(self._files(end).items())],
                                          cursor={"seq": end})
        files = self._files(end)
        touched = {key for _, key, _ in JOURNAL[cursor["seq"]:end]}
        return SourceListing.partial([self._ref(k, files[k]) for k in sorted(touched) if k in files],
                                     deleted=[k for k in touched if k not in files], cursor={"seq": end})

    def fetch(self, key: str) -> bytes:
        if key in FAILING:
            raise DocumentError(DocumentError.UNREADABLE, f"{key} cannot be read just now")
        files = self._files(len(JOURNAL))
        if key not in files:
            raise DocumentError(DocumentError.VANISHED, f"{key} is gone")
        return files[key].encode()


BUILT: list[JournalConnector] = []


def _build(source: Any, env: Any) -> JournalConnector:
    BUILT.append(JournalConnector(env.state))
    return BUILT[-1]


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    register(ConnectorSpec(kind="journal", build=_build, source_uri=lambda location, key: f"{location}/{key}"))
    JOURNAL[:] = [("put", "a.md", "# A\n\nAlpha pages describe the first service.\n"),
                  ("put", "b.md", "# B\n\nBeta pages describe the second service.\n"),
                  ("put", "c.md", "# C\n\nGamma pages describe the third service.\n")]
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    services.registry.add_source("j", kind="journal", location="journal://kb", owner="t", kb="default")
    try:
        yield services
    finally:
        services.close()
        unregister("journal")
        JOURNAL.clear()
        BUILT.clear()
        FAILING.clear()


def _states(svc: Services) -> dict[str, str]:
    return {key: str(doc.state) for key, doc in svc.registry.documents_for_source("j").items()}


def test_a_partial_listing_tombstones_only_its_deletions_and_its_cursor_moves_with_success(svc: Services) -> None:
    # Given a first (complete) sync of three documents
    first = sync_inline(svc, "j")
    assert first.run.status == "succeeded" and first.run.summary["documents"]["added"] == 3
    assert svc.registry.source_state("j") == {"listing": {"seq": 3}}

    # When b is deleted and a changed, and the partial listing reports just that
    JOURNAL.extend([("delete", "b.md", ""), ("put", "a.md", "# A\n\nAlpha pages now describe the new service.\n")])
    second = sync_inline(svc, "j")

    # Then b is tombstoned, a is processed again, c (not mentioned) stays active, and the cursor moved
    assert second.run.status == "succeeded", second.errors
    assert second.run.summary["documents"]["deleted"] == 1 and second.run.summary["documents"]["modified"] == 1
    assert _states(svc) == {"a.md": DocumentState.ACTIVE, "b.md": DocumentState.DELETED, "c.md": DocumentState.ACTIVE}
    assert BUILT[-1].asked[-1] == {"seq": 3}
    assert svc.registry.source_state("j") == {"listing": {"seq": 5}}

    # Given c deleted, When a run lists it and is killed before it ends, Then the cursor has not moved
    JOURNAL.append(("delete", "c.md", ""))
    killed = planner.plan_sync(svc.pipeline, "j")
    assert svc.registry.planned_state("j", killed.run_id) == {"listing": {"seq": 6}}
    assert svc.registry.source_state("j") == {"listing": {"seq": 5}}
    svc.registry.finish_sync_run(killed.run_id, error="worker killed")  # what the reaper records for a dead run
    assert svc.registry.source_state("j") == {"listing": {"seq": 5}}

    # When the next sync runs, Then it lists again from the previous cursor, and its success moves it
    third = sync_inline(svc, "j")
    assert BUILT[-1].asked[-1] == {"seq": 5}
    assert third.run.status == "succeeded", third.errors
    assert _states(svc)["c.md"] == DocumentState.DELETED and _states(svc)["a.md"] == DocumentState.ACTIVE
    assert svc.registry.source_state("j") == {"listing": {"seq": 6}}


def test_a_document_failed_for_a_passing_reason_is_tried_again_after_the_cursor_moved_past_it(svc: Services) -> None:
    # Given a first sync, then d.md added while it cannot be read: the run is partial, its cursor promoted
    assert sync_inline(svc, "j").run.status == "succeeded"
    JOURNAL.extend([("put", "d.md", "# D\n\nDelta pages describe the fourth service.\n"),
                    ("put", "e.md", "# E\n\nEpsilon pages describe the fifth service.\n")])
    FAILING.add("d.md")
    failed = sync_inline(svc, "j")
    assert failed.run.status == "partial" and _states(svc)["d.md"] == DocumentState.ERROR
    assert svc.registry.source_state("j") == {"listing": {"seq": 5}}
    # When it can be read again and the next (partial) listing names nothing, Then d.md is tried again
    FAILING.clear()
    again = sync_inline(svc, "j")
    assert BUILT[-1].asked[-1] == {"seq": 5} and again.run.status == "succeeded", again.errors
    assert set(_states(svc).values()) == {DocumentState.ACTIVE}


def test_an_indexed_document_whose_update_failed_is_tried_again_and_its_new_text_served(svc: Services) -> None:
    # Given a first sync, then a.md edited while it cannot be read, and e.md added: the run ends partial and its
    # cursor moves past both, a.md still indexed with its old text
    assert sync_inline(svc, "j").run.status == "succeeded"
    JOURNAL.extend([("put", "a.md", "# A\n\nAlpha pages now describe the replacement service.\n"),
                    ("put", "e.md", "# E\n\nEpsilon pages describe the fifth service.\n")])
    FAILING.add("a.md")
    failed = sync_inline(svc, "j")
    assert failed.run.status == "partial" and _states(svc)["a.md"] == DocumentState.ACTIVE
    assert svc.registry.source_state("j") == {"listing": {"seq": 5}}
    # When it can be read again and the next partial listing names nothing
    FAILING.clear()
    again = sync_inline(svc, "j")
    # Then a.md is processed again: its new text is what the index holds
    assert BUILT[-1].asked[-1] == {"seq": 5} and again.run.status == "succeeded", again.errors
    assert again.run.summary["documents"]["modified"] == 1
    doc = svc.registry.documents_for_source("j")["a.md"]
    assert doc.error_reason is None
    texts = [r.text for r in svc.registry.chunk_rows(svc.registry.live_chunk_ids_for_kb("default"))]
    assert any("replacement service" in t for t in texts) and not any("Alpha pages describe" in t for t in texts)


def test_an_empty_partial_listing_is_nothing_changed_not_an_emptied_source() -> None:
    # A complete listing of nothing deleting a live document is held; a partial one is not
    assert planner.deletion_hold(deleting=1, live=1, listed=0, max_share=0.5, min_held=5) is not None
    assert planner.deletion_hold(deleting=1, live=10, listed=None, max_share=0.5, min_held=5) is None
    assert planner.deletion_hold(deleting=8, live=10, listed=None, max_share=0.5, min_held=5) is not None
