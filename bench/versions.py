"""Older versions: the newest release of a page answers, its older copy only rides along.

Two corpora, each two Debian releases of one documentation set side by side in
version directories, every page of both indexed:

``rmanuals`` (``bench.corpora.rmanuals_versions``)
    R's PDF manuals: bookworm's 4.2.2 (25 pages scanned, as ``bench.transfer``'s
    rmanuals corpus) beside bullseye's 4.0.4, the release it replaced, as shipped.
``python`` (``bench.corpora.python_versions``)
    CPython's HTML docs: bookworm's 3.11 (as ``bench.transfer``'s python311
    corpus) beside bullseye's 3.9.

Nothing marks the older release: the folder source indexes both, and only the
client's version rule (``injection.duplicates``: a near-copy's newer version is
canonical; ``passed_over``: other versions of a document rank after the one to
answer from) decides.  Indexed with the DEFAULT settings (``Services`` +
``sync_inline``, kept like ``bench.transfer``'s indexes); every answerable
question of the newer release's golden set (written from its pages before any
output was seen) is asked through ``InjectionClient.retrieve`` as shipped, at
limit 5 and 10; its page is the newer release's.

* hit@5, passage@5, MRR@10: as ``bench.transfer`` judges them, on the newer page;
* older above canonical: in the limit-10 packet an item of the older release comes before the first item
  on the question's page (or the page is absent and an older item is there); goal 0;
* older items in the top 5: the share of all top-5 items that are the older release's;
* cited as mirror: questions whose item on the page names an older copy in ``also_in``;
* each split by whether the question's passage is in the older release word for word (``kept``: anywhere
  in the manual for the PDFs, on the same page for the HTML) or not (``changed``);
* beside them, the same questions on the newer release alone: ``bench.transfer``'s kept answers
  (refusal on), when that index is present.

    python -m bench.versions [--pairs rmanuals,python] [--reindex]

Writes bench/results/versions.json and .md (a pair not run now is read from its kept index's
``rows.json`` when present).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import transfer
from bench.report import write

GOALS = {"hit_at_5": (">=", 0.90), "passage_at_5": (">=", 0.80), "mrr_at_10": (">=", 0.80),
         "older_above_canonical": ("<=", 0)}
PAIRS = ("rmanuals", "python")


def corpus(pair: str) -> transfer.Corpus:
    from bench.corpora import python_versions, rmanuals_versions

    m = {"rmanuals": rmanuals_versions, "python": python_versions}[pair]
    return transfer.Corpus(m.NAME, m, f"{m.PACKAGE} {m.VERSION}", pdf=m.PDF)


def is_older(c: transfer.Corpus, key: str) -> bool:
    return key.startswith(c.module.OLD_DIR + "/")


def judge(c: transfer.Corpus, q: dict[str, Any], at5: dict[str, Any], at10: dict[str, Any]) -> dict[str, Any]:
    """``bench.transfer.judge`` plus where the older release's items stand."""
    out = transfer.judge(c, q, at5, at10)
    ev5, ev10 = at5["evidence"], at10["evidence"]
    first_old = next((i for i, ev in enumerate(ev10, 1) if is_older(c, ev["key"])), None)
    rank = out["rank10"]
    out["older_rank10"] = first_old
    out["older_above"] = first_old is not None and (rank is None or first_old < rank)
    out["older_in_top5"] = sum(is_older(c, ev["key"]) for ev in ev5)
    out["top5"] = len(ev5)
    out["cited_as_mirror"] = any(transfer.on_page(c, ev, q["page"]) and any(is_older(c, m) for m in ev["also_in"])
                                 for ev in ev10)
    out["ranked"] = [{"key": ev["key"], "page": ev["page"], "score": ev["score"], "also_in": ev["also_in"]}
                     for ev in ev10]
    return out


