"""The bytes of a ``qdrant-client`` collection archive: snapshot transfer and the local mode's JSON lines.

A server archives a collection as its native snapshot, downloaded from (or
uploaded to) its REST address; local mode has no snapshots, so an archive is
every point as a JSON line after a ``{"dim": ...}`` head, gzip-compressed.
:meth:`vectorstore.qdrant.QdrantStore.export_collection` and
``import_collection`` decide which and name the collections; this module
moves the bytes.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from freshindex.core.errors import StoreError
from freshindex.vectorstore.base import DENSE, LEXICAL


def rest_url(client: QdrantClient) -> str:
    """The server's REST address, as the client was given it (no trailing slash)."""
    rest = getattr(client._client, "rest_uri", None) or getattr(client._client, "_rest_uri", None)
    if not rest:
        raise StoreError("cannot tell the Qdrant server's REST address from the client")
    return str(rest).rstrip("/")


def api_headers(client: QdrantClient) -> dict[str, str]:
    """The client's API key as a request header (none without one)."""
    key = getattr(client._client, "_api_key", None)
    return {"api-key": key} if key else {}


def download_snapshot(client: QdrantClient, name: str, snapshot: str, dest: Path) -> None:
    """Stream the server snapshot ``snapshot`` of collection ``name`` into ``dest``."""
    url = f"{rest_url(client)}/collections/{name}/snapshots/{snapshot}"
    try:
        with httpx.stream("GET", url, headers=api_headers(client), timeout=600) as r:
            r.raise_for_status()
            with open(dest, "wb") as fh:
                for part in r.iter_bytes(1 << 20):
                    fh.write(part)
    except httpx.HTTPError as exc:
        raise StoreError(f"cannot download the snapshot of {name}: {exc}") from exc


def upload_snapshot(client: QdrantClient, name: str, source: Path | str) -> None:
    """Upload the local snapshot file ``source`` and recover collection ``name`` from it (``priority=snapshot``)."""
    url = f"{rest_url(client)}/collections/{name}/snapshots/upload?priority=snapshot&wait=true"
    try:
        with open(source, "rb") as fh:
            r = httpx.post(url, files={"snapshot": fh}, headers=api_headers(client), timeout=3600)
        r.raise_for_status()
    except httpx.HTTPError as exc:
        raise StoreError(f"cannot upload the snapshot for {name}: {exc}") from exc


def write_lines(dest: Path, dim: int, pages: Iterable[Sequence[Any]]) -> None:
    """Write the head and every record of ``pages`` (scrolled with payloads and vectors) as gzipped JSON lines."""
    with gzip.open(dest, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"dim": dim}) + "\n")
        for records in pages:
            for r in records:
                row = {"id": str(r.id), "vector": r.vector[DENSE], "payload": r.payload}
                sv = r.vector.get(LEXICAL)
                if sv is not None:
                    row["lexical"] = {"indices": list(sv.indices), "values": list(sv.values)}
                fh.write(json.dumps(row) + "\n")


def read_lines(source: Path | str, *, create: Callable[[int], None],
               write: Callable[[list[qm.PointStruct]], None], batch: int) -> None:
    """Read an archive of :func:`write_lines`: ``create(dim)`` once, then ``write`` its points ``batch`` at a time."""
    with gzip.open(Path(source), "rt", encoding="utf-8") as fh:
        head = json.loads(fh.readline())
        create(int(head["dim"]))
        points: list[qm.PointStruct] = []
        for line in fh:
            row = json.loads(line)
            vectors: dict[str, Any] = {DENSE: row["vector"]}
            if row.get("lexical"):
                vectors[LEXICAL] = qm.SparseVector(**row["lexical"])
            points.append(qm.PointStruct(id=row["id"], vector=vectors, payload=row["payload"]))
            if len(points) >= batch:
                write(points)
                points = []
        if points:
            write(points)
