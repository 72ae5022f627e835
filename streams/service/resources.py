"""The stores, model and lock a worker's agents share, built from configuration."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import redis

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Canonical, Stage
from streams.core.ports import Embedder, StateStore, VectorStore
from streams.features.simhash import char_simhash, word_simhash
from streams.kafka.journal import newest_seq, recorded
from streams.records.article import Featurizer
from streams.service import metrics
from streams.service.stages import Agent, StageAgent, pipeline
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import RedisStateStore, StateLost, connect
from streams.vectors.batched import BatchedVectors

EMBEDDED = "embedded"
_WARM_UP = b'{"id": "warm-up", "url": "https://example.com/warm-up", "title": "Warm up", "body": "A warm-up text."}'


def redis_client(settings: Settings) -> redis.Redis | redis.RedisCluster:
    """One server for `redis://` (`rediss://`: TLS), a Redis Cluster for `redis+cluster://` (`rediss+cluster://`)."""
    if settings.redis_url is None:
        raise ValueError("no Redis configured: set DEDUP_REDIS_URL (redis://host:6379/0 or rediss:// for TLS)")
    password = settings.redis_password.get_secret_value() if settings.redis_password else None
    return connect(settings.redis_url.get_secret_value(), password)


def vector_store(settings: Settings) -> VectorStore:
    """Qdrant at DEDUP_QDRANT_URL, or the embedded engine in the state folder (one host only)."""
    url = settings.qdrant_url
    if not url:
        raise ValueError("the semantic stage needs a vector store: set DEDUP_QDRANT_URL (a URL, or 'embedded')")
    if url == EMBEDDED:
        from streams.vectors.edge import EdgeVectorStore

        if settings.state_dir is None:
            raise ValueError("DEDUP_QDRANT_URL=embedded keeps vectors in DEDUP_STATE_DIR: set it")
        return EdgeVectorStore(Path(settings.state_dir) / "vectors")
    from streams.vectors.qdrant_server import QdrantVectorStore

    api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    return QdrantVectorStore.from_url(url, api_key=api_key)


class MeteredState:
    """The state store, counting the candidates each SimHash band query returns."""

    def __init__(self, inner: StateStore) -> None:
        self._inner = inner

    def band_candidates(self, language: str, bands: Sequence[int]) -> list[Canonical]:
        found = self._inner.band_candidates(language, bands)
        metrics.CANDIDATES.observe(len(found))
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def expect_new_state(settings: Settings) -> None:
    """Before the workers mark an empty Redis state as new: refuse (`StateLost`) while `dedup.links` holds
    verdicts, i.e. the state was lost (Redis restarted without its data, the whole deployment with it) or the
    prefix is not the one they were written under. Without a broker configured there is no record to ask."""
    if not settings.kafka_bootstrap:
        return
    links = recorded(settings, settings.topics.links)
    if links:
        raise StateLost(
            f"Redis holds no state under prefix {settings.redis_prefix!r}, yet {settings.topics.links} holds "
            f"{links:,} records: the state was lost, or DEDUP_REDIS_PREFIX is not the one it was written under. "
            "Nothing is decided on an empty state: rebuild it with `dedup replay` (the workers wait for it)"
        )


def recorded_seq(settings: Settings) -> int:
    """The newest verdict seq on `dedup.links` (0: none, or no broker configured), which the state must have
    drawn (`RedisStateStore(recorded_seq=...)`)."""
    if not settings.kafka_bootstrap:
        return 0
    return newest_seq(settings, settings.topics.links)


class Resources:
    """One Redis client, vector store and embedder per worker process, shared by its agents."""

    def __init__(
        self, settings: Settings, embedder: Embedder | None = None, vectors: VectorStore | None = None
    ) -> None:
        """`embedder` and `vectors` are made from `settings` when the semantic agent first needs them, unless given."""
        self.settings = settings
        self.redis = redis_client(settings)
        self.state = RedisStateStore(
            self.redis,
            settings.redis_prefix,
            settings.redis_bucket_bits,
            settings.retention,
            fresh=partial(expect_new_state, settings),
            band_layout=settings.simhash.band_layout,
            recorded_seq=partial(recorded_seq, settings),
        )
        self._embedder = embedder
        self._vectors = vectors
        name = f"{settings.redis_prefix}lock:register"
        self.lock = RedisLock(self.redis, name, settings.worker.lock_ttl_s, fence=self.state.fence)
        # Load (or compile: seconds on a fresh install) the text and SimHash kernels now, not inside
        # the first batch: one document through the batched features, one through the single ones.
        Featurizer(settings).parse_batch([_WARM_UP], ingest_time=0)
        word_simhash("warm up", settings.simhash.word_shingle)
        char_simhash("warm up", settings.simhash.char_ngram)

    def ping(self) -> None:
        self.redis.ping()

    def stage_agent(self, *hop: Agent) -> StageAgent:
        """The decisions of one agent, or of consecutive agents run as one hop (`stages.hops`);
        the hop that ends the pipeline gets the vector store and model."""
        final = hop[-1] is pipeline(self.settings)[-1]
        semantic = final and Stage.SEMANTIC in self.settings.stages
        embedder = vectors = None
        if semantic:
            if self._embedder is None:
                from streams.embedders import make_embedder

                self._embedder = make_embedder(self.settings.semantic)
            if self._vectors is None:
                self._vectors = vector_store(self.settings)
            embedder, vectors = self._embedder, self._vectors
        # An agent before the last never reaches the semantic stage: its cascade runs without it.
        stages = [s for s in self.settings.stages if semantic or s is not Stage.SEMANTIC]
        settings = self.settings.model_copy(update={"stages": stages})
        model = embedder.model_id if embedder is not None else None
        held = BatchedVectors(vectors) if vectors is not None else None  # written once verdicts are recorded
        # One per agent: each warms and flushes its own batches; the semantic agent's sweep expires vectors.
        state = BatchedState(self.state, vectors=held, vectors_s=self.settings.retention.vectors_s)
        cascade = Cascade(settings, MeteredState(state), held, model)
        return StageAgent(self.settings, hop, cascade, state, self.lock, embedder, held)

    def close(self) -> None:
        close = getattr(self._vectors, "close", None)
        if close is not None:
            close()
        self.redis.close()
