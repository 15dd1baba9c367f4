"""bench.throughput's logic on a tiny corpus (three pages, the hashing embedder: no model, no server)."""

from __future__ import annotations

from pathlib import Path

from bench import throughput

PAGE = ("<html><head><title>{t}</title></head><body><main><h1>{t}</h1>"
        "<p>{t} explains how the request cache keeps answers for a while and when it forgets them.</p>"
        "<h2>Settings</h2><p>CACHE_TIMEOUT sets the seconds an answer is kept; zero keeps nothing.</p>"
        "</main></body></html>")


def pages(root: Path) -> Path:
    root.mkdir()
    for name in ("a", "b", "c"):
        (root / f"{name}.html").write_text(PAGE.format(t=f"Page {name}"))
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


def test_the_hashing_side_builds_the_pages_through_the_real_pipeline(tmp_path: Path) -> None:
    # When freshindex builds the three pages with the hashing embedder
    out = throughput.run_freshindex(pages(tmp_path / "pages"), tmp_path / "work", {"provider": "hashing"})
    # Then the sync succeeded, built a version and every page has points
    assert out["build"] == "built" and out["errors"] == 0
    assert out["points"] >= 3 and out["wall_s"] > 0


def test_figures_are_ratios_of_the_sides_that_ran_and_missing_ones_are_none() -> None:
    # Given every side but the remote ones
    sides = {
        "naive-parse": {"wall_s": 10.0, "peak_rss_mb": 100.0},
        "hashing": {"wall_s": 15.0, "peak_rss_mb": 300.0},
        "naive": {"full": {"wall_s": 100.0}, "update": {"wall_s": 80.0}, "peak_rss_mb": 400.0},
        "fresh": {"full": {"wall_s": 90.0}, "update": {"wall_s": 20.0}, "peak_rss_mb": 700.0},
    }
    values = throughput.figures(sides)
    # Then the ratios divide freshindex's wall time by the naive one's, and the remote figure is missing
    assert values == {"overhead_ratio": 1.5, "full_build_ratio": 0.9, "update_ratio": 0.25, "peak_rss_mb": 700.0,
                      "remote_full_build_ratio": None}
    # And the goal table says which were met, missed or not measured
    verdicts = {row[0]: row[3] for row in throughput.goal_rows(values)}
    assert verdicts == {"overhead_ratio": "met", "full_build_ratio": "met", "update_ratio": "met",
                        "peak_rss_mb": "MISSED", "remote_full_build_ratio": "not measured"}
