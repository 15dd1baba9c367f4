"""The HTML parser's output on real pages, recorded and compared: a parser rewrite must not change it.

``record`` runs the current ``parse_html`` (through :class:`~freshindex.workers.parsing.Parsers`, so the
per-document limits apply as in a sync) on every page of every corpus and writes one JSON line per page:
its corpus and path, and either the error code or the title, ``ParsedDocument.meta`` and every block
(kind, text, heading path, page, meta and the meta's type).  ``compare`` parses the same pages again and
lists every page whose line differs from the recorded one, with the first differing block; it prints the
count of identical pages per corpus.  ``explain`` checks that every difference comes from how the HTML
parsers build the tree (see :func:`explain`).  ``time`` reports the CPU seconds (``time.process_time``) of
``parse_html`` over a corpus, the files read beforehand.

Corpora: ``dj_old`` and ``dj_new`` (two releases of Django's HTML manual, 689 pages each: pass their
folders with ``--django-old``/``--django-new``, ``bench.realcorpus`` unpacks them), ``python311``
(Debian's python3.11-doc, materialised by ``bench.corpora.python311`` into ``--python311``, downloaded
once into the bench cache), ``sample`` (the bundled ``examples/kb``) and ``fixtures`` (every HTML file
under ``tests/``).

    python -m bench.parse_equivalence record --out /tmp/parse-ref.jsonl
    python -m bench.parse_equivalence compare --ref /tmp/parse-ref.jsonl
    python -m bench.parse_equivalence explain --baseline <the reference's commit>
    python -m bench.parse_equivalence time --corpora dj_old,python311 --with-baseline --baseline <commit>
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("dj_old", "dj_new", "python311", "sample", "fixtures")
_HTML = (".html", ".htm", ".xhtml")


def _pages(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in _HTML and p.is_file())


def corpus_folders(args: argparse.Namespace, names: list[str]) -> dict[str, list[tuple[str, Path]]]:
    """Corpus name to its pages, each as (key relative to the corpus folder, path)."""
    out: dict[str, list[tuple[str, Path]]] = {}
    for name in names:
        if name == "python311":
            from bench.corpora import python311

            folder = Path(args.python311)
            if not folder.is_dir() or len(_pages(folder)) < python311.MIN_PAGES:
                python311.materialise(python311.DEFAULT_CACHE, folder)
        else:
            folder = {"dj_old": Path(args.django_old), "dj_new": Path(args.django_new),
                      "sample": ROOT / "examples" / "kb", "fixtures": ROOT / "tests"}[name]
        if not folder.is_dir():
            raise SystemExit(f"{name}: no folder {folder}")
        out[name] = [(p.relative_to(folder).as_posix(), p) for p in _pages(folder)]
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def page_record(parsers: Any, corpus: str, key: str, data: bytes) -> dict[str, Any]:
    """One page's output as plain JSON values."""
    from freshindex.core.errors import DocumentError

    try:
        doc = parsers.parse(data, key)
    except DocumentError as exc:
        return {"corpus": corpus, "path": key, "error": exc.reason}
    return _doc_record(corpus, key, doc)


def _doc_record(corpus: str, key: str, doc: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"corpus": corpus, "path": key}
    rec["title"] = doc.title
    rec["meta"] = _jsonable(dict(doc.meta))
    rec["blocks"] = [
        {"kind": str(b.kind), "text": b.text, "heading_path": list(b.heading_path), "page": b.page,
         "meta_type": type(b.meta).__name__, "meta": _jsonable(b.meta.to_dict())}
        for b in doc.blocks
    ]
    return rec


