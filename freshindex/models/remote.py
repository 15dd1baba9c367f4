"""Remote embedders: an OpenAI-compatible ``/embeddings`` server or Hugging Face text-embeddings-inference.

``embedding.provider = openai`` speaks the OpenAI embeddings API (OpenAI,
Azure OpenAI, vLLM, Ollama, LiteLLM and others copy it): ``POST
<base_url>/embeddings`` with ``{"model", "input": [...]}``.  ``tei`` speaks
TEI's own ``POST <base_url>/embed`` with ``{"inputs": [...], "truncate":
false}``.  Both sit behind the same synchronous :class:`Embedder` interface
as the in-process model.

What one :meth:`RemoteEmbedder.embed` call does:

1. counts every text's tokens (``embedding.tokenizer_file``, else the bundled
   MiniLM tokenizer) and *refuses* the call if a text is over
   ``embedding.max_input_tokens``: :class:`InputTooLongError`, a
   :class:`DocumentError` naming the text, its count and the limit.  The
   rule is split-or-refuse, never truncate: the chunker already cuts chunks
   to the same counter and limit (``Services.chunker``), so a pipeline chunk
   never gets here too long; a text that does (a stored chunk re-embedded
   after a switch to a model with a smaller limit) fails its document or its
   build with that message.  TEI is asked not to truncate either
   (``truncate: false``), so its own count refuses what ours under-counts;
2. cuts the texts, in order, into requests of at most
   ``embedding.batch_max_inputs`` texts and ``embedding.batch_max_tokens``
   tokens (a text over the token budget goes alone);
3. sends up to ``embedding.max_in_flight`` requests at once (a thread pool
   and one pooled ``httpx.Client``; a semaphore bounds the requests of all
   concurrent calls of the process together);
4. retries a request on 429, 5xx, a timeout (``embedding.timeout_s``) or a
   connection error, up to ``embedding.retries`` times, with tenacity:
   after a ``Retry-After`` header it waits that long plus jitter (never
   less); otherwise a jittered exponential backoff.  A server asking for
   more than ``embedding.retry_max_wait_s`` fails the call at once
   (:class:`EmbeddingError`, retryable: the task shell tries later);
5. reads each answer (openai: vectors asked for as base64 float32, as
   OpenAI's own SDK does, a fifth of the bytes of JSON numbers and about
   20 times cheaper to decode; numbers are read too) and checks it: as many
   vectors as texts, each of
   ``embedding.dimensions`` (else :class:`ConfigError`, before anything is
   cached or written), and L2-normalises them.

The model id (``openai:<model>:<dimensions>``, plus ``@<model_revision>``)
is the vector-cache key, so a switch of model, size or revision re-embeds
and never mixes vectors.  The API key is read from ``embedding.api_key_file``
once; it is sent as a header, never logged, and cut out of any server text
quoted in an error.  Metrics: ``freshindex_remote_embed_requests_total``
(by outcome), ``freshindex_remote_embed_request_seconds`` and
``freshindex_remote_embed_retries_total``.

Not guaranteed: that the server's model is the one ``embedding.model``
names (only ``dimensions`` is checked); that token counts are exact when no
``tokenizer_file`` of the served model is given; ordering or fairness between
concurrent calls beyond the shared in-flight bound.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from freshindex.core.errors import ConfigError, DocumentError, EmbeddingError

log = logging.getLogger("freshindex.embedding")

Provider = Literal["openai", "tei"]
#: Outcomes that are tried again (label values of the retry metric).
RETRIED = frozenset({"throttled", "unavailable", "server_error", "timeout", "connect"})


class InputTooLongError(DocumentError):
    """A text is over the model's input limit: refused, not truncated (the document or build fails)."""

    def __init__(self, detail: str, indices: Sequence[int]) -> None:
        super().__init__(DocumentError.TOO_LARGE, detail)
        self.indices = tuple(indices)


