"""A batch decided over Redis reads what it needs in `warm`'s round trips, and nothing while it decides.

A document copied later in its own batch joins a canonical made in that batch; the canonical's group size
was read from Redis one round trip at a time (about one document in twenty of the synthetic stream: 509
single reads for 10,000 documents), each paid under the registration lease.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, Stage
from streams.evaluation.corpus import synthetic_articles
from streams.records.article import Featurizer
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import RedisStateStore, connect

CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]


def _calls(client: object) -> int:
    stats = client.info("commandstats")  # type: ignore[attr-defined]
    return sum(entry["calls"] for name, entry in stats.items() if name != "cmdstat_info")


@pytest.mark.parametrize("size", [64, 256])
def test_deciding_a_warmed_batch_sends_redis_nothing(redis_url: str, size: int, tmp_path: Path) -> None:
    settings = Settings(stages=CHEAP)
    featurizer = Featurizer(settings)
    docs = [featurizer.featurize(article, b"", ingest_time=1_800_000_000) for article in synthetic_articles(1_200)]
    assert all(isinstance(doc, Document) for doc in docs)
    client = connect(redis_url)
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    state = BatchedState(store)
    cascade = Cascade(settings, state)
    lock = RedisLock(client, f"{store._prefix}lock:register", ttl_s=30, fence=store.fence)
    joined = 0
    for start in range(0, len(docs), size):
        batch = docs[start : start + size]
        with lock.held() as lease:
            state.warm(cascade.reads(batch))  # type: ignore[arg-type]
            client.config_resetstat()
            before = _calls(client)
            decisions = [cascade.decide(doc) for doc in batch]  # type: ignore[arg-type]
            assert _calls(client) - before == 0
            made = {d.link.doc_id for d in decisions if d.link.verdict.canonical}
            joined += sum(1 for d in decisions if d.link.canonical_id in made and d.link.canonical_id != d.link.doc_id)
            state.flush(lease, exact=True)
    assert joined > 10  # copies of canonicals made in their own batch: the reads this test is about
    client.close()
