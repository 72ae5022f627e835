"""Canonical vectors in process, on disk, with Qdrant Edge: the embedded runner's store.

Same engine and filter semantics as the Qdrant server, but no service to run: one
EdgeShard per model under `path`, so vectors of different models never meet.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Self

import numpy as np
import qdrant_edge as qe

from streams.core.model import ModelId, Neighbour
from streams.vectors.common import WindowSearch, as_vector, model_dir_name, nearest_with_ties, payload, point_id

_CONFIG_FILE = "edge_config.json"


class EdgeVectorStore(WindowSearch):
    """A `VectorStore` over one folder of Qdrant Edge shards, one shard per model.

    A shard is locked by its write-ahead log while open: one store per folder at a
    time, across processes too. Writes are visible to `nearest` at once; `flush`
    (or `close`) makes them durable without replaying the log.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._shards: dict[str, qe.EdgeShard] = {}

    def _shard(self, model: ModelId, create: bool) -> qe.EdgeShard | None:
        """The model's open shard; loaded from disk if there, created only when `create`."""
        return self._opened(model_dir_name(model), model.dim if create else None)

    def _opened(self, name: str, create_dim: int | None) -> qe.EdgeShard | None:
        """The open shard of folder `name`; loaded from disk if there, else created with vectors of
        `create_dim` (None: not created)."""
        shard = self._shards.get(name)
        if shard is not None:
            return shard
        folder = self.path / name
        if (folder / _CONFIG_FILE).is_file():
            shard = qe.EdgeShard.load(str(folder))
        elif create_dim is not None:
            config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=create_dim, distance=qe.Distance.Cosine))
            shard = qe.EdgeShard.create(str(folder), config)
        else:
            return None
        indexed = shard.info().payload_schema
        # The time window and the language relation filter every search: index both.
        if "published_at" not in indexed:
            shard.update(qe.UpdateOperation.create_field_index("published_at", qe.PayloadSchemaType.Integer))
        if "language" not in indexed:
            shard.update(qe.UpdateOperation.create_field_index("language", qe.PayloadSchemaType.Keyword))
        self._shards[name] = shard
        return shard

    def add(
        self,
        model: ModelId,
        doc_id: str,
        vector: np.ndarray,
        published_at: int,
        language: str,
        facts: dict[str, list[str]] | None = None,
    ) -> None:
        """Upsert a canonical's vector; the id is derived from `doc_id`, so a redelivery overwrites."""
        shard = self._shard(model, create=True)
        assert shard is not None
        point = qe.Point(
            point_id(doc_id), as_vector(model, vector), payload(model, doc_id, published_at, language, facts)
        )
        shard.update(qe.UpdateOperation.upsert_points([point]))

    def remove(self, model: ModelId, doc_id: str) -> None:
        """Delete a vector that is no canonical's (an orphan); absent is fine."""
        shard = self._shard(model, create=False)
        if shard is not None:
            shard.update(qe.UpdateOperation.delete_points([point_id(doc_id)]))

    def expire(self, model: ModelId, before: int) -> int:
        """Delete the model's vectors published before `before` (a range on the indexed `published_at`);
        returns how many there were."""
        return _expired(self._shard(model, create=False), before)

    def shard_names(self) -> list[str]:
        """The folders of the models' shards on disk (`model_dir_name`)."""
        folders = sorted(self.path.iterdir()) if self.path.is_dir() else []
        return [folder.name for folder in folders if (folder / _CONFIG_FILE).is_file()]

    def missing(self, names: Iterable[str]) -> str | None:
        """Why the shards `names` (those a state has vectors in) cannot be used: gone from the folder."""
        lost = sorted(set(names) - set(self.shard_names()))
        if not lost:
            return None
        return (
            f"the vectors of {', '.join(lost)} are missing from {self.path}, where this state's canonicals have"
            " theirs: rebuild it with `dedup replay` from its links (they carry the vectors) into a new state folder"
            " (`--state NEW`; in this one, the canonicals found there are skipped and their vectors stay missing)"
        )

    def expire_every_model(self, before: int) -> int:
        """`expire` for the shard of every model in the folder: the one in use and any used before it, whose
        vectors would otherwise be kept for ever once a state moves to another model."""
        return sum(_expired(self._opened(name, None), before) for name in self.shard_names())

    def nearest_between(
        self, model: ModelId, vector: np.ndarray, low: int, high: int, language: str, same_language: bool
    ) -> Neighbour | None:
        """The best canonical published in [`low`, `high`], in `language` or (not `same_language`) in any
        other language; None if none."""
        shard = self._shard(model, create=False)
        if shard is None:
            return None
        query = qe.Query.Nearest(as_vector(model, vector))
        in_window = qe.FieldCondition("published_at", range=qe.RangeFloat(gte=low, lte=high))
        in_language = qe.FieldCondition("language", match=qe.MatchValue(language))
        window = (
            qe.Filter(must=[in_window, in_language])
            if same_language
            else qe.Filter(must=[in_window], must_not=[in_language])
        )

        def search(limit: int) -> list[Neighbour]:
            hits = shard.query(qe.QueryRequest(limit=limit, query=query, filter=window, with_payload=True))
            return [
                Neighbour(
                    doc_id=h.payload["doc_id"],
                    score=float(h.score),
                    published_at=int(h.payload["published_at"]),
                    language=h.payload["language"],
                    facts=h.payload.get("facts"),
                )
                for h in hits
                if h.payload
            ]

        return nearest_with_ties(search)

    def flush(self) -> None:
        """Write pending changes of every open shard to its segments."""
        for shard in self._shards.values():
            shard.flush()

    def close(self) -> None:
        """Flush and release every shard (and its lock)."""
        shards, self._shards = self._shards, {}
        for shard in shards.values():
            shard.flush()
            shard.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _expired(shard: qe.EdgeShard | None, before: int) -> int:
    """Delete a shard's vectors published before `before`; how many there were."""
    if shard is None:
        return 0
    old = qe.Filter(must=[qe.FieldCondition("published_at", range=qe.RangeFloat(lt=before))])
    count = shard.count(qe.CountRequest(exact=True, filter=old))
    if count:
        shard.update(qe.UpdateOperation.delete_points_by_filter(old))
    return count