class _Transient(Exception):
    """One failed attempt that may succeed if tried again (internal to the retry loop)."""

    def __init__(self, outcome: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.retry_after = retry_after


@dataclass(frozen=True)
class RemoteOptions:
    """What a remote embedder needs; :meth:`from_settings` maps ``embedding.*`` onto it."""

    provider: Provider
    base_url: str
    model: str
    dimensions: int
    api_key: str | None = field(default=None, repr=False)
    api_key_header: Literal["authorization", "api-key"] = "authorization"
    request_dimensions: bool = False
    #: openai: how vectors come back; base64 (float32 little-endian) is what OpenAI's own SDK asks for.
    encoding_format: Literal["base64", "float"] = "base64"
    model_revision: str = ""
    max_input_tokens: int = 512
    tokenizer_file: Path | None = None
    batch_max_inputs: int = 64
    batch_max_tokens: int = 8192
    max_in_flight: int = 4
    timeout_s: float = 30.0
    retries: int = 5
    retry_max_wait_s: float = 60.0
    #: First step of the exponential backoff (seconds) when no Retry-After was sent.
    backoff_s: float = 0.5

    @classmethod
    def from_settings(cls, e: Any) -> RemoteOptions:
        """From ``Settings.embedding``; reads the API key file (a :class:`ConfigError` that never quotes it)."""
        return cls(
            provider=e.provider, base_url=e.base_url, model=e.model, dimensions=e.dimensions,
            api_key=read_api_key(e.api_key_file) if e.api_key_file else None, api_key_header=e.api_key_header,
            request_dimensions=e.request_dimensions, encoding_format=e.encoding_format,
            model_revision=e.model_revision,
            max_input_tokens=e.max_input_tokens, tokenizer_file=e.tokenizer_file,
            batch_max_inputs=e.batch_max_inputs, batch_max_tokens=e.batch_max_tokens, max_in_flight=e.max_in_flight,
            timeout_s=e.timeout_s, retries=e.retries, retry_max_wait_s=e.retry_max_wait_s,
        )


def read_api_key(path: Path | str) -> str:
    """The key in ``path`` (surrounding whitespace stripped); errors name the file, never its content."""
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"embedding.api_key_file {path}: cannot read it ({reason})") from None
    if not key or any(ch in key for ch in "\r\n"):
        raise ConfigError(f"embedding.api_key_file {path}: expected one line holding the key")
    return key


def plan_requests(counts: Sequence[int], *, max_inputs: int, max_tokens: int) -> list[list[int]]:
    """Indices of ``counts`` in order, cut into requests of at most ``max_inputs`` texts and
    ``max_tokens`` tokens in total; a text over ``max_tokens`` alone makes a request of its own."""
    if max_inputs < 1 or max_tokens < 1:
        raise ValueError("max_inputs and max_tokens must be at least 1")
    batches: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i, n in enumerate(counts):
        if current and (len(current) >= max_inputs or used + n > max_tokens):
            batches.append(current)
            current, used = [], 0
        current.append(i)
        used += n
    if current:
        batches.append(current)
    return batches


def retry_after_seconds(value: str | None, *, now: Callable[[], float] = time.time) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


