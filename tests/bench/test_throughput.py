"""bench.throughput's logic and runners on tiny corpora (the hashing embedder: no model is loaded).

The CocoIndex runner runs for real (CocoIndex 1.0, the local PostgreSQL) on five pages in its own process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import throughput
from tests.conftest import ROOT

PAGE = ("<html><head><title>{t}</title></head><body><main><h1>{t}</h1>"
        "<p>{t} explains how the request cache keeps answers for a while and when it forgets them.</p>"
        "<h2>Settings</h2><p>CACHE_TIMEOUT sets the seconds an answer is kept; zero keeps nothing.</p>"
        "</main></body></html>")


def pages(root: Path, names: tuple[str, ...] = ("a", "b", "c"), changed: str = "") -> Path:
    root.mkdir()
    for name in names:
        text = PAGE.format(t=f"Page {name}")
        if name == changed:
            text = text.replace("zero keeps nothing", "zero keeps nothing at all, and a negative value is refused")
        (root / f"{name}.html").write_text(text)
    return root


def test_naive_parse_reads_every_page_and_splits_it(tmp_path: Path) -> None:
    # Given three small pages
    root = pages(tmp_path / "pages")
    # When the naive side parses and splits them
    out = throughput.run_naive_parse(root)
    # Then each page is one chunk (under 1,000 characters) holding its visible text, in path order
    chunks = throughput.naive_chunks(root)
    assert out["chunks"] == len(chunks) == 3
    assert "Page a" in chunks[0] and "CACHE_TIMEOUT" in chunks[2] and "<p>" not in chunks[1]


def test_the_freshindex_run_builds_then_updates_only_what_changed(tmp_path: Path) -> None:
    # Given a release of three pages and a next one where one page's text changed
    old = pages(tmp_path / "old")
    new = pages(tmp_path / "new", changed="b")
    # When freshindex builds the old release and updates to the new one with the hashing embedder
    out = throughput.run_fresh(old, new, tmp_path / "work", "hashing")
    # Then the full build built every page, with CPU time and cores used measured around it
    full, update = out["full"], out["update"]
    assert full["build"] == "built" and full["errors"] == 0 and full["embedded"] >= 3
    # (cpu_s is rounded to 0.01 s, cores_used computed before rounding: on a sub-second build that is a few %)
    assert full["cpu_s"] > 0 and full["cores_used"] == pytest.approx(full["cpu_s"] / full["wall_s"],
                                                                     abs=0.006 / full["wall_s"] + 0.001)
    # And the update embedded the changed page's new chunks only, the floor being exactly those chunks
    assert update["build"] == "built" and 1 <= update["embedded"] < full["embedded"]
    assert out["floor"]["chunks"] == 1 and out["floor"]["model_s"] >= 0
    assert out["peak_rss_mb_sync"] > 0


def test_the_langchain_runner_indexes_through_langchains_own_index(tmp_path: Path) -> None:
    from bench.peers import langchain_side

    # Given three pages, then a release where one page changed, one is gone and one is new
    old = pages(tmp_path / "old")
    new = pages(tmp_path / "new", ("a", "b", "d"), changed="b")
    # When LangChain's index() builds the old release and then the new one with the hashing embedder
    out = langchain_side.run(old, new, "hashing")
    # Then the full build embedded each page's one chunk, and the update embedded the changed and the new page's,
    # skipped the unchanged one and deleted the vectors of the page gone and of the changed page's old text
    assert out["full"]["embedded"] == out["full"]["added"] == out["full"]["vectors"] == 3
    assert (out["update"]["embedded"], out["update"]["skipped"], out["update"]["deleted"]) == (2, 1, 2)
    assert out["update"]["vectors"] == 3


def test_figures_are_ratios_of_the_runs_that_ran_and_missing_ones_are_none() -> None:
    # Given both freshindex runs and CocoIndex's with the model, no hashing CocoIndex run, no LangChain run
    runs = {
        "freshindex-model": {"full": {"wall_s": 90.0}, "update": {"wall_s": 12.0}, "floor": {"model_s": 10.0},
                             "peak_rss_mb": 500.0},
        "freshindex-hashing": {"full": {"wall_s": 20.0, "cores_used": 1.8}, "update": {"wall_s": 2.0},
                               "peak_rss_mb": 200.0},
        "cocoindex-model": {"full": {"wall_s": 100.0}, "update": {"wall_s": 20.0}, "peak_rss_mb": 300.0},
    }
    values = throughput.figures(runs)
    # Then each ratio divides freshindex's wall time by the peer's, and figures of runs that did not run are None
    assert values == {"cocoindex_full_ratio": 0.9, "cocoindex_update_ratio": 0.6,
                      "cocoindex_hashing_full_ratio": None, "cocoindex_hashing_update_ratio": None,
                      "cores_used_hashing_full": 1.8, "update_over_model_floor": 1.2, "peak_rss_mb": 500.0,
                      "peak_rss_mb_hashing": 200.0, "langchain_full_ratio": None, "langchain_update_ratio": None}
    # And each goal is judged in its own direction: a ceiling, or a floor (cores used)
    results = {name: v["result"] for name, v in throughput.verdicts(values).items()}
    assert results["cocoindex_full_ratio"] == "pass" and results["peak_rss_mb"] == "FAIL"
    assert results["cores_used_hashing_full"] == "pass"
    assert throughput.verdicts({"cores_used_hashing_full": 1.2})["cores_used_hashing_full"]["result"] == "FAIL"
    assert results["langchain_full_ratio"] == "not measured"


def test_systems_outside_the_known_ones_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["bench.throughput", "--systems", "freshindex,llamaindex"])
    with pytest.raises(SystemExit, match="unknown systems: llamaindex"):
        throughput.main()


@pytest.mark.services
def test_the_cocoindex_runner_builds_then_updates_five_pages_with_the_hashing_function(tmp_path: Path) -> None:
    pytest.importorskip("cocoindex", reason="CocoIndex is not installed (pip install -e .[bench])")
    pytest.importorskip("asyncpg", reason="asyncpg (CocoIndex's PostgreSQL target) is not installed")
    # Given five pages, then a release where one page changed, one is gone and one is new
    names = ("a", "b", "c", "d", "e")
    old = pages(tmp_path / "old", names)
    new = pages(tmp_path / "new", ("a", "b", "c", "d", "f"), changed="b")
    out = tmp_path / "coco.json"
    # When the CocoIndex runner builds and updates them in its own process, rows in a database of its own
    subprocess.run([sys.executable, "-m", "bench.peers.cocoindex_side", "--old", str(old), "--new", str(new),
                    "--work", str(tmp_path / "state"), "--embedder", "hashing", "--db",
                    "freshindex_bench_cocoindex_test", "--out", str(out)], cwd=ROOT, check=True, timeout=240)
    data = json.loads(out.read_text())
    # Then the full build embedded every page's chunk (one each: small pages) and wrote a row for each
    assert data["full"]["embedded"] == data["full"]["rows"] == 5
    # And the update embedded only the changed page's and the new page's chunks, and dropped the gone page's row
    assert data["update"]["embedded"] == 2 and data["update"]["rows"] == 5
    assert data["embedder"] == "hashing" and data["cocoindex"].startswith("1.0")
    # And CocoIndex's state is where it was told
    assert (tmp_path / "state" / "state").exists()


def test_the_report_header_names_the_commit_measured_and_what_was_uncommitted() -> None:
    from bench.throughput import _at

    assert _at({"commit": {"head": "0123456789abcdef", "uncommitted_product_files": []}}) == "0123456789"
    assert _at({"commit": {"head": "0123456789abcdef", "uncommitted_product_files": ["a.py"]}}) == \
        "0123456789 (uncommitted: a.py)"
    assert _at({}) == "?"  # a window recorded before the commit was
