"""A `VectorStore` whose additions wait until the batch's verdicts are recorded.

A vector in the store is a canonical that other workers link to. Written during
the decision (before the verdicts are in Redis), a failed transaction or a kill
would leave a vector of a document that is not a canonical, or that the retry
decides differently, and links to it would be chains. So the streaming agent
decides against this wrapper: additions are held (and searched, so documents
later in the same batch see them) and reach the store only after the batch's
Redis transaction has succeeded (`flush`), or are dropped with it (`reset`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.core.model import ModelId, Neighbour
from streams.core.ports import VectorStore
from streams.vectors.common import WindowSearch, best_neighbour, cosine


@dataclass(frozen=True, slots=True)
class _Pending:
    model: ModelId
    doc_id: str
    vector: np.ndarray
    published_at: int
    language: str
    facts: dict[str, list[str]] | None = None


class BatchedVectors(WindowSearch):
    """Searches the store and this batch's held additions; writes the additions on `flush`."""

    def __init__(self, store: VectorStore) -> None:
        self._store = store
        self._pending: list[_Pending] = []

    def reset(self) -> None:
        """Drop the held additions: their batch was not recorded."""
        self._pending = []

    def flush(self, recorded: set[str]) -> None:
        """Write the held additions of the documents whose verdicts were recorded, then forget all."""
        pending, self._pending = self._pending, []
        for item in pending:
            if item.doc_id in recorded:
                self._store.add(item.model, item.doc_id, item.vector, item.published_at, item.language, item.facts)

    def add(
        self,
        model: ModelId,
        doc_id: str,
        vector: np.ndarray,
        published_at: int,
        language: str,
        facts: dict[str, list[str]] | None = None,
    ) -> None:
        vector = np.asarray(vector, dtype=np.float32)
        self._pending.append(_Pending(model, doc_id, vector, published_at, language, facts))

    def remove(self, model: ModelId, doc_id: str) -> None:
        self._pending = [item for item in self._pending if not (item.model == model and item.doc_id == doc_id)]
        self._store.remove(model, doc_id)

    def expire(self, model: ModelId, before: int) -> int:
        """Expire the store's vectors; held additions that old are dropped (nobody would find them)."""
        self._pending = [item for item in self._pending if not (item.model == model and item.published_at < before)]
        return self._store.expire(model, before)

    def expire_every_model(self, before: int) -> int:
        """`expire` for every model of the store, held additions too."""
        self._pending = [item for item in self._pending if item.published_at >= before]
        return self._store.expire_every_model(before)

    def nearest_between(
        self, model: ModelId, vector: np.ndarray, low: int, high: int, language: str, same_language: bool
    ) -> Neighbour | None:
        """The store's best and the best held addition, scored as the store scores (cosine: a vector
        that is not of unit length must not outscore an exact match), under the store's tie-break."""
        stored = self._store.nearest_between(model, vector, low, high, language, same_language)
        query = np.asarray(vector, dtype=np.float32)
        held = [
            Neighbour(item.doc_id, cosine(query, item.vector), item.published_at, item.language, item.facts)
            for item in self._pending
            if item.model == model and low <= item.published_at <= high and (item.language == language) == same_language
        ]
        return best_neighbour([*held, *([stored] if stored is not None else [])])
