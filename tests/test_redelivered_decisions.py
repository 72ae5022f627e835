"""A batch stopped between its write rounds and decided again is decided as its first attempt was.

A worker's batch is written in rounds (`RedisStateStore.apply`); a full Redis or a crash stops it between
two, and the batch is decided again, from the state the stopped rounds left. The claims of a duplicate's
exact keys (to its canonical) or of a document under review (to itself) land before its verdict; decided
again, the document would find them and read a URL duplicate where it was a near-duplicate, or take its
own keys for a canonical's and become one where it was under review. A stopped batch leaves each linked
document's link pending beside its verdict, and its redelivery records that one (CI caught the first,
test_redis_full_service.py, when Redis filled up between the claims and the verdicts).
"""

from __future__ import annotations

import uuid

import pytest
import redis

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, Link, Stage, Verdict
from streams.evaluation.corpus import synthetic_articles
from streams.evaluation.stack import assert_invariants
from streams.records.article import Featurizer
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import RedisStateStore, connect
from tests.test_redis_cluster import _crash_after

SETTINGS = Settings(stages=[Stage.URL, Stage.CONTENT, Stage.SIMHASH], group_cap=2)  # a cap: some reviews
BATCH = 100


def _docs() -> list[Document]:
    featurizer = Featurizer(SETTINGS)
    docs = [featurizer.featurize(a, b"", ingest_time=1_800_000_000) for a in synthetic_articles(600, seed=9)]
    assert all(isinstance(doc, Document) for doc in docs)
    return docs  # type: ignore[return-value]


def _decide(url: str, docs: list[Document], stopped: int | None, rounds: int) -> dict[str, Link]:
    """Every batch decided and flushed under the lease; batch `stopped` dies after `rounds` write rounds
    and is decided again from scratch (a new cascade over a new snapshot: the worker's retry)."""
    client = connect(url)
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    lock = RedisLock(client, f"{store._prefix}lock:register", ttl_s=30, fence=store.fence)
    verdicts: dict[str, Link] = {}
    for number, start in enumerate(range(0, len(docs), BATCH)):
        batch = docs[start : start + BATCH]
        if number == stopped:
            landed = _crash_after(store, rounds)
            state = BatchedState(store)
            cascade = Cascade(SETTINGS, state)
            with lock.held() as lease, pytest.raises(redis.ConnectionError):
                state.warm(cascade.reads(batch))
                for doc in batch:
                    cascade.decide(doc)
                state.flush(lease, exact=True)
            store._sink = landed  # type: ignore[method-assign]
        state = BatchedState(store)
        cascade = Cascade(SETTINGS, state)
        with lock.held() as lease:
            state.warm(cascade.reads(batch))
            for doc in batch:
                cascade.decide(doc)
            verdicts.update(state.flush(lease, exact=True))
    client.close()
    return verdicts


def _explained(links: dict[str, Link]) -> dict[str, tuple[object, ...]]:
    return {d: (link.verdict, link.canonical_id, link.stage, link.score) for d, link in links.items()}


@pytest.mark.parametrize("rounds", [1, 2])
def test_a_batch_decided_again_after_a_crash_between_its_rounds_gets_the_verdicts_of_its_first_attempt(
    one_or_cluster_url: str, rounds: int
) -> None:
    """Stopped after its claims (1), or after its band entries and group markers (2), before its verdicts."""
    docs = _docs()
    clean = _decide(one_or_cluster_url, docs, None, 0)
    redelivered = _decide(one_or_cluster_url, docs, 1, rounds)
    assert_invariants({d: {"verdict": v.verdict.value, "canonical_id": v.canonical_id} for d, v in redelivered.items()})
    stopped = {doc.doc_id for doc in docs[BATCH : 2 * BATCH]}
    linked = [d for d in stopped if clean[d].canonical_id != d]
    assert sum(clean[d].stage in (Stage.CONTENT, Stage.SIMHASH) for d in linked) > 3  # with a URL of their own
    assert any(clean[d].verdict is Verdict.REVIEW for d in linked)  # and documents under review
    assert _explained(redelivered) == _explained(clean)
