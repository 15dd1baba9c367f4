"""Structure of real generated HTML manuals through the real parser and chunker.

Two corpora, each in two Debian releases (fetched with ``apt-get download``,
unpacked with ``dpkg-deb -x`` under ``~/.cache/freshindex-bench/docs_structure``):

* the Django 3.2.25 documentation (Sphinx): ``python-django-doc``
  3:3.2.25-0+deb12u3 and 3:3.2.25-0+deb12u7;
* the PostgreSQL 15 manual (DocBook XSL): ``postgresql-doc-15`` 15.18 and 15.20
  (whatever two versions ``apt-cache madison`` lists; the report names them).

Every page of the newer release is parsed and chunked (``Parsers``,
``Chunker`` as the service builds them) and checked against ground truth
read from the raw HTML by generator-specific selectors, which the parser
itself does not use:

* **navigation in chunks**: word 3-grams of the navigation elements
  (DocBook ``navheader``/``navfooter``, Sphinx ``related``/``sphinxsidebar``,
  Django's ``#hd``/``#ft``/``#sidebar``, ``role=navigation``) that do not
  occur in the page's text; a chunk holding one carries navigation text;
* **variable-list entries** (``<dt>``/``<dd>``; Sphinx's empty ``<dd>``
  followed by its paragraphs): an entry fails when a chunk holding a
  sentence of its description does not hold its term;
* **anchors**: a chunk's citation anchor must be an ``id`` of the page;
* **captions**: a captioned table ("Table F.1. ...", ``<caption>``) is covered
  when every chunk holding its first row holds the caption; **group rows**
  (one cell spanning the row): a row below one is covered when its chunk
  holds the group's label;
* **repeated lines**: lines of chunk text found on more than 10 % of pages
  (template furniture the structural rules missed).

The release update: per page of both releases, whether the bytes changed,
whether the extracted content hash changed (the pipeline re-chunks only
then), and how many chunk hashes of the newer release the older one lacks
(what would be embedded).

The same is measured with the parser of the last commit (``git show
HEAD:workers/parsing/html.py`` and ``html_walk.py``) as the baseline, unless ``--no-baseline``.

    python -m bench.docs_structure [--limit N] [--no-baseline] [--workers 2]

Writes bench/results/docs_structure.json and .md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.report import table, write

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("FRESHINDEX_BENCH_CACHE", Path.home() / ".cache" / "freshindex-bench")) / "docs_structure"
PACKAGES = {"django": ("python-django-doc", "3:3.2.25-0+deb12u3", "3:3.2.25-0+deb12u7"),
            "postgresql": ("postgresql-doc-15", None, None)}
NAV = (".navheader, .navfooter, .related, .sphinxsidebar, #hd, #ft, #sidebar, [role=navigation], nav, "
       ".md-header, .md-footer, .md-sidebar, .topNav, .bottomNav, .subNav")
_WORD = re.compile(r"\w+")


# -- corpora ------------------------------------------------------------------

def _versions(package: str) -> list[str]:
    out = subprocess.run(["apt-cache", "madison", package], capture_output=True, text=True, check=True).stdout
    return sorted({line.split("|")[1].strip() for line in out.splitlines() if "|" in line})


def fetch(name: str) -> tuple[list[str], list[Path]]:
    """The two releases of a corpus, downloaded and unpacked once."""
    package, old, new = PACKAGES[name]
    available = _versions(package)
    wanted = [v for v in (old, new) if v and v in available] or available[-2:]
    if len(wanted) < 2:
        wanted = available[-2:] or wanted
    CACHE.mkdir(parents=True, exist_ok=True)
    roots = []
    for version in wanted:
        stem = f"{package}_{version.replace(':', '%3a')}_all"
        target = CACHE / stem
        if not target.exists():
            subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=CACHE, check=True,
                           capture_output=True)
            deb = next(CACHE.glob(f"{package}_*{version.split(':')[-1]}_all.deb"))
            subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
        roots.append(target)
    return wanted, roots


def pages(root: Path) -> dict[str, Path]:
    html = next(p for p in root.rglob("html") if p.is_dir())
    return {p.relative_to(html).as_posix(): p for p in sorted(html.rglob("*.html"))}


# -- the parser under test ----------------------------------------------------

_STATE: dict[str, Any] = {}


def _head_module(rel: str, name: str) -> Any:
    """The module at ``rel`` as of the last commit, loaded from ``git show``."""
    src = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _baseline_parser() -> Any:
    """``parse_html`` of the last commit, with the walker of the last commit (html_walk.py) under it."""
    walker_name = "freshindex.workers.parsing.html_walk"
    current = sys.modules.get(walker_name)
    sys.modules[walker_name] = _head_module("workers/parsing/html_walk.py", "freshindex_bench_html_walk_head")
    try:
        return _head_module("workers/parsing/html.py", "freshindex_bench_html_head").parse_html
    finally:
        if current is not None:
            sys.modules[walker_name] = current
        else:
            del sys.modules[walker_name]


def _init(which: str) -> None:
    from freshindex.services import Services
    from freshindex.settings import load_settings

    svc = Services(load_settings(data_dir=Path(tempfile.mkdtemp()) / "data"))
    _STATE["parsers"], _STATE["chunker"] = svc.parsers, svc.chunker
    _STATE["parse_html"] = _baseline_parser() if which == "baseline" else None


def _parse(key: str, data: bytes) -> Any:
    if _STATE["parse_html"] is None:
        return _STATE["parsers"].parse(data, key)
    from freshindex.workers.parsing import limits

    with limits.applied(_STATE["parsers"].limits):
        return _STATE["parse_html"](data, key)


# -- ground truth -------------------------------------------------------------

def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _key(text: str) -> str:
    return "".join(_words(text))


def _shingles(words: list[str], n: int = 3) -> set[str]:
    return {" ".join(words[i:i + n]) for i in range(max(0, len(words) - n + 1))}


_INDEX = re.compile(r"^(index|indexdiv|genindex)$")
_SIG = ".sig-prename, .descclassname, .sig-name, .descname"


def _term_name(dt: Any) -> str:
    """What a reader searches for in a term: the object's name in a Sphinx signature
    (``HttpResponse.set_cookie``), else each term's text before its parameter list
    (``verify_heapam``, ``-D directory``)."""
    sig = dt.select(_SIG)
    if sig:
        outer = [t for t in sig if not any(p is q for p in t.parents for q in sig)]
        return "".join(t.get_text() for t in outer)
    return " ".join(dict.fromkeys(" ".join(t.get_text(" ").split("(", 1)[0].split())
                                  for t in (dt.select("span.term") or [dt])))


def truth(raw: bytes) -> dict[str, Any]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(raw, "html.parser")
    ids = {str(t["id"]) for t in soup.find_all(id=True)}
    for t in soup(["script", "style", "title", "head"]):
        t.decompose()
    nav_words = []
    for el in soup.select(NAV):
        if not el.__dict__.get("_decomposed"):
            nav_words.append(_words(el.get_text(" ")))
            el.decompose()
    content = _shingles(_words(soup.get_text(" ")))
    nav_only = set().union(*(_shingles(w) for w in nav_words)) - content if nav_words else set()
    entries = []
    page_key = _key(soup.get_text(" "))
    for dl in soup.find_all("dl"):
        if "toc" in " ".join(dl.get("class") or []) or dl.find_parent(class_="toc"):
            continue
        if dl.find_parent(class_=_INDEX):  # a back-of-book index: lines with links, not terms and descriptions
            continue
        term_parts: list[str] = []
        term_tags: list[Any] = []
        for child in [c for c in dl.children if getattr(c, "name", None) in ("dt", "dd")]:
            if child.name == "dt":
                if term_parts and term_parts[-1] is None:
                    term_parts, term_tags = [], []
                term_parts.append(child.get_text(" "))
                term_tags.append(child)
                continue
            if not term_parts:
                continue
            term = _key(" ".join(t for t in term_parts if t))
            name = _key(" ".join(dict.fromkeys(_term_name(t) for t in term_tags)))
            term_parts.append(None)  # type: ignore[arg-type]
            paras = [p for p in child.find_all("p") if p.find_parent("dl") is dl]
            if not paras and child.get_text(strip=True) and child.find("dl") is None:
                paras = [child]  # a description without <p>; one made of nested entries only has none of its own
            if not paras and not child.get_text(strip=True):
                # Sphinx: ".. attribute:: X" with an empty <dd>, then its paragraphs after the list
                # (a <dd> of nested entries only is not empty: what follows its list is not its own)
                paras = []
                for sib in dl.find_next_siblings():
                    if sib.name != "p" or len(paras) >= 3:
                        break
                    paras.append(sib)
            snippets = [_key(" ".join(w[:10])) for w in (_words(p.get_text(" ")) for p in paras) if len(w) >= 5]
            # A sentence written twice on the page (a cross-reference repeated outside the
            # entry) cannot say which chunk holds the entry's description.
            snippets = [x for x in snippets if page_key.count(x) == 1]
            if term and snippets:
                entries.append({"term": term, "name": name, "snippets": snippets})
    shared = Counter(x for e in entries for x in set(e["snippets"]))
    every = [x for e in entries for x in e["snippets"]]
    for e in entries:  # a sentence two entries share ("This option can be given more than once") proves nothing,
        # nor one that starts another entry's sentence ("Specifies the directory ..." of -D and of PGDATA)
        e["snippets"] = [x for x in e["snippets"] if shared[x] == 1 and sum(x in y for y in every) == 1]
    entries = [e for e in entries if e["snippets"]]
    tables = []
    for t in soup.find_all("table"):
        caption = None
        if t.find("caption"):
            caption = t.find("caption").get_text(" ")
        else:
            holder = t.find_parent(class_="table")
            title = holder.find(class_="title") if holder else None
            caption = title.get_text(" ") if title else None
        rows = [r for r in t.find_all("tr") if r.find_parent("table") is t and r.find("td")]
        width = max((len(r.find_all(["td", "th"], recursive=False)) for r in rows), default=0)
        group, grouped = None, []
        for r in rows:
            cells = r.find_all(["td", "th"], recursive=False)
            if len(cells) == 1 and width > 1 and str(cells[0].get("colspan") or "1").isdigit() \
                    and int(cells[0].get("colspan") or 1) > 1:
                group = _key(cells[0].get_text(" "))
            elif group:
                grouped.append((group, _key(" ".join(c.get_text(" ") for c in cells))))
        first = _key(" ".join(c.get_text(" ") for c in rows[0].find_all(["td", "th"], recursive=False))) if rows else ""
        tables.append({"caption": _key(caption) if caption else None, "first_row": first, "grouped": grouped})
    return {"ids": ids, "nav": nav_only, "entries": entries, "tables": tables}


def _over_limit(chunks: list[Any]) -> int:
    """Chunks the model would truncate: what it reads (title, heading path, text) over its input limit."""
    from freshindex.core.types import embed_text

    chunker = _STATE["chunker"]
    limit = chunker.max_input_tokens - chunker._specials
    return sum(1 for c in chunks if chunker._count(embed_text(c.heading_path, c.text, title=c.title)) > limit)


def check_page(job: tuple[str, str, str]) -> dict[str, Any]:
    key, path, label = job
    raw = Path(path).read_bytes()
    out: dict[str, Any] = {"key": key, "label": label}
    started = time.perf_counter()
    try:
        parsed = _parse(key, raw)
        chunks = _STATE["chunker"].chunk("bench", parsed)
    except Exception as exc:  # a failed page is reported, the rest proceed
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["seconds"] = time.perf_counter() - started
    out["content_hash"] = parsed.meta.get("content_hash")
    out["chunk_hashes"] = sorted({c.content_hash for c in chunks})
    out["title"] = parsed.title
    t = truth(raw)
    texts = [c.text for c in chunks]
    keys = [_key(x) for x in texts]
    shingles = [_shingles(_words(x)) for x in texts]
    nav_hits = [i for i, s in enumerate(shingles) if s & t["nav"]]
    out["chunks"] = len(chunks)
    out["over_limit"] = _over_limit(chunks)
    out["nav_chunks"] = len(nav_hits)
    out["nav_examples"] = [texts[i][:160] for i in nav_hits[:2]]
    failed = []
    by_name = 0  # entries some chunk of which holds the term's name but not the whole term
    for e in t["entries"]:
        holders = [i for i, k in enumerate(keys) if any(s in k for s in e["snippets"])]
        if any(e["term"] not in keys[i] and not (e["name"] and e["name"] in keys[i]) for i in holders):
            failed.append(e["term"][:60])
        elif any(e["term"] not in keys[i] for i in holders):
            by_name += 1
    out["entries"], out["entries_without_term"], out["entry_examples"] = len(t["entries"]), len(failed), failed[:3]
    out["entries_by_name"] = by_name
    bad = [c.anchor for c in chunks if c.anchor not in t["ids"]]
    out["anchors_unresolved"], out["anchor_examples"] = len(bad), sorted(set(bad))[:3]
    captioned = [x for x in t["tables"] if x["caption"] and x["first_row"]]
    covered = unmatched = 0
    for x in captioned:
        holders = [i for i, k in enumerate(keys) if x["first_row"] in k]
        if not holders:
            unmatched += 1
        elif all(x["caption"] in keys[i] for i in holders):
            covered += 1
    out["captioned_tables"], out["captions_covered"], out["caption_rows_unmatched"] = len(captioned), covered, unmatched
    grouped = [g for x in t["tables"] for g in x["grouped"]]
    gcov = 0
    for label_key, row in grouped:
        holders = [i for i, k in enumerate(keys) if row and row in k]
        if holders and all(label_key in keys[i] for i in holders):
            gcov += 1
    out["group_rows"], out["group_rows_labelled"] = len(grouped), gcov
    out["lines"] = sorted({" ".join(ln.split()) for x in texts for ln in x.split("\n") if len(ln.split()) >= 3})
    return out


def run(jobs: list[tuple[str, str, str]], which: str, workers: int) -> list[dict[str, Any]]:
    with ProcessPoolExecutor(max_workers=workers, initializer=_init, initargs=(which,)) as pool:
        return list(pool.map(check_page, jobs, chunksize=8))


# -- report -------------------------------------------------------------------

def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in results if "error" not in r]
    total = sum(r["chunks"] for r in ok)
    line_pages = Counter(ln for r in ok for ln in r["lines"])
    common = {ln for ln, n in line_pages.items() if n > max(3, 0.1 * len(ok))}
    repeated_chunks = sum(1 for r in ok for ln in r["lines"] if ln in common)
    s = {
        "pages": len(results), "errors": len(results) - len(ok), "chunks": total,
        "nav_chunks": sum(r["nav_chunks"] for r in ok),
        "over_limit": sum(r.get("over_limit", 0) for r in ok),
        "entries": sum(r["entries"] for r in ok),
        "entries_without_term": sum(r["entries_without_term"] for r in ok),
        "entries_by_name": sum(r.get("entries_by_name", 0) for r in ok),
        "anchors_unresolved": sum(r["anchors_unresolved"] for r in ok),
        "captioned_tables": sum(r["captioned_tables"] for r in ok),
        "captions_covered": sum(r["captions_covered"] for r in ok),
        "caption_rows_unmatched": sum(r["caption_rows_unmatched"] for r in ok),
        "group_rows": sum(r["group_rows"] for r in ok),
        "group_rows_labelled": sum(r["group_rows_labelled"] for r in ok),
        "repeated_lines": sorted(common)[:10], "repeated_line_hits": repeated_chunks,
        "median_page_ms": round(1000 * sorted(r["seconds"] for r in ok)[len(ok) // 2], 1) if ok else None,
        "examples": {
            "nav": [x for r in ok for x in r["nav_examples"]][:3],
            "entries": [f"{r['key']}: {x}" for r in ok for x in r["entry_examples"]][:5],
            "anchors": [f"{r['key']}#{x}" for r in ok for x in r["anchor_examples"]][:5],
            "errors": [f"{r['key']}: {r['error']}" for r in results if "error" in r][:5],
        },
    }
    s["nav_share"] = round(s["nav_chunks"] / total, 4) if total else 0.0
    s["unresolved_share"] = round(s["anchors_unresolved"] / total, 4) if total else 0.0
    s["caption_coverage"] = round(s["captions_covered"] / s["captioned_tables"], 4) if s["captioned_tables"] else None
    return s


def release(old: list[dict[str, Any]], new: list[dict[str, Any]], old_bytes: dict[str, bytes],
            new_bytes: dict[str, bytes]) -> dict[str, Any]:
    before = {r["key"]: r for r in old if "error" not in r}
    after = {r["key"]: r for r in new if "error" not in r}
    common = sorted(set(before) & set(after))
    changed_bytes = [k for k in common if old_bytes[k] != new_bytes[k]]
    rechunked = [k for k in changed_bytes
                 if not (after[k]["content_hash"] and after[k]["content_hash"] == before[k]["content_hash"])]
    embeds = sum(len(set(after[k]["chunk_hashes"]) - set(before[k]["chunk_hashes"])) for k in rechunked)
    embeds += sum(len(after[k]["chunk_hashes"]) for k in set(after) - set(before))
    return {"pages_common": len(common), "pages_bytes_changed": len(changed_bytes), "pages_rechunked": len(rechunked),
            "pages_added": len(set(after) - set(before)), "pages_removed": len(set(before) - set(after)),
            "chunks_to_embed": embeds, "chunks_new_release": sum(r["chunks"] for r in after.values())}


#: Tests that show what the corpora cannot (they run in the suite, not here).
TESTS = {
    "renumber": ("tests/workers/test_definition_terms.py::test_a_renumbered_manual_section_embeds_no_chunk",
                 "tests/workers/test_moves.py::test_a_moved_renamed_or_renumbered_file_embeds_nothing"),
    "anchors": ("tests/workers/test_html_structure.py::test_block_anchors_and_chunk_anchors_are_ids_of_the_page",),
}


#: Entries the check flags whose chunk names a term, but not the one the ground truth expects, and why.
EXPLAINED = {
    "ref/contrib/gis/admin.html: classgeomodeladmin":
        "the note \"This is different from adding the geometry field to readonly_fields\" follows "
        "`.. attribute:: modifiable` (an empty <dd>) inside `class GeoModelAdmin`; the parser gives it to "
        "`modifiable`, the attribute it is about (the chunk names `modifiable`), the raw HTML to the class.",
}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {"corpora": {}, "machine": os.uname().machine, "python": sys.version.split()[0],
                            "load_start": os.getloadavg(), "command": " ".join(["python -m bench.docs_structure",
                                                                                *sys.argv[1:]])}
    parsers = ["current"] if args.no_baseline else ["baseline", "current"]
    for name in PACKAGES:
        versions, roots = fetch(name)
        sets = [pages(r) for r in roots]
        if args.limit:
            keep = sorted(set(sets[-1]))[: args.limit]
            sets = [{k: v for k, v in s.items() if k in keep} for s in sets]
        raw = [{k: p.read_bytes() for k, p in s.items()} for s in sets]
        entry: dict[str, Any] = {"package": PACKAGES[name][0], "versions": versions}
        for which in parsers:
            started = time.perf_counter()
            chosen = sets
            if which == "baseline" and args.baseline_limit and len(sets[-1]) > args.baseline_limit:
                step = -(-len(sets[-1]) // args.baseline_limit)
                sample = set(sorted(sets[-1])[::step])
                chosen = [{k: v for k, v in s.items() if k in sample} for s in sets]
            per_version = [run([(k, str(p), which) for k, p in s.items()], which, args.workers) for s in chosen]
            entry[which] = summarize(per_version[-1])
            entry[which]["release"] = release(per_version[0], per_version[-1], raw[0], raw[-1]) \
                if len(per_version) > 1 else None
            entry[which]["seconds"] = round(time.perf_counter() - started, 1)
            print(f"{name} {which}: {entry[which]['seconds']} s", file=sys.stderr)
        data["corpora"][name] = entry
    data["load_end"] = os.getloadavg()
    return data


def _query_ratio() -> str:
    """The filtered / unfiltered p95 at 100k points, as ``bench/query.py`` last wrote it (it owns that row)."""
    path = ROOT / "bench" / "results" / "query.json"
    try:
        sizes = json.loads(path.read_text()).get("sizes", [])
    except (OSError, ValueError):
        return "not measured yet (`bench/results/query.md` missing)"
    row = next((x for x in sizes if x.get("points") == 100_000), None)
    if row is None or row.get("filtered_over_unfiltered_p95") is None:
        return "no 100k-point row in `bench/results/query.md` yet"
    ratio = row["filtered_over_unfiltered_p95"]
    verdict = "within" if ratio <= 2 else "**not** within"
    return (f"{ratio} x at 100k points ({verdict} 2 x; hybrid with the ~33 % team filter vs. unfiltered, "
            "measured and owned by `python -m bench.query`, see `bench/results/query.md`)")


def _each(cur: dict[str, dict[str, Any]], describe: Any) -> str:
    return "; ".join(f"{name}: {describe(s)}" for name, s in cur.items())


def _nav(s: dict[str, Any]) -> str:
    return f"{s['nav_chunks']} of {s['chunks']} chunks"


def _terms(s: dict[str, Any]) -> str:
    return (f"{s['entries_without_term']} of {s['entries']} entries lack it "
            f"({s.get('entries_by_name', 0)} hold the name, not the whole signature)")


def _anchors(s: dict[str, Any]) -> str:
    return f"{s['anchors_unresolved']} of {s['chunks']} anchors are not"


def _embeds(s: dict[str, Any]) -> str:
    return str((s.get("release") or {}).get("chunks_to_embed", "-"))


def must_show(data: dict[str, Any]) -> list[str]:
    """Issue #15's "Must show", each item read from this run (or a named test / benchmark)."""
    cur = {n: c["current"] for n, c in data["corpora"].items() if "current" in c}
    return [
        "## Must show (issue #15)", "",
        f"- No navigation text in any chunk: {_each(cur, _nav)}.",
        f"- Every variable-list entry's chunk contains its term: {_each(cur, _terms)}; chunks over the model's "
        f"input limit with their header: {_each(cur, lambda s: s.get('over_limit', '-'))}.",
        f"- Renumbering a section embeds 0 chunks: `{TESTS['renumber'][0]}` (a DocBook page, 20.4 -> 20.5) and "
        f"`{TESTS['renumber'][1]}` (Markdown); chunks this point release embeds (on the pages whose extracted content changed): "
        f"{_each(cur, _embeds)}.",
        f"- Filtered query p95 within 2 x unfiltered: {_query_ratio()}.",
        f"- Citation links resolve to an element id of the page: {_each(cur, _anchors)}; "
        f"test `{TESTS['anchors'][0]}`.",
        *[f"- Entry left, {key}: {why}" for n, s in cur.items() for key in s["examples"]["entries"]
          if (why := EXPLAINED.get(key))],
        "",
    ]