def records(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    from freshindex.workers.parsing import Parsers

    parsers = Parsers()
    for corpus, pages in corpus_folders(args, args.corpora.split(",")).items():
        for key, path in pages:
            yield page_record(parsers, corpus, key, path.read_bytes())


def record(args: argparse.Namespace) -> None:
    counts: Counter[str] = Counter()
    with open(args.out, "w", encoding="utf-8") as out:
        for rec in records(args):
            out.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
            counts[rec["corpus"]] += 1
    print(json.dumps({"recorded": dict(counts), "out": args.out}))


def _first_difference(ref: dict[str, Any], new: dict[str, Any]) -> str:
    for field in ("error", "title"):
        if ref.get(field) != new.get(field):
            return f"{field}: {ref.get(field)!r} -> {new.get(field)!r}"
    a, b = ref.get("blocks", []), new.get("blocks", [])
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            keys = [k for k in x if x.get(k) != y.get(k)]
            return f"block {i} {keys}: {json.dumps(x, ensure_ascii=False)[:400]} -> {json.dumps(y, ensure_ascii=False)[:400]}"
    if len(a) != len(b):
        return f"{len(a)} blocks -> {len(b)} blocks"
    return f"meta: {ref.get('meta')!r} -> {new.get('meta')!r}"


def compare(args: argparse.Namespace) -> int:
    ref: dict[tuple[str, str], dict[str, Any]] = {}
    with open(args.ref, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            ref[rec["corpus"], rec["path"]] = rec
    same: Counter[str] = Counter()
    total: Counter[str] = Counter()
    differing = 0
    for rec in records(args):
        rec = json.loads(json.dumps(rec, ensure_ascii=False))  # tuples as lists, as recorded
        where = (rec["corpus"], rec["path"])
        total[rec["corpus"]] += 1
        old = ref.pop(where, None)
        if old == rec:
            same[rec["corpus"]] += 1
            continue
        differing += 1
        print(f"DIFF {where[0]}/{where[1]}: " + (_first_difference(old, rec) if old else "not in the reference"))
    for corpus, key in sorted(ref):
        if corpus in total:
            print(f"MISSING {corpus}/{key}")
            differing += 1
    print(json.dumps({c: f"{same[c]}/{total[c]} identical" for c in total}))
    return 1 if differing else 0


_BASELINE_MODULES = ("soup", "furniture", "html_walk", "html")


def _baseline_parse_html(commit: str) -> Any:
    """``parse_html`` as of ``commit`` (its html, html_walk, furniture and soup modules, read with ``git show``)."""
    import importlib.util
    import subprocess
    import tempfile

    folder = Path(tempfile.mkdtemp())
    saved = {n: sys.modules.get(f"freshindex.workers.parsing.{n}") for n in _BASELINE_MODULES}
    module = None
    try:
        for name in _BASELINE_MODULES:
            src = subprocess.run(["git", "show", f"{commit}:workers/parsing/{name}.py"], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout
            path = folder / f"{name}.py"
            path.write_text(src)
            spec = importlib.util.spec_from_file_location(f"freshindex.workers.parsing.{name}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is not None:
                sys.modules[f"freshindex.workers.parsing.{name}"] = old
            else:
                sys.modules.pop(f"freshindex.workers.parsing.{name}", None)
    return module.parse_html  # type: ignore[union-attr]


def _as_lxml_reads_it(data: bytes) -> bytes:
    """The page as libxml2's HTML parser builds it, written back out as HTML."""
    from lxml import etree

    from freshindex.workers.parsing.decode import decode_text

    text = decode_text(data)
    text = text[text.index("?>") + 2:] if text.startswith("<?xml") else text
    root = etree.fromstring(text, etree.HTMLParser(huge_tree=True))
    return etree.tostring(root, method="html", encoding="unicode", doctype="<!DOCTYPE html>").encode()


def explain(args: argparse.Namespace) -> int:
    """For each page whose output differs from the reference: does the parser of ``--baseline`` give the new
    output when it reads the page as libxml2 builds it?  Then the difference is in how the two HTML parsers
    build the tree of a malformed page (a ``<p>`` holding a block, closed by the block in libxml2 as in the
    HTML standard, nested in html.parser), not in what is read from the tree."""
    from freshindex.workers.parsing import limits

    old_parse = _baseline_parse_html(args.baseline)
    ref: dict[tuple[str, str], dict[str, Any]] = {}
    with open(args.ref, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            ref[rec["corpus"], rec["path"]] = rec
    from freshindex.workers.parsing import Parsers

    parsers, tree_only, other = Parsers(), Counter[str](), 0
    for corpus, pages in corpus_folders(args, args.corpora.split(",")).items():
        for key, path in pages:
            data = path.read_bytes()
            new = json.loads(json.dumps(page_record(parsers, corpus, key, data), ensure_ascii=False))
            if ref.get((corpus, key)) == new:
                continue
            with limits.applied(parsers.limits):
                doc = old_parse(_as_lxml_reads_it(data), key)
            old_on_tree = json.loads(json.dumps(_doc_record(corpus, key, doc), ensure_ascii=False))
            if old_on_tree == new:
                tree_only[corpus] += 1
                print(f"TREE {corpus}/{key}")
            else:
                other += 1
                print(f"OTHER {corpus}/{key}: {_first_difference(old_on_tree, new)}")
    print(json.dumps({"tree_construction_only": dict(tree_only), "other": other}))
    return 1 if other else 0


def timing(args: argparse.Namespace) -> None:
    """CPU seconds of ``parse_html`` per corpus (best of ``--repeat``); with ``--with-baseline``, also of the
    ``parse_html`` of ``--baseline``, on the same pages in the same process."""
    from freshindex.workers.parsing import limits
    from freshindex.workers.parsing.html import parse_html

    parsers = {"current": parse_html}
    if args.with_baseline:
        parsers[f"baseline {args.baseline}"] = _baseline_parse_html(args.baseline)
    result: dict[str, Any] = {}
    for corpus, pages in corpus_folders(args, args.corpora.split(",")).items():
        datas = [(key, path.read_bytes()) for key, path in pages]
        result[corpus] = {"pages": len(datas)}
        for name, parse in parsers.items():
            best = None
            for _ in range(args.repeat):
                start = time.process_time()
                for key, data in datas:
                    with limits.applied(limits.Limits()):
                        parse(data, key)
                spent = time.process_time() - start
                best = spent if best is None else min(best, spent)
            result[corpus][f"{name} cpu_s"] = round(best or 0.0, 2)
    print(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("record", "compare", "explain", "time"))
    ap.add_argument("--corpora", default=",".join(NAMES))
    ap.add_argument("--out", default="/tmp/parse-ref.jsonl")
    ap.add_argument("--ref", default="/tmp/parse-ref.jsonl")
    ap.add_argument("--django-old", default="/tmp/dj_old")
    ap.add_argument("--django-new", default="/tmp/dj_new")
    ap.add_argument("--python311", default="/tmp/py311")
    ap.add_argument("--baseline", default="HEAD", help="explain: the commit whose parser made the reference")
    ap.add_argument("--with-baseline", action="store_true", help="time: the baseline's parser too")
    ap.add_argument("--repeat", type=int, default=1, help="time: best of this many runs")
    args = ap.parse_args(argv)
    if args.command == "record":
        record(args)
        return 0
    if args.command == "compare":
        return compare(args)
    if args.command == "explain":
        return explain(args)
    timing(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
