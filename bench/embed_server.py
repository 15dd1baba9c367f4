"""A local embedding server speaking both remote protocols, over the bundled ONNX model.

``POST /v1/embeddings`` answers as OpenAI does and ``POST /embed`` as Hugging
Face text-embeddings-inference does, both from :class:`OnnxMiniLM` (or any
in-process embedder), so the remote embedders (``freshindex/models/remote.py``)
are tested and measured against a real HTTP server with a real model.  Like
the real servers it refuses an input over the model's limit (OpenAI 400, TEI
422; TEI truncates only when asked) and a batch over ``max_batch`` (413).

For tests it records every request (protocol, input count, token counts,
arrival time) and plays queued faults, one per request: an HTTP status with
headers (429 with ``Retry-After``) or a delay before answering.

Run it alone (bench.remote_embed does): ``python -m bench.embed_server --port 8089``.
"""

from __future__ import annotations

import argparse
import base64
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass
class Fault:
    """What the next request gets instead of (``status``) or before (``delay_s``) its answer."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Seen:
    protocol: str
    inputs: int
    tokens: tuple[int, ...]
    at: float
    authorization: str | None
    encoding_format: str | None = None  # openai: as asked (float when absent)


class EmbedServer:
    def __init__(self, embedder: Any, *, model: str = "all-MiniLM-L6-v2", max_batch: int = 512) -> None:
        self.embedder = embedder
        self.model = model
        self.max_batch = max_batch
        self.requests: list[Seen] = []
        self.faults: deque[Fault] = deque()
        self.in_flight = 0
        self.max_seen_in_flight = 0
        self._lock = threading.Lock()
        #: One model run at a time, as one model instance of a real server: concurrent requests queue.
        self._model = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.faults.clear()
            self.max_seen_in_flight = 0

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/embeddings", self._openai, methods=["POST"]),
            Route("/embed", self._tei, methods=["POST"]),
            Route("/health", lambda _r: Response("ok"), methods=["GET"]),
        ])

    async def _openai(self, request: Request) -> Response:
        body = await request.json()
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return JSONResponse({"error": {"message": "input must be a string or a list of strings"}}, 400)
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            return JSONResponse({"error": {"message": f"unknown encoding_format {encoding!r}"}}, 400)
        return await self._serve("openai", request, texts, truncate=False, encoding=encoding)

    async def _tei(self, request: Request) -> Response:
        body = await request.json()
        texts = body.get("inputs")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list):
            return JSONResponse({"error": "inputs must be a string or a list of strings"}, 422)
        return await self._serve("tei", request, texts, truncate=bool(body.get("truncate", False)))

    async def _serve(self, protocol: str, request: Request, texts: list[str], *, truncate: bool,
                     encoding: str | None = None) -> Response:
        from starlette.concurrency import run_in_threadpool

        tokens = self.embedder.count_tokens(texts)
        with self._lock:
            self.requests.append(Seen(protocol, len(texts), tuple(tokens), time.monotonic(),
                                      request.headers.get("authorization"), encoding))
            fault = self.faults.popleft() if self.faults else None
            self.in_flight += 1
            self.max_seen_in_flight = max(self.max_seen_in_flight, self.in_flight)
        try:
            if fault is not None and fault.delay_s:
                import asyncio

                await asyncio.sleep(fault.delay_s)
            if fault is not None and fault.status:
                return JSONResponse({"error": f"injected {fault.status}"}, fault.status, headers=fault.headers)
            if len(texts) > self.max_batch:
                return JSONResponse({"error": f"batch size {len(texts)} > max_client_batch_size {self.max_batch}"},
                                    413)
            limit = self.embedder.max_input_tokens
            if not truncate and any(n > limit for n in tokens):
                message = f"inputs must have less than {limit} tokens"
                return JSONResponse({"error": {"message": message}} if protocol == "openai" else {"error": message},
                                    400 if protocol == "openai" else 422)
            vectors = await run_in_threadpool(self._embed, texts)
        finally:
            with self._lock:
                self.in_flight -= 1
        if protocol == "tei":
            return JSONResponse(vectors.tolist())
        rows = ([base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
                if encoding == "base64" else vectors.tolist())
        return JSONResponse({
            "object": "list", "model": self.model,
            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(rows)],
            "usage": {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)},
        })


    def _embed(self, texts: list[str]) -> Any:
        with self._model:
            return self.embedder.embed(texts)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    from freshindex.models.onnx import OnnxMiniLM

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--threads", type=int, default=0, help="ONNX model runs at once, one core each (0: one per core)")
    args = parser.parse_args(argv)
    server = EmbedServer(OnnxMiniLM(threads=args.threads))
    uvicorn.run(server.app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