def _load(value: Any) -> str:
    return " ".join(f"{x:.2f}" for x in value) if value else "not recorded by that run"


def render(data: dict[str, Any]) -> list[str]:
    md = ["# Structure of generated HTML manuals", "",
          f"`{data.get('command', 'python -m bench.docs_structure')}`: pages of each release parsed and chunked as "
          "the service does.", ""]
    for name, entry in data["corpora"].items():
        parsers = [w for w in ("baseline", "current") if w in entry]
        md += [f"## {name}: `{entry['package']}` {' -> '.join(entry['versions'])}", ""]
        rows = []
        for which in parsers:
            s = entry[which]
            r = s["release"] or {}
            rows.append([which, s["pages"], s["chunks"], f"{s['nav_chunks']} ({100 * s['nav_share']:.1f} %)",
                         f"{s['entries_without_term']} / {s['entries']} ({s.get('entries_by_name', 0)} by name)",
                         f"{s['anchors_unresolved']} ({100 * s['unresolved_share']:.1f} %)",
                         f"{s['captions_covered']} / {s['captioned_tables']}",
                         f"{s['group_rows_labelled']} / {s['group_rows']}",
                         s["repeated_line_hits"],
                         f"{r.get('pages_bytes_changed', '-')} / {r.get('pages_rechunked', '-')}",
                         f"{r.get('chunks_to_embed', '-')} / {r.get('chunks_new_release', '-')}",
                         s.get("over_limit", "-"), s["median_page_ms"]])
        md += table(["parser", "pages", "chunks", "chunks with navigation", "entries whose chunk lacks the term",
                     "anchors not an id of the page", "captions kept", "group rows labelled",
                     "repeated-line hits", "release: pages changed / re-chunked", "release: chunks to embed / all",
                     "chunks over the model's input limit", "median ms/page"],
                    ["l"] + ["r"] * 12, rows)
        cur = entry["current"]
        md += ["", f"Examples (current): navigation {cur['examples']['nav'][:2]}; entries {cur['examples']['entries'][:3]}; "
               f"anchors {cur['examples']['anchors'][:3]}; repeated lines {cur['repeated_lines'][:3]}; "
               f"errors {cur['examples']['errors'][:2]}", ""]
    md += must_show(data)
    md += ["`baseline` is the parser of the last commit (`git show HEAD:workers/parsing/html.py`) with today's chunker;",
           "`current` is the working tree (every page); `baseline` reads every Nth page (`--baseline-limit`, 150 by default). \"Release: chunks to embed\" counts chunk hashes of the newer release the",
           "older lacks, on pages the pipeline would re-chunk (bytes changed and, for `current`, extracted content",
           "hash changed).",
           "An entry \"by name\" holds the term's name (`HttpResponse.set_cookie`, `verify_heapam`, read from the raw",
           "HTML: Sphinx's signature name, else each term up to its parameter list) in every chunk of its description,",
           "not the whole signature. Entries of a back-of-book index, sentences written twice on a page and",
           "descriptions made only of nested entries are not counted (they cannot tell which chunk is the entry's).",
           f"Load average (1, 5, 15 min, 2 cores) at the start / end: {_load(data.get('load_start'))} / "
           f"{_load(data.get('load_end'))}."]
    return md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=0, help="pages per corpus (0 = all)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--no-baseline", action="store_true", help="skip the last commit's parser")
    ap.add_argument("--baseline-limit", type=int, default=150,
                    help="pages per corpus the baseline parser reads (every Nth page; 0 = all)")
    ap.add_argument("--from-json", action="store_true",
                    help="re-render the report from bench/results/docs_structure.json without measuring")
    args = ap.parse_args()
    if args.from_json:
        data = json.loads((ROOT / "bench" / "results" / "docs_structure.json").read_text())
    else:
        data = measure(args)
    write("docs_structure", data, render(data))


if __name__ == "__main__":
    main()
