"""bench.transfer's scoring rules (no corpus, no index: the packets are written by hand)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from bench import transfer

HTML = transfer.Corpus("html", types.SimpleNamespace(), "test")
PDF = transfer.Corpus("pdf", types.SimpleNamespace(), "test", pdf=True)


def ev(key: str, text: str = "", page: int | None = None, page_end: int | None = None, cid: str = "") -> dict:
    return {"key": key, "chunk_id": cid or f"{key}:{page}:{text[:8]}", "score": 0.5, "page": page,
            "page_end": page_end, "ocr": False, "text": text}


def packet(*items: dict, insufficient: bool = False) -> dict:
    return {"ms": 1.0, "insufficient": insufficient, "reason": None, "why": None, "signals": None,
            "evidence": list(items)}


def test_a_pdf_item_is_on_a_page_when_its_file_matches_and_its_cited_range_contains_it():
    # Given items citing pages 17-18 of R-exts.pdf and page 17 of R-intro.pdf
    spanning, single, other = ev("R-exts.pdf", page=17, page_end=18), ev("R-exts.pdf", page=17), ev("R-intro.pdf", page=17)
    # Then page 18 is in the first item's range only, and another file's page 17 is not R-exts's page 17
    assert transfer.on_page(PDF, spanning, "R-exts.pdf#page=18")
    assert not transfer.on_page(PDF, single, "R-exts.pdf#page=18")
    assert not transfer.on_page(PDF, other, "R-exts.pdf#page=17")
    assert not transfer.on_page(PDF, ev("R-exts.pdf"), "R-exts.pdf#page=17"), "an item without a page cites none"


def test_passage_counts_only_on_the_right_page_and_ignores_whitespace_and_table_pipes():
    q = {"id": "t", "kind": "table", "page": "ref/a.html", "passage": "Default: 2.5 MB (2621440 bytes)"}
    # Given the passage on another page at rank 1 and, laid out as a Markdown row, on the right page at rank 2
    p5 = packet(ev("ref/b.html", "Default: 2.5 MB (2621440 bytes)"), ev("ref/a.html", "| Default: | 2.5  MB\n(2621440 bytes) |"))
    got = transfer.judge(HTML, q, p5, p5)
    # Then it is a hit at rank 2 with the passage found on the right page
    assert got["hit5"] and got["passage5"] and got["rr10"] == 0.5
    # And when the right page's item lacks it, the copy on another page does not count
    p5 = packet(ev("ref/b.html", "Default: 2.5 MB (2621440 bytes)"), ev("ref/a.html", "something else"))
    got = transfer.judge(HTML, q, p5, p5)
    assert got["hit5"] and not got["passage5"] and got["passage5_any_page"]


def test_a_distractor_page_before_the_canonical_one_is_counted():
    q = {"id": "d", "kind": "distractor", "page": "releases/3.2.1.html", "passage": "x" * 30,
         "distractor_pages": ["releases/2.2.21.html"]}
    above = packet(ev("releases/2.2.21.html", cid="a"), ev("releases/3.2.1.html", cid="b"))
    below = packet(ev("releases/3.2.1.html", cid="b"), ev("releases/2.2.21.html", cid="a"))
    assert transfer.judge(HTML, q, above, above)["distractor_above"]
    assert not transfer.judge(HTML, q, below, below)["distractor_above"]
    absent = packet(ev("releases/2.2.21.html", cid="a"))
    assert transfer.judge(HTML, q, absent, absent)["distractor_above"], "canonical absent, distractor present"


def test_a_question_that_no_longer_verifies_is_dropped_with_its_reason_and_skipped_kinds_are_left_out(tmp_path: Path):
    questions = [{"id": "a", "kind": "prose"}, {"id": "b", "kind": "unanswerable"}, {"id": "c", "kind": "update_only"}]
    module = types.SimpleNamespace(load_questions=lambda: questions,
                                   verify=lambda dest, qs: ["b: key term 'Foo' occurs in the corpus", "12 pages only"])
    corpus = transfer.Corpus("x", module, "test", skip_kinds=("update_only",))
    kept, dropped, general = transfer.verified_questions(corpus)
    assert [q["id"] for q in kept] == ["a"]
    assert dropped == {"b": "key term 'Foo' occurs in the corpus"}
    assert general == ["12 pages only"]


def test_the_index_key_changes_with_the_chunker_and_not_with_the_refusal(monkeypatch: pytest.MonkeyPatch):
    from freshindex.settings import load_settings
    from freshindex.workers import chunking

    settings = load_settings(data_dir="/tmp/unused")
    before = transfer.index_key(transfer.index_parts(settings, "m", HTML))
    refusal_off = settings.model_copy(update={"context": settings.context.model_copy(update={"refusal": False})})
    assert transfer.index_key(transfer.index_parts(refusal_off, "m", HTML)) == before
    monkeypatch.setattr(chunking, "CHUNKER_VERSION", chunking.CHUNKER_VERSION + "-next")
    assert transfer.index_key(transfer.index_parts(settings, "m", HTML)) != before


def test_an_ocr_read_item_holds_a_passage_up_to_misread_glyphs_and_a_text_layer_item_only_exactly():
    q = {"id": "c", "kind": "code", "page": "R-admin.pdf#page=43",
         "passage": "typedef enum { BUGGY_KINDERMAN_RAMAGE, AHRENS_DIETER, BOX_MULLER } N01type;"}
    misread = "typedef enum {\nBUGGY_KINDERMAN_RAMAGE,\nAHRENS_DIETER,\nBOX_MULLER\n} NO1type;"
    scanned = {**ev("R-admin.pdf", misread, page=43), "ocr": True}
    # Given the passage as OCR read it (0 as O) on a scanned item: it holds the passage, though not exactly
    got = transfer.judge(PDF, q, packet(scanned), packet(scanned))
    assert got["passage5"] and not got["passage5_exact"]
    # And the same misread text from a text layer does not
    got = transfer.judge(PDF, q, packet(ev("R-admin.pdf", misread, page=43)), packet(ev("R-admin.pdf", misread, page=43)))
    assert not got["passage5"]
    # And an OCR item holding only part of the passage does not either
    half = {**ev("R-admin.pdf", "typedef enum { BUGGY_KINDERMAN_RAMAGE,", page=43), "ocr": True}
    assert not transfer.judge(PDF, q, packet(half), packet(half))["passage5"]
