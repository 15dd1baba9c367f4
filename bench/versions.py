"""Older versions: the newest release of a page answers, its older copy only rides along as a mirror.

The corpus (``bench.corpora.rmanuals_versions``) holds the R manuals of two
Debian releases in version directories, each whole: ``4.2.2/`` (bookworm, 25
pages scanned, as ``bench.transfer``'s rmanuals corpus) and ``4.0.4/`` (bullseye,
the release it replaced, as shipped). Nothing marks the older one: the folder
source indexes both, and only the client's near-duplicate rule
(``injection.duplicates``: the newer date, then the higher version directory)
decides which copy is the answer. It is indexed with the DEFAULT settings
(``Services`` + ``sync_inline``, kept like ``bench.transfer``'s indexes) and
every answerable rmanuals question (written from the 4.2.2 pages before any
output was seen) is asked through ``InjectionClient.retrieve`` as shipped, at
limit 5 and 10; its page is the 4.2.2 one.

* hit@5, passage@5, MRR@10: as ``bench.transfer`` judges them, on the 4.2.2 page;
* older above canonical: in the limit-10 packet an item of a 4.0.4 manual comes before the first item on
  the question's page (or the page is absent and a 4.0.4 item is there); goal 0;
* older items in the top 5: the share of all top-5 items that are 4.0.4 ones;
* cited as mirror: questions whose item on the page names a 4.0.4 copy in ``also_in``;
* each split by whether the question's passage is in the 4.0.4 manual word for word (``kept``) or not
  (``changed``: the older copy says something else, or says it elsewhere);
* beside them, the same questions on 4.2.2 alone: ``bench.transfer``'s kept rmanuals answers (refusal on),
  when that index is present.

    python -m bench.versions [--reindex]

Writes bench/results/versions.json and .md; the raw answers are kept in the index's directory
(``rows.json``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench import transfer
from bench.evidence import norm
from bench.report import write

NAME = "rmanuals-versions"
GOALS = {"hit_at_5": (">=", 0.90), "passage_at_5": (">=", 0.80), "mrr_at_10": (">=", 0.80),
         "older_above_canonical": ("<=", 0)}


def corpus() -> transfer.Corpus:
    from bench.corpora import rmanuals_versions as rv

    return transfer.Corpus(NAME, rv, f"{rv.PACKAGE} {rv.VERSION}", pdf=True)


def is_older(ev: dict[str, Any]) -> bool:
    from bench.corpora.rmanuals_versions import OLD_DIR

    return str(ev["key"]).startswith(OLD_DIR + "/")


def judge(c: transfer.Corpus, q: dict[str, Any], at5: dict[str, Any], at10: dict[str, Any]) -> dict[str, Any]:
    """``bench.transfer.judge`` plus where the older release's items stand."""
    out = transfer.judge(c, q, at5, at10)
    ev5, ev10 = at5["evidence"], at10["evidence"]
    first_old = next((i for i, ev in enumerate(ev10, 1) if is_older(ev)), None)
    rank = out["rank10"]
    out["older_rank10"] = first_old
    out["older_above"] = first_old is not None and (rank is None or first_old < rank)
    out["older_in_top5"] = sum(is_older(ev) for ev in ev5)
    out["top5"] = len(ev5)
    out["cited_as_mirror"] = any(transfer.on_page(c, ev, q["page"]) and any(is_older({"key": m}) for m in ev["also_in"])
                                 for ev in ev10)
    out["ranked"] = [{"key": ev["key"], "page": ev["page"], "score": ev["score"], "also_in": ev["also_in"]}
                     for ev in ev10]
    return out


