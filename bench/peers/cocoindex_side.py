"""CocoIndex 1.0 on a folder of HTML pages: a full build, then the same folder updated to a new release.

The pipeline a CocoIndex user writes after its text-embedding example: ``localfs.walk_dir`` over the pages, one
memoised component per file (``process_file``, re-run only for a file whose content changed), the page's text by
BeautifulSoup (``bench.realcorpus.naive_text``, as the LangChain side reads it), CocoIndex's own
``RecursiveSplitter`` (:data:`CHUNK_BYTES` bytes, no overlap), one memoised ``embed`` per chunk (so an unchanged
chunk of a changed page is not embedded again) over a batching custom function (``batching=True``, at most
:data:`MAX_BATCH` texts, as CocoIndex's ``SentenceTransformerEmbedder`` does), and the rows in PostgreSQL through
its ``postgres`` target.  The custom function calls freshindex's own embedders: ``model`` is the bundled ONNX
MiniLM int8 (``freshindex.models.onnx.OnnxMiniLM``, its batching and its threads), ``hashing`` the hashing
embedder; so both sides pay the same model per text.

State: CocoIndex's LMDB under ``--work`` (the bench cache, ``~/.cache/freshindex-bench/cocoindex/`` when run by
``bench.throughput``), usage tracking off; rows in a database of their own (``--db``, dropped and created
again at the start, so a full build starts empty).  The server has no pgvector: vectors are stored as ``bytea``
(float32), the cheapest column for them.

It does not measure peak memory (the parent reads it when this process ends) or judge anything.

    python -m bench.peers.cocoindex_side --old DIR --new DIR --work DIR --embedder model|hashing --out FILE
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Any

#: CocoIndex's splitter counts bytes; the LangChain side's splitter 1,000 characters (mostly ASCII here).
CHUNK_BYTES = 1000
#: Texts a batch of the custom embedding function, as CocoIndex's SentenceTransformerEmbedder.
MAX_BATCH = 64
DEFAULT_DB = "freshindex_bench_cocoindex"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
TABLE = "chunks"

#: The embedder the custom function calls (set before the first update) and what it did.
EMBEDDER: Any = None
STATS = {"embedded": 0, "model_s": 0.0, "batches": 0}


@dataclass
class ChunkRow:
    id: int
    filename: str
    chunk_start: int
    text: str
    embedding: bytes


def reset_database(name: str, admin: str = PG_ADMIN) -> str:
    """Drop ``name`` if it exists and create it empty; its URL."""
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin.rsplit("/", 1)[0] + "/" + name


def count_rows(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    return int(row[0]) if row else 0


def make_app(source: pathlib.Path, db_url: str, name: str) -> Any:
    """The CocoIndex app over ``source`` (its functions defined here, so the module imports without cocoindex)."""
    import asyncpg
    import cocoindex as coco
    from cocoindex.connectors import localfs, postgres
    from cocoindex.ops.text import RecursiveSplitter
    from cocoindex.resources.chunk import Chunk
    from cocoindex.resources.file import FileLike
    from cocoindex.resources.id import IdGenerator

    from bench.realcorpus import naive_text

    pg = coco.ContextKey[asyncpg.Pool]("freshindex_bench_pg")
    splitter = RecursiveSplitter()

    @coco.lifespan
    async def lifespan(builder: coco.EnvironmentBuilder) -> Any:
        async with asyncpg.create_pool(db_url) as pool:
            builder.provide(pg, pool)
            yield

    @coco.fn.as_async(batching=True, max_batch_size=MAX_BATCH)
    def embed_batch(texts: list[str]) -> list[bytes]:
        started = time.perf_counter()
        vectors = EMBEDDER.embed(texts)
        STATS["model_s"] += time.perf_counter() - started
        STATS["embedded"] += len(texts)
        STATS["batches"] += 1
        return [v.astype("float32").tobytes() for v in vectors]

    @coco.fn(memo=True)
    async def embed(text: str) -> bytes:
        return await embed_batch(text)  # type: ignore[no-any-return]

    @coco.fn
    async def process_chunk(chunk: Chunk, filename: str, id_gen: IdGenerator,
                            table: postgres.TableTarget[ChunkRow]) -> None:
        table.declare_row(row=ChunkRow(id=await id_gen.next_id(chunk.text), filename=filename,
                                       chunk_start=chunk.start.char_offset, text=chunk.text,
                                       embedding=await embed(chunk.text)))

    @coco.fn(memo=True)
    async def process_file(file: FileLike, table: postgres.TableTarget[ChunkRow]) -> None:
        key = file.file_path.path.as_posix()
        text = naive_text(key, await file.read())
        chunks = splitter.split(text, chunk_size=CHUNK_BYTES, chunk_overlap=0)
        await coco.map(process_chunk, chunks, key, IdGenerator(), table)

    @coco.fn
    async def app_main(sourcedir: pathlib.Path) -> None:
        table = await postgres.mount_table_target(
            pg, table_name=TABLE,
            table_schema=await postgres.TableSchema.from_class(ChunkRow, primary_key=["id"]))
        files = localfs.walk_dir(sourcedir, recursive=True)
        await coco.mount_each(process_file, files.items(), table)

    del lifespan  # registered by its decorator
    return coco.App(coco.AppConfig(name=name), app_main, sourcedir=source)


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(old: pathlib.Path, new: pathlib.Path, work: pathlib.Path, embedder: str, db: str = DEFAULT_DB,
        ) -> dict[str, Any]:
    """Full build of ``old`` (copied to a source folder), then that folder made ``new`` and updated."""
    global EMBEDDER
    from bench.realcorpus import _tree, materialise

    if embedder == "model":
        from freshindex.models.onnx import OnnxMiniLM

        EMBEDDER = OnnxMiniLM()
    else:
        from freshindex.models.hashing import HashingEmbedder

        EMBEDDER = HashingEmbedder()
    EMBEDDER.embed(["warm up the model"])  # load time is not build time, on either side
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.environ.setdefault("COCOINDEX_DISABLE_USAGE_TRACKING", "1")  # both read when CocoIndex's engine starts
    os.environ["COCOINDEX_DB"] = str(work / "state")  # its LMDB
    source = work / "source"
    materialise(_tree(old), source)
    url = reset_database(db)
    app = make_app(source, url, f"freshindex_bench_{embedder}")

    def update() -> dict[str, Any]:
        embedded, model_s, cpu0 = STATS["embedded"], STATS["model_s"], _cpu_s()
        started = time.perf_counter()
        app.update_blocking()
        wall = time.perf_counter() - started
        out = {"wall_s": round(wall, 3), "embedded": STATS["embedded"] - embedded,
               "embed_s": round(STATS["model_s"] - model_s, 3), "cpu_s": round(_cpu_s() - cpu0, 2),
               "rows": count_rows(url)}
        print(f"cocoindex[{embedder}]: {json.dumps(out)}", file=sys.stderr, flush=True)
        return out

    full = update()
    materialise(_tree(new), source)
    return {"full": full, "update": update(), "embedder": embedder, "chunk_bytes": CHUNK_BYTES,
            "cocoindex": _version()}


def _version() -> str:
    from importlib.metadata import version

    return version("cocoindex")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=pathlib.Path, required=True)
    parser.add_argument("--new", type=pathlib.Path, required=True)
    parser.add_argument("--work", type=pathlib.Path, required=True)
    parser.add_argument("--embedder", choices=("model", "hashing"), required=True)
    parser.add_argument("--db", default=DEFAULT_DB)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args()
    args.out.write_text(json.dumps(run(args.old, args.new, args.work, args.embedder, args.db)))


if __name__ == "__main__":
    main()
