"""LangChain's ``index()`` on a folder of HTML pages: a full build, then the same pages of a new release.

The pipeline a LangChain user writes: each page's text by BeautifulSoup (``bench.realcorpus.naive_text``, what
``BSHTMLLoader`` hands on), ``RecursiveCharacterTextSplitter`` (1,000 characters, no overlap), then
``langchain_core.indexing.index`` with an ``InMemoryRecordManager`` and an ``InMemoryVectorStore``
(``cleanup="full"``: the folder is the whole corpus, so a page gone from it is deleted; ``source_id_key`` the
page's path), fed lazily, 100 documents a batch (its default).  The ``Embeddings`` calls freshindex's own
embedders on each batch: ``model`` the bundled ONNX MiniLM int8 (``OnnxMiniLM``: its batching and threads),
``hashing`` the hashing embedder; so every system of ``bench.throughput`` pays the same model per text.

It does not measure peak memory (the parent reads it when this process ends) or judge anything.

    python -m bench.peers.langchain_side --old DIR --new DIR --embedder model|hashing --out FILE
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

CHUNK_CHARS = 1000


class FreshindexEmbeddings(Embeddings):
    """LangChain's embedding interface over a freshindex embedder; counts texts and model seconds."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder
        self.embedded = 0
        self.model_s = 0.0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        started = time.perf_counter()
        vectors = self.embedder.embed(texts)
        self.model_s += time.perf_counter() - started
        self.embedded += len(texts)
        return [list(map(float, v)) for v in vectors]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def documents(root: Path) -> Iterator[Document]:
    """The split documents of every page under ``root``, lazily, in path order."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    from bench.realcorpus import naive_text

    splitter = RecursiveCharacterTextSplitter(chunk_size=CHUNK_CHARS, chunk_overlap=0)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = path.relative_to(root).as_posix()
        yield from splitter.split_documents([Document(naive_text(key, path.read_bytes()), metadata={"source": key})])


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(old: Path, new: Path, embedder: str) -> dict[str, Any]:
    """``index()`` over ``old`` into an empty store, then over ``new`` (same record manager and store)."""
    from langchain_core.indexing import InMemoryRecordManager, index
    from langchain_core.vectorstores import InMemoryVectorStore

    if embedder == "model":
        from freshindex.models.onnx import OnnxMiniLM

        model: Any = OnnxMiniLM()
    else:
        from freshindex.models.hashing import HashingEmbedder

        model = HashingEmbedder()
    embeddings = FreshindexEmbeddings(model)
    embeddings.embed_query("warm up the model")  # load time is not build time, on any side
    embeddings.embedded, embeddings.model_s = 0, 0.0
    records = InMemoryRecordManager(namespace="bench")
    records.create_schema()
    store = InMemoryVectorStore(embeddings)

    def build(root: Path) -> dict[str, Any]:
        embedded, model_s, cpu0 = embeddings.embedded, embeddings.model_s, _cpu_s()
        started = time.perf_counter()
        result = index(documents(root), records, store, cleanup="full", source_id_key="source",
                       key_encoder="sha256")
        wall = time.perf_counter() - started
        out = {"wall_s": round(wall, 3), "embedded": embeddings.embedded - embedded,
               "embed_s": round(embeddings.model_s - model_s, 3), "cpu_s": round(_cpu_s() - cpu0, 2),
               "added": result["num_added"], "skipped": result["num_skipped"], "deleted": result["num_deleted"],
               "vectors": len(store.store)}
        print(f"langchain[{embedder}]: {json.dumps(out)}", file=sys.stderr, flush=True)
        return out

    full = build(old)
    return {"full": full, "update": build(new), "embedder": embedder, "langchain_core": _version()}


def _version() -> str:
    from importlib.metadata import version

    return version("langchain-core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--embedder", choices=("model", "hashing"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.write_text(json.dumps(run(args.old, args.new, args.embedder)))


if __name__ == "__main__":
    main()
