"""What every embedder shares: a model loaded once on first use, clipped texts, unit rows."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from streams.core.model import ModelId

log = logging.getLogger(__name__)


class LazyEmbedder(ABC):
    """An `Embedder` whose model loads on the first `embed` (once, thread-safe).

    Building one is cheap, so a run whose documents never reach the semantic stage
    never pays for the model. Subclasses say how to open the model and encode a list.
    """

    def __init__(self, model_id: ModelId, max_chars: int) -> None:
        self._model_id = model_id
        self.max_chars = max_chars
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> ModelId:
        return self._model_id

    @abstractmethod
    def _open(self) -> Any:
        """Load the model."""

    @abstractmethod
    def _encode(self, model: Any, texts: list[str]) -> Any:
        """Vectors of `texts`, one row each, in order."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 (len(texts), dim) array of unit rows; each text cut to `max_chars` first."""
        dim = self._model_id.dim
        if not texts:
            return np.zeros((0, dim), dtype=np.float32)
        with self._lock:
            if self._model is None:
                self._model = self._open()
        clipped = [text[: self.max_chars] for text in texts]
        vectors = np.asarray(self._encode(self._model, clipped), dtype=np.float32).reshape(len(clipped), dim)
        broken = ~np.isfinite(vectors).all(axis=1)
        if broken.any():
            # A NaN or an infinity (an fp16 overflow) means nothing: kept, it would go out as nulls in the link
            # record (schemas/link.schema.json wants numbers) and never be found. A zero row matches nothing.
            log.warning("%s gave %d vector(s) that are not finite: taken as zero", self._model_id, int(broken.sum()))
            vectors[broken] = 0.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, np.finfo(np.float32).tiny)