def ask_all(c: transfer.Corpus, svc: Any, questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    texts = c.module.older_texts()
    asker = transfer.Asker(svc.client, c.name)
    asker.ask("warm up", 5)
    rows = []
    for i, q in enumerate(questions, 1):
        row = {k: q.get(k) for k in ("id", "kind", "question", "page", "passage")}
        row["passage_in_older"] = c.module.passage_in_older(q, texts)
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


def alone(c: transfer.Corpus, ids: set[str], embedder: Any, base: Any) -> dict[str, Any] | None:
    """The same questions on the newer release alone: ``bench.transfer``'s kept answers, when present."""
    single = transfer.corpora()[c.module.ALONE]
    key = transfer.index_key(transfer.index_parts(base, embedder.model_id, single))
    kept = transfer.CACHE / f"{single.name}-{key}" / "rows.json"
    if not kept.is_file():
        return None
    raw = json.loads(kept.read_text())
    runs = [r["on"] for r in raw["rows"] if r["id"] in ids]
    n = len(runs)
    return {"questions": n, "asked_at": raw["commit"]["head"],
            "hit_at_5": transfer._rate(sum(x["hit5"] for x in runs), n),
            "passage_at_5": transfer._rate(sum(x["passage5"] for x in runs), n),
            "mrr_at_10": transfer._rate(sum(x["rr10"] for x in runs), n)}


def run_pair(pair: str, embedder: Any, settings_for: Any, reindex: bool) -> dict[str, Any]:
    c = corpus(pair)
    transfer.materialise(c)
    questions, dropped, general = transfer.verified_questions(c)
    if general:
        raise SystemExit(f"[{c.name}] corpus problems: {general}")
    svc, record = transfer.open_index(c, embedder, settings_for, reindex)
    try:
        t0 = time.perf_counter()
        rows = ask_all(c, svc, questions)
        query_s = round(time.perf_counter() - t0, 1)
    finally:
        svc.close()
    pages = c.module.count_pages(c.folder)
    res = {"pair": pair, "release": c.release, "new": c.module.NEW_DIR, "old": c.module.OLD_DIR,
           "pages": sum(pages.values()), "pages_new": pages[c.module.NEW_DIR], "pages_old": pages[c.module.OLD_DIR],
           "index": record, "dropped": dropped, "query_s": query_s, "commit": transfer._commit(),
           "figures": figures(rows), "alone": alone(c, {r["id"] for r in rows}, embedder, settings_for(transfer.CACHE)),
           "rows": rows}
    Path(record["dir"], "rows.json").write_text(json.dumps(res, default=str))
    return res


def markdown(meta: dict[str, Any], pairs: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["# Older versions: two releases of one documentation set side by side, both whole", "",
             f"`{meta['command']}`, {meta['date']}, {meta['cores']} cores shared (load {meta['load_avg_1_5_15']}); "
             "defaults (ONNX all-MiniLM-L6-v2 int8, SQLite + Qdrant Edge). Nothing marks the older release but its "
             "version directory. Questions: the newer release's answerable golden questions (written from its "
             "pages), asked through the shipped client; `kept`: the passage is in the older release word for word, "
             "`changed`: it is not."]
    for pair, res in pairs.items():
        f, a, c = res["figures"], res["alone"], res["commit"]
        lines += ["", f"## {pair}: {res['new']} beside {res['old']}", "",
                  f"{res['release']}; {res['pages']} pages ({res['pages_new']} of {res['new']}, {res['pages_old']} of "
                  f"{res['old']}), indexed in {res['index']['index_seconds']} s; asked at {c['head'][:10]} "
                  f"({c['subject']}).", "",
                  f"| figure | all | kept | changed | {res['new']} alone | goal |", "|---|---:|---:|---:|---:|---|"]
        for k in ("questions", "hit_at_5", "passage_at_5", "mrr_at_10", "older_above_canonical", "older_items_top5",
                  "cited_as_mirror", "refused"):
            goal = " ".join(map(str, GOALS[k])) if k in GOALS else ""
            mark = {"met": " ✓", "missed": " ✗"}.get(f["goals"].get(k, ""), "")
            lines.append(f"| {k} | {f[k]}{mark} | {f['kept'][k]} | {f['changed'][k]} | "
                         f"{a.get(k, '') if a else 'n/a'} | {goal} |")
        lines += ["", f"Query ms p50 / p95 (limit 5): {f['query_ms_p50']} / {f['query_ms_p95']}."]
        above = [r for r in res["rows"] if r["on"]["older_above"]]
        if above:
            lines += ["", "Older above canonical:", ""]
            for r in above:
                ranked = "; ".join(f"{x['key']} p{x['page']} ({x['score']})" for x in r["on"]["ranked"][:4])
                lines.append(f"- {r['id']} ({'kept' if r['passage_in_older'] else 'changed'}): {r['question']!r} "
                             f"wants {r['page']} (rank {r['on']['rank10']}), older at rank "
                             f"{r['on']['older_rank10']}: {ranked}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated pairs to run now; the others' "
                        "last answers are read from their kept index (rows.json) when present")
    parser.add_argument("--reindex", action="store_true", help="index again even when a kept index matches")
    args = parser.parse_args()
    wanted = [p.strip() for p in args.pairs.split(",") if p.strip()]
    if set(wanted) - set(PAIRS):
        raise SystemExit(f"unknown pairs {sorted(set(wanted) - set(PAIRS))}; known: {', '.join(PAIRS)}")
    from freshindex.models import build_embedder
    from freshindex.settings import load_settings

    def settings_for(data_dir: Path) -> Any:
        return load_settings(data_dir=data_dir)

    e = settings_for(transfer.CACHE).embedding
    embedder = build_embedder(e.provider, model=e.model, batch_size=e.batch_size, threads=e.threads)
    done: dict[str, dict[str, Any]] = {}
    for pair in PAIRS:
        if pair in wanted:
            done[pair] = run_pair(pair, embedder, settings_for, args.reindex)
            continue
        c = corpus(pair)
        key = transfer.index_key(transfer.index_parts(settings_for(transfer.CACHE), embedder.model_id, c))
        kept = transfer.CACHE / f"{c.name}-{key}" / "rows.json"
        if kept.is_file():
            done[pair] = json.loads(kept.read_text())
            print(f"[{c.name}] answers read from {kept} (asked at {done[pair]['commit']['head'][:10]})", flush=True)
    meta = {**transfer._meta(sys.argv[1:], transfer.shipped_defaults()),
            "command": "python -m bench.versions" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "")}
    write("versions", {"meta": meta, "pairs": done}, markdown(meta, done))


if __name__ == "__main__":
    main()