def ask_all(c: transfer.Corpus, svc: Any, questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from bench.corpora.rmanuals_versions import old_text

    old = old_text()
    asker = transfer.Asker(svc.client, c.name)
    asker.ask("warm up", 5)
    rows = []
    for i, q in enumerate(questions, 1):
        name = q["page"].split("/", 1)[1].partition("#page=")[0]
        row = {k: q.get(k) for k in ("id", "kind", "question", "page", "passage")}
        row["passage_in_older"] = norm(q["passage"]) in norm(old[name])
        row["on"] = judge(c, q, asker.ask(q["question"], 5), asker.ask(q["question"], 10))
        rows.append(row)
        if i % 10 == 0 or i == len(questions):
            print(f"[{c.name}] asked {i}/{len(questions)}", flush=True)
    return rows


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def part(sel: list[dict[str, Any]]) -> dict[str, Any]:
        runs = [r["on"] for r in sel]
        n = len(runs)
        return {"questions": n,
                "hit_at_5": transfer._rate(sum(x["hit5"] for x in runs), n),
                "passage_at_5": transfer._rate(sum(x["passage5"] for x in runs), n),
                "mrr_at_10": transfer._rate(sum(x["rr10"] for x in runs), n),
                "older_above_canonical": sum(x["older_above"] for x in runs),
                "older_items_top5": transfer._rate(sum(x["older_in_top5"] for x in runs),
                                                   sum(x["top5"] for x in runs)),
                "cited_as_mirror": sum(x["cited_as_mirror"] for x in runs),
                "refused": sum(x["insufficient"] for x in runs)}

    out = part(rows)
    out["kept"] = part([r for r in rows if r["passage_in_older"]])
    out["changed"] = part([r for r in rows if not r["passage_in_older"]])
    out["goals"] = {k: "met" if (out[k] is not None and (out[k] >= g if op == ">=" else out[k] <= g)) else "missed"
                    for k, (op, g) in GOALS.items()}
    out["query_ms_p50"] = transfer._pct([r["on"]["ms5"] for r in rows], 50)
    out["query_ms_p95"] = transfer._pct([r["on"]["ms5"] for r in rows], 95)
    return out


def alone(ids: set[str], embedder: Any, base: Any) -> dict[str, Any] | None:
    """The same questions on 4.2.2 alone: ``bench.transfer``'s kept rmanuals answers, when present."""
    rm = transfer.corpora()["rmanuals"]
    kept = transfer.CACHE / f"rmanuals-{transfer.index_key(transfer.index_parts(base, embedder.model_id, rm))}" / "rows.json"
    if not kept.is_file():
        return None
    raw = json.loads(kept.read_text())
    runs = [r["on"] for r in raw["rows"] if r["id"] in ids]
    n = len(runs)
    return {"questions": n, "asked_at": raw["commit"]["head"],
            "hit_at_5": transfer._rate(sum(x["hit5"] for x in runs), n),
            "passage_at_5": transfer._rate(sum(x["passage5"] for x in runs), n),
            "mrr_at_10": transfer._rate(sum(x["rr10"] for x in runs), n)}


def markdown(res: dict[str, Any]) -> list[str]:
    m, f, a = res["meta"], res["figures"], res["alone"]
    lines = ["# Older versions: the R manuals 4.2.2 beside 4.0.4, both whole", "",
             f"`{m['command']}` at {m['commit']['head'][:10]} ({m['commit']['subject']}), {m['date']}, {m['cores']} "
             f"cores shared (load {m['load_avg_1_5_15']}); defaults (ONNX all-MiniLM-L6-v2 int8, SQLite + Qdrant "
             f"Edge). {res['pages']} pages ({res['pages_new']} of 4.2.2, {res['pages_old']} of 4.0.4), indexed in "
             f"{res['index']['index_seconds']} s. Nothing marks 4.0.4 as older but its version directory. "
             "Questions: the rmanuals answerable ones (written from the 4.2.2 pages), asked through the shipped "
             "client; `kept`: the passage is in the 4.0.4 manual word for word, `changed`: it is not.", "",
             "| figure | all | kept | changed | 4.2.2 alone | goal |", "|---|---:|---:|---:|---:|---|"]
    for k in ("questions", "hit_at_5", "passage_at_5", "mrr_at_10", "older_above_canonical", "older_items_top5",
              "cited_as_mirror", "refused"):
        goal = " ".join(map(str, GOALS[k])) if k in GOALS else ""
        mark = {"met": " ✓", "missed": " ✗"}.get(f["goals"].get(k, ""), "")
        lines.append(f"| {k} | {f[k]}{mark} | {f['kept'][k]} | {f['changed'][k]} | "
                     f"{a.get(k, '') if a else 'n/a'} | {goal} |")
    lines += ["", f"Query ms p50 / p95 (limit 5): {f['query_ms_p50']} / {f['query_ms_p95']}."]
    above = [r for r in res["rows"] if r["on"]["older_above"]]
    if above:
        lines += ["", "## Older above canonical", ""]
        for r in above:
            ranked = "; ".join(f"{x['key']} p{x['page']} ({x['score']})" for x in r["on"]["ranked"][:4])
            lines.append(f"- {r['id']} ({'kept' if r['passage_in_older'] else 'changed'}): {r['question']!r} "
                         f"wants {r['page']} (rank {r['on']['rank10']}), 4.0.4 at rank {r['on']['older_rank10']}: "
                         f"{ranked}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reindex", action="store_true", help="index again even when a kept index matches")
    args = parser.parse_args()
    from freshindex.settings import load_settings
    from freshindex.workers.embedding import build_embedder

    def settings_for(data_dir: Path) -> Any:
        return load_settings(data_dir=data_dir)

    base = settings_for(transfer.CACHE)
    e = base.embedding
    embedder = build_embedder(e.provider, model=e.model, batch_size=e.batch_size, threads=e.threads)
    c = corpus()
    transfer.materialise(c)
    questions, dropped, general = transfer.verified_questions(c)
    if general:
        raise SystemExit(f"[{c.name}] corpus problems: {general}")
    svc, record = transfer.open_index(c, embedder, settings_for, args.reindex)
    try:
        t0 = time.perf_counter()
        rows = ask_all(c, svc, questions)
        query_s = round(time.perf_counter() - t0, 1)
    finally:
        svc.close()
    import pymupdf

    from bench.corpora.rmanuals_versions import NEW_DIR, OLD_DIR

    pages = {d: sum(len(pymupdf.open(p)) for p in sorted((c.folder / d).glob("*.pdf"))) for d in (NEW_DIR, OLD_DIR)}
    res = {"meta": {**transfer._meta([], transfer.shipped_defaults()), "command": "python -m bench.versions"},
           "release": c.release, "pages": sum(pages.values()), "pages_new": pages[NEW_DIR], "pages_old": pages[OLD_DIR],
           "index": record, "dropped": dropped, "query_s": query_s, "figures": figures(rows),
           "alone": alone({r["id"] for r in rows}, embedder, base), "rows": rows}
    Path(record["dir"], "rows.json").write_text(json.dumps(res, default=str))
    write("versions", res, markdown(res))


if __name__ == "__main__":
    main()
