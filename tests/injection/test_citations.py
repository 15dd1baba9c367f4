"""Citation check of a finished answer: numbers missing from the source list, citations without support."""

from __future__ import annotations

from freshindex.injection.citations import check_citations, cited_numbers
from freshindex.injection.types import ContextPacket, Evidence


def _ev(n: int, text: str) -> Evidence:
    return Evidence(n=n, chunk_id=f"c{n}", score=0.9, text=text, title="Ops", key=f"docs/{n}.md", source_id="s",
                    heading_path=("Ops",), anchor="", page=None, doc_version=1, snapshot_id="kb-v1", written_in="kb-v1")


SOURCES = (
    _ev(2, "Roll back a migration with alembic downgrade -1, then restart the workers."),
    _ev(5, "Backups run nightly at 02:00 and are kept for thirty days in the archive bucket."),
)


def test_cited_numbers_forms() -> None:
    assert cited_numbers("a [1] b [2, 3][4] c [6-8] d [10–11]") == [1, 2, 3, 4, 6, 7, 8, 10, 11]
    assert cited_numbers("no citations, [x] or [] here") == []


def test_a_well_cited_answer_passes() -> None:
    answer = ("To roll back, run alembic downgrade -1 and restart the workers [2]. "
              "Backups are kept for thirty days [5].")
    report = check_citations(answer, SOURCES)
    assert report.ok and report.cited == (2, 5) and report.counts() == {
        "cited": 2, "missing": 0, "unsupported": 0, "uncited_sentences": 0}


def test_a_number_not_in_the_source_list_is_missing() -> None:
    report = check_citations("Restart the workers after the downgrade [2]. Also see the runbook [7].", SOURCES)
    assert report.missing == (7,) and report.unsupported == () and not report.ok


def test_a_citation_pinned_to_the_wrong_source_is_unsupported() -> None:
    answer = "Backups are kept for thirty days in the archive bucket [2]. Roll back with alembic downgrade [2]."
    report = check_citations(answer, SOURCES)
    assert report.unsupported == ()  # the second sentence supports [2]
    wrong = check_citations("Backups are kept for thirty days in the archive bucket [2].", SOURCES)
    assert wrong.unsupported == (2,) and wrong.counts()["unsupported"] == 1
    assert check_citations("The moon is made of cheese [5].", SOURCES).unsupported == (5,)


def test_a_citation_after_the_full_stop_belongs_to_the_sentence_before() -> None:
    report = check_citations("Backups run nightly and are kept thirty days. [5]\nI am not sure about restores.",
                             ContextPacket("q", "kb", "kb-v1", SOURCES, False, None, ""))
    assert report.ok and report.cited == (5,) and report.uncited_sentences == 1 and report.sentences == 2
