"""Canonical vectors in a Qdrant server: the production store, shared by all semantic workers.

One collection per model (cosine), an integer index on `published_at` for the window
filter and for expiry (a delete by range, which the semantic workers' sweep runs in every
collection of the prefix), and the same ids and tie-break as the embedded store.
"""

from __future__ import annotations

import numpy as np
from qdrant_client import QdrantClient, models

from streams.core.model import ModelId, Neighbour
from streams.vectors.common import (
    WindowSearch,
    as_vector,
    collection_name,
    nearest_with_ties,
    owns_collection,
    payload,
    point_id,
)


class QdrantVectorStore(WindowSearch):
    """A `VectorStore` over a Qdrant server, collections named `{prefix}_{model}_{version}`."""

    def __init__(self, client: QdrantClient, prefix: str = "dedup") -> None:
        self.client = client
        self.prefix = prefix
        self._ready: dict[str, int] = {}
        """Collections made ready (indexed), with the vector size each holds."""

    @classmethod
    def from_url(cls, url: str, api_key: str | None = None) -> QdrantVectorStore:
        """A store on the server at `url` (e.g. http://localhost:6333)."""
        return cls(QdrantClient(url=url, api_key=api_key))

    def _collection(self, model: ModelId, create: bool) -> str | None:
        """The model's collection name once it exists (index ensured); created only when `create`."""
        name = collection_name(self.prefix, model)
        if name in self._ready:
            return self._sized(name, model)
        exists = self.client.collection_exists(name)
        if not exists and not create:
            return None
        if not exists:
            try:
                self.client.create_collection(
                    name, vectors_config=models.VectorParams(size=model.dim, distance=models.Distance.COSINE)
                )
            except Exception:
                # Another worker may have created it between our check and our create.
                if not self.client.collection_exists(name):
                    raise
        # Idempotent; also repairs a collection whose creator died before indexing it.
        self.client.create_payload_index(name, "published_at", field_schema=models.PayloadSchemaType.INTEGER, wait=True)
        self.client.create_payload_index(name, "language", field_schema=models.PayloadSchemaType.KEYWORD, wait=True)
        vectors = self.client.get_collection(name).config.params.vectors
        self._ready[name] = vectors.size if isinstance(vectors, models.VectorParams) else 0
        return self._sized(name, model)

    def _sized(self, name: str, model: ModelId) -> str:
        """`name`, once its vectors are known to be of the model's size (a dimension of 0 asks nothing: a
        removal); ValueError otherwise, as the embedded store refuses it, where the server would answer a
        bad request for each vector."""
        size = self._ready[name]
        if model.dim and size and size != model.dim:
            raise ValueError(f"collection {name} holds vectors of {size} dimensions, model {model} has {model.dim}")
        return name

    def add(
        self,
        model: ModelId,
        doc_id: str,
        vector: np.ndarray,
        published_at: int,
        language: str,
        facts: dict[str, list[str]] | None = None,
    ) -> None:
        """Upsert and wait for it, so the next `nearest` (any worker) sees this canonical."""
        name = self._collection(model, create=True)
        assert name is not None
        point = models.PointStruct(
            id=point_id(doc_id),
            vector=as_vector(model, vector),
            payload=payload(model, doc_id, published_at, language, facts),
        )
        self.client.upsert(name, points=[point], wait=True)

    def remove(self, model: ModelId, doc_id: str) -> None:
        """Delete a vector that is no canonical's (an orphan); absent is fine."""
        name = self._collection(model, create=False)
        if name is not None:
            self.client.delete(name, points_selector=models.PointIdsList(points=[point_id(doc_id)]), wait=True)

    def expire(self, model: ModelId, before: int) -> int:
        """Delete the model's vectors published before `before` (a range on the indexed `published_at`);
        returns how many there were."""
        name = self._collection(model, create=False)
        return 0 if name is None else self._expired(name, before)

    def expire_every_model(self, before: int) -> int:
        """`expire` in every collection of this store's prefix: the model in use and any used before it,
        whose vectors would otherwise be kept for ever once the workers move to another model."""
        names = [c.name for c in self.client.get_collections().collections if owns_collection(self.prefix, c.name)]
        return sum(self._expired(name, before) for name in sorted(names))

    def _expired(self, name: str, before: int) -> int:
        """Delete collection `name`'s vectors published before `before`; how many there were (counted first:
        a delete by filter does not say)."""
        old = models.Filter(must=[models.FieldCondition(key="published_at", range=models.Range(lt=before))])
        count = self.client.count(name, count_filter=old, exact=True).count
        if count:
            self.client.delete(name, points_selector=models.FilterSelector(filter=old), wait=True)
        return count

    def nearest_between(
        self, model: ModelId, vector: np.ndarray, low: int, high: int, language: str, same_language: bool
    ) -> Neighbour | None:
        """The best canonical published in [`low`, `high`], in `language` or (not `same_language`) in any
        other language; None if none."""
        name = self._collection(model, create=False)
        if name is None:
            return None
        query = as_vector(model, vector)
        in_window = models.FieldCondition(key="published_at", range=models.Range(gte=low, lte=high))
        in_language = models.FieldCondition(key="language", match=models.MatchValue(value=language))
        window = (
            models.Filter(must=[in_window, in_language])
            if same_language
            else models.Filter(must=[in_window], must_not=[in_language])
        )

        def search(limit: int) -> list[Neighbour]:
            hits = self.client.query_points(name, query=query, query_filter=window, limit=limit, with_payload=True)
            return [
                Neighbour(
                    doc_id=p.payload["doc_id"],
                    score=float(p.score),
                    published_at=int(p.payload["published_at"]),
                    language=p.payload["language"],
                    facts=p.payload.get("facts"),
                )
                for p in hits.points
                if p.payload
            ]

        return nearest_with_ties(search)

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()
