"""``freshindex ocr report``: how well the scanned pages a knowledge base serves were read.

Registered into the ``freshindex`` click group by :func:`register` (one line
at the end of ``freshindex/cli/__init__.py``).  It reads the live chunks of a
knowledge base from the registry (no parsing, no OCR) and lists, per
document and scanned page, the page's OCR confidence and the numbers,
amounts and commands tesseract was unsure of; a page under the floor is a
warning that names it.  What it does not show: pages of a document that
produced no chunk, and OCR'd pages beyond ``sources.max_ocr_pages`` (those
were never read; the parse records them as skipped).

Like :mod:`freshindex.cli.reports`, this reaches ``ctx.obj`` (the CLI's
state) and imports nothing from the package ``__init__``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import click

from freshindex.cli.context import CliState
from freshindex.cli.display import escaped
from freshindex.cli.support import json_option, require

_BATCH = 500


@click.group("ocr")
def ocr() -> None:
    """OCR quality of the scanned pages a knowledge base serves."""


def page_report(rows: Iterable[Any], floor: float) -> list[dict[str, Any]]:
    """One entry per (document key, scanned page): confidence, flagged tokens, chunks, below the floor or not."""
    pages: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        meta = row.meta or {}
        if not meta.get("ocr") or row.page is None:
            continue
        conf = meta.get("ocr_confidence")
        entry = pages.setdefault((row.key, row.page), {"key": row.key, "page": row.page, "confidence": conf,
                                                       "chunks": 0, "flagged": []})
        entry["chunks"] += 1
        if conf is not None and (entry["confidence"] is None or conf < entry["confidence"]):
            entry["confidence"] = conf
        for token in meta.get("low_confidence_tokens") or ():
            item = {k: token.get(k) for k in ("text", "kind", "confidence", "page")}
            if item not in entry["flagged"]:
                entry["flagged"].append(item)
    out = sorted(pages.values(), key=lambda e: (e["key"], e["page"]))
    for e in out:
        e["below_floor"] = e["confidence"] is not None and e["confidence"] < floor
    return out


def sync_counts(registry: Any, run: Any, floor: float) -> dict[str, Any]:
    """The scanned pages one sync run wrote chunks for, and those read under ``floor``.

    Read from the chunks in the run's changeset (so a document left
    unchanged counts nothing): what ``sync`` prints and puts under ``ocr``
    in its ``--json`` report.  A page whose chunks were all reused from
    before is not counted; ``ocr report`` covers everything served.
    """
    changeset = getattr(run, "changeset_id", None)
    if changeset is None:
        return {"scanned_pages": 0, "low_confidence_pages": 0, "floor": floor, "low": []}
    ids = sorted(registry.changeset_chunk_ids([changeset]))
    rows = [r for i in range(0, len(ids), _BATCH) for r in registry.chunk_rows(ids[i : i + _BATCH])
            if not r.tombstoned and r.source_id == run.source_id]
    report = page_report(rows, floor)
    low = [{"key": e["key"], "page": e["page"], "confidence": e["confidence"]} for e in report if e["below_floor"]]
    return {"scanned_pages": len(report), "low_confidence_pages": len(low), "floor": floor, "low": low}


def sync_line(counts: dict[str, Any]) -> str | None:
    """The line ``sync`` prints about OCR, or None when the run read no scanned page."""
    if not counts.get("scanned_pages"):
        return None
    where = ", ".join(f"{e['key']} p{e['page']}" for e in counts["low"][:5])
    more = f", ... (+{len(counts['low']) - 5})" if len(counts["low"]) > 5 else ""
    return (f"  OCR: {counts['scanned_pages']} scanned page(s), {counts['low_confidence_pages']} under the "
            f"confidence floor {counts['floor']:g}" + (f": {where}{more}" if where else ""))


def source_floor(source: Any, default: float) -> float:
    """The page floor of ``source``: its ``ocr_page_floor`` option when set and valid, else ``default``."""
    raw = (getattr(source, "options", None) or {}).get("ocr_page_floor")
    try:
        value = default if raw is None or raw == "" else float(raw)
    except (TypeError, ValueError):
        return default
    return value if 0.0 <= value <= 1.0 else default


@ocr.command("report")
@click.option("--kb", required=True, help="The knowledge base whose live chunks are read.")
@click.option("--floor", type=float, default=None,
              help="Confidence (0-1) under which a page is a warning (default: sources.ocr_page_floor).")
@json_option
@click.pass_obj
def ocr_report(state: CliState, kb: str, floor: float | None, as_json: bool) -> None:
    """Per scanned page: OCR confidence, the unsure numbers/amounts/commands, and pages under the floor."""
    require(state, kb=kb)
    svc = state.services
    floor = svc.settings.sources.ocr_page_floor if floor is None else floor
    ids = svc.registry.live_chunk_ids_for_kb(kb)
    rows = [r for i in range(0, len(ids), _BATCH) for r in svc.registry.chunk_rows(ids[i : i + _BATCH])]
    report = page_report(rows, floor)
    if as_json:
        click.echo(json.dumps({"kb": kb, "floor": floor, "pages": report}, indent=2, ensure_ascii=False))
        return
    if not report:
        click.echo(f"no OCR'd pages in the live chunks of {kb}")
        return
    report = escaped(report)
    for e in report:
        conf = "?" if e["confidence"] is None else f"{e['confidence']:.2f}"
        flagged = ", ".join(f"{t['text']} ({t['kind']} {t['confidence']})" for t in e["flagged"][:8])
        click.echo(f"{e['key']} page {e['page']}: confidence {conf}, {e['chunks']} chunk(s)"
                   + (f", unsure: {flagged}" if flagged else ""))
    low = [e for e in report if e["below_floor"]]
    for e in low:
        click.echo(f"warning: {e['key']} page {e['page']}: OCR confidence {e['confidence']:.2f} is under "
                   f"the floor {floor:.2f}", err=True)
    click.echo(f"{len(report)} scanned page(s), {len(low)} under the floor {floor:.2f}, "
               f"{sum(len(e['flagged']) for e in report)} unsure token(s)")


def register(cli: click.Group) -> None:
    cli.add_command(ocr)


__all__ = ["page_report", "register", "source_floor", "sync_counts", "sync_line"]