class RemoteEmbedder:
    """An embedding model behind HTTP (see the module doc for what one call does)."""

    #: The model runs in another process: a call cannot take this one down (``core.types.may_kill_the_process``).
    #: It counts tokens here (the native ``tokenizers`` WordPiece) on texts the chunker has already counted with the
    #: same kind of counter, so a text that could kill the counter would have killed the chunking first.
    cannot_kill_process = True

    def __init__(self, options: RemoteOptions, *, metrics: Any = None, transport: httpx.BaseTransport | None = None,
                 count_tokens: Callable[[Sequence[str]], list[int]] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if options.provider not in ("openai", "tei"):
            raise ConfigError(f"not a remote embedding provider: {options.provider!r}")
        if not options.base_url or options.dimensions < 1:
            raise ConfigError(f"embedding.provider={options.provider} needs embedding.base_url and "
                              "embedding.dimensions")
        self.options = options
        self._metrics = metrics
        self._sleep = sleep
        base = httpx.URL(options.base_url)
        endpoint = "embeddings" if options.provider == "openai" else "embed"
        self._url = base.copy_with(path=base.path.rstrip("/") + "/" + endpoint)
        #: The endpoint as errors and logs name it: no credentials, no query string.
        self.where = f"{options.provider} {self._url.copy_with(query=None, userinfo=b'')}"
        headers = {}
        if options.api_key:
            if options.api_key_header == "api-key":
                headers["api-key"] = options.api_key
            else:
                headers["Authorization"] = f"Bearer {options.api_key}"
        self._client = httpx.Client(
            headers=headers, transport=transport,
            timeout=httpx.Timeout(options.timeout_s, connect=min(options.timeout_s, 10.0)),
            limits=httpx.Limits(max_connections=options.max_in_flight,
                                max_keepalive_connections=options.max_in_flight),
        )
        self._slots = threading.BoundedSemaphore(options.max_in_flight)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        if count_tokens is None:
            if options.tokenizer_file is not None:
                from freshindex.models.tokens import WordPieceCounter

                try:
                    count_tokens = WordPieceCounter(options.tokenizer_file)
                except Exception as exc:  # tokenizers raises plain Exception for a file it cannot read
                    raise ConfigError(f"embedding.tokenizer_file {options.tokenizer_file}: {exc}") from exc
            else:
                from freshindex.models.tokens import minilm_count

                count_tokens = minilm_count
        self._count = count_tokens

    # -- the Embedder interface ---------------------------------------------------

    @property
    def model_id(self) -> str:
        o = self.options
        key = f"{o.provider}:{o.model}:{o.dimensions}"
        return f"{key}@{o.model_revision}" if o.model_revision else key

    @property
    def dimension(self) -> int:
        return self.options.dimensions

    @property
    def max_input_tokens(self) -> int:
        return self.options.max_input_tokens

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self._count(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        counts = self._count(texts)
        self._refuse_long(counts)
        batches = plan_requests(counts, max_inputs=self.options.batch_max_inputs,
                                max_tokens=self.options.batch_max_tokens)
        if len(batches) == 1:
            out[:] = self._request([texts[i] for i in batches[0]])
        else:
            pool = self._executor()
            futures = [(idx, pool.submit(self._request, [texts[i] for i in idx])) for idx in batches]
            try:
                for idx, fut in futures:
                    out[idx] = fut.result()
            finally:
                for _, fut in futures:
                    fut.cancel()  # the first failure fails the call: queued requests are not sent
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.clip(norms, 1e-12, None)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    # -- steps ----------------------------------------------------------------------

    def _refuse_long(self, counts: Sequence[int]) -> None:
        limit = self.options.max_input_tokens
        over = [i for i, n in enumerate(counts) if n > limit]
        if over:
            worst = max(over, key=lambda i: counts[i])
            raise InputTooLongError(
                f"{len(over)} of {len(counts)} texts are over the input limit of {self.model_id} "
                f"(embedding.max_input_tokens={limit}); the longest, text {worst}, has {counts[worst]} tokens. "
                "Refused, not truncated: re-chunk for this model (chunks are cut to the same limit) or raise the "
                "limit if the model takes more", over)

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.options.max_in_flight,
                                                thread_name_prefix="embed-remote")
            return self._pool

    def _request(self, texts: list[str]) -> np.ndarray:
        """One request's vectors, retried through throttling and outages (module doc, step 4)."""
        retrying = Retrying(
            retry=retry_if_exception_type(_Transient), stop=stop_after_attempt(self.options.retries + 1),
            wait=self._wait, sleep=self._sleep, before_sleep=self._before_retry, reraise=True,
        )
        try:
            return retrying(self._post, texts)
        except _Transient as exc:
            raise EmbeddingError(f"{self.where}: {self.options.retries + 1} attempts failed, last: {exc}") from None

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        backoff = wait_random_exponential(multiplier=self.options.backoff_s, max=self.options.retry_max_wait_s)
        if isinstance(exc, _Transient) and exc.retry_after is not None:
            # The server's word, never less; jitter on top so throttled workers do not return in step.
            return exc.retry_after + random.uniform(0, min(self.options.backoff_s, self.options.retry_max_wait_s))
        return backoff(state)

    def _before_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        outcome = exc.outcome if isinstance(exc, _Transient) else "error"
        if self._metrics is not None:
            self._metrics.remote_embed_retries.labels(self.options.provider, outcome).inc()
        wait = state.next_action.sleep if state.next_action else 0.0
        log.info("remote embedding retry", extra={"event": "embed_retry", "endpoint": self.where, "outcome": outcome,
                                                  "attempt": state.attempt_number, "wait_s": round(wait, 3),
                                                  "error": str(exc)})

    def _body(self, texts: list[str]) -> dict[str, Any]:
        o = self.options
        if o.provider == "tei":
            return {"inputs": texts, "normalize": True, "truncate": False}
        body: dict[str, Any] = {"model": o.model, "input": texts, "encoding_format": o.encoding_format}
        if o.request_dimensions:
            body["dimensions"] = o.dimensions
        return body

    def _post(self, texts: list[str]) -> np.ndarray:
        with self._slots:
            started = time.perf_counter()
            outcome = "connect"
            try:
                try:
                    resp = self._client.post(self._url, json=self._body(texts))
                except httpx.TimeoutException:
                    outcome = "timeout"
                    raise _Transient(outcome, f"no answer within embedding.timeout_s={self.options.timeout_s}s"
                                     ) from None
                except httpx.TransportError as exc:
                    raise _Transient(outcome, f"cannot reach the server ({type(exc).__name__})") from None
                outcome = _outcome(resp.status_code)
            finally:
                if self._metrics is not None:
                    self._metrics.remote_embed_requests.labels(self.options.provider, outcome).inc()
                    self._metrics.remote_embed_seconds.labels(self.options.provider).observe(
                        time.perf_counter() - started)
        if outcome == "ok":
            return self._vectors(resp, len(texts))
        said = self._quote(resp)
        if outcome in RETRIED:
            wait = retry_after_seconds(resp.headers.get("retry-after"))
            if wait is not None and wait > self.options.retry_max_wait_s:
                raise EmbeddingError(f"{self.where}: HTTP {resp.status_code}, the server asks to wait {wait:.0f}s, "
                                     f"over embedding.retry_max_wait_s={self.options.retry_max_wait_s:g}")
            raise _Transient(outcome, f"HTTP {resp.status_code}: {said}", retry_after=wait)
        if resp.status_code in (401, 403):
            raise ConfigError(f"{self.where} refused the credentials (HTTP {resp.status_code}): check "
                              "embedding.api_key_file and embedding.api_key_header")
        if resp.status_code in (404, 405, 413):
            raise ConfigError(f"{self.where}: HTTP {resp.status_code} ({said}); check embedding.base_url, "
                              "embedding.model and, for 413, embedding.batch_max_inputs and batch_max_tokens")
        raise DocumentError(DocumentError.EMBED_REJECTED, f"{self.where} refused the texts (HTTP "
                            f"{resp.status_code}): {said}")

    def _vectors(self, resp: httpx.Response, expected: int) -> np.ndarray:
        try:
            payload = resp.json()
            if self.options.provider == "tei":
                rows = payload
            else:
                rows = [_floats(d["embedding"]) for d in sorted(payload["data"], key=lambda d: d["index"])]
            vectors = np.asarray(rows, dtype=np.float32)
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise EmbeddingError(f"{self.where}: unreadable answer ({type(exc).__name__}: {exc})"[:400]) from None
        if vectors.ndim != 2 or vectors.shape[0] != expected:
            raise EmbeddingError(f"{self.where}: {expected} texts sent, answer of shape {vectors.shape}")
        if vectors.shape[1] != self.dimension:
            raise ConfigError(
                f"{self.where} returned {vectors.shape[1]}-dimensional vectors for model {self.options.model!r}, "
                f"but embedding.dimensions is {self.dimension}: set it to the model's size (collections and the "
                "vector cache are keyed by it); nothing was written")
        return vectors

    def _quote(self, resp: httpx.Response) -> str:
        """At most 300 characters of the server's answer, with the API key (should it echo it) cut out."""
        text = " ".join(resp.text.split())[:300] or resp.reason_phrase
        if self.options.api_key:
            text = text.replace(self.options.api_key, "***")
        return text


def _floats(embedding: Any) -> Any:
    """One answer's vector: a JSON list of numbers, or (``encoding_format: base64``) the base64 of its
    float32 values, little-endian; a server that ignores the format and sends numbers is read as well."""
    if isinstance(embedding, str):
        raw = base64.b64decode(embedding, validate=True)
        if len(raw) % 4:
            raise ValueError(f"a base64 vector of {len(raw)} bytes is not float32 values")
        return np.frombuffer(raw, dtype="<f4")
    return embedding


def _outcome(status: int) -> str:
    if status < 300:
        return "ok"
    if status == 429:
        return "throttled"
    if status in (502, 503, 504):
        return "unavailable"
    if status >= 500:
        return "server_error"
    return "rejected"


__all__ = ["InputTooLongError", "RemoteEmbedder", "RemoteOptions", "plan_requests", "read_api_key",
           "retry_after_seconds"]
