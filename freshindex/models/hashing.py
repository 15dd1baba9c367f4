"""A deterministic bag-of-words embedder: a stand-in for unit tests only.

It has no notion of meaning (synonyms score zero), but texts sharing words
score higher, which is enough to test the pipeline's bookkeeping quickly.
It counts tokens (and so gets chunks cut) as the default MiniLM model does.
Every real path is tested with :class:`models.onnx.OnnxMiniLM`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from freshindex.models.tokens import MINILM_MAX_INPUT_TOKENS, minilm_count

_WORD = re.compile(r"[a-z0-9]+|[\u3400-\u9fff]")


class HashingEmbedder:
    #: numpy only, no native model: an embedding cannot take the process down (``core.types.may_kill_the_process``).
    cannot_kill_process = True

    def __init__(self, dimension: int = 64) -> None:
        self._dim = dimension
        self.calls = 0
        self.texts_embedded = 0

    @property
    def model_id(self) -> str:
        return f"hashing-bow-{self._dim}"

    @property
    def dimension(self) -> int:
        return self._dim

    @property
    def max_input_tokens(self) -> int:
        """The default model's limit, so that chunks cut for this stand-in are the ones MiniLM gets."""
        return MINILM_MAX_INPUT_TOKENS

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """MiniLM's tokenizer when installed (no model loaded), else a count that never under-counts."""
        return minilm_count(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.texts_embedded += len(texts)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[row, h % self._dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = np.linalg.norm(out[row])
            out[row] = out[row] / norm if norm else out[row]
            if not norm:
                out[row, 0] = 1.0
        return out
