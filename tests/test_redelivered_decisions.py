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

import time
import uuid
from dataclasses import replace

import pytest
import redis

from benchmarks.replay_speed import keys
from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, Link, Stage, Verdict, version_id
from streams.core.replay import Recorded, restore
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


def _attempt(
    store: RedisStateStore, lock: RedisLock, batch: list[Document], dies_after: int | None = None
) -> dict[str, Link]:
    """One batch decided and flushed under the lease, as a worker does; with `dies_after`, the worker dies
    once that many write rounds landed (nothing comes back)."""
    landed = _crash_after(store, dies_after) if dies_after is not None else None
    state = BatchedState(store)
    cascade = Cascade(SETTINGS, state)
    try:
        with lock.held() as lease:
            state.warm(cascade.reads(batch))
            for doc in batch:
                cascade.decide(doc)
            return state.flush(lease, exact=True)
    except redis.ConnectionError:
        assert landed is not None
        return {}
    finally:
        if landed is not None:
            store._sink = landed  # type: ignore[method-assign]


def _store(url: str) -> tuple[RedisStateStore, RedisLock]:
    store = RedisStateStore(connect(url), f"t{uuid.uuid4().hex}:")
    return store, RedisLock(store._redis, f"{store._prefix}lock:register", ttl_s=30, fence=store.fence)


def _decide(url: str, docs: list[Document], stopped: int | None, rounds: int) -> dict[str, Link]:
    """Every batch decided and flushed under the lease; batch `stopped` dies after `rounds` write rounds
    and is decided again from scratch (a new cascade over a new snapshot: the worker's retry)."""
    store, lock = _store(url)
    verdicts: dict[str, Link] = {}
    for number, start in enumerate(range(0, len(docs), BATCH)):
        batch = docs[start : start + BATCH]
        if number == stopped:
            assert not _attempt(store, lock, batch, dies_after=rounds)
        verdicts.update(_attempt(store, lock, batch))
    store._redis.close()
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


def test_a_new_version_in_a_batch_decided_again_gets_the_verdict_of_its_first_attempt(one_or_cluster_url: str) -> None:
    """Articles sent under ids decided before with other content are new versions, decided under ids of their
    own (`version_id`), which the batch's warm-up does not read: their pending links are read one by one."""
    docs = _docs()
    versions = [replace(doc, doc_id=docs[i].doc_id) for i, doc in enumerate(docs[2 * BATCH : 3 * BATCH])]
    sent = [*docs[: 2 * BATCH], *versions]
    clean = _decide(one_or_cluster_url, sent, None, 0)
    redelivered = _decide(one_or_cluster_url, sent, 2, 2)  # the first round: the standing ids' markers
    linked = [v for v in (version_id(d.doc_id, d.content_hash) for d in versions) if clean[v].canonical_id != v]
    assert sum(clean[v].stage in (Stage.CONTENT, Stage.SIMHASH) for v in linked) > 3
    assert _explained(redelivered) == _explained(clean)


def test_another_article_under_the_id_of_a_pending_link_is_a_new_version_never_its_duplicate(
    one_or_cluster_url: str,
) -> None:
    """A pending link is the first verdict of its id and its content, not yet recorded: another article under
    that id (a crawler's reused id, sent before the stopped batch's redelivery) is decided afresh as a new
    version of it, as it is once the verdict stands, never given the pending link (two articles merged: it was
    recorded as a duplicate of the first one's canonical, a comparison never made). The redelivered batch
    still gets the verdicts of its first attempt."""
    docs = _docs()
    clean = _decide(one_or_cluster_url, docs, None, 0)
    stopped = docs[BATCH : 2 * BATCH]
    reused = next(d for d in stopped if clean[d.doc_id].stage in (Stage.CONTENT, Stage.SIMHASH))
    other = next(d for d in docs[2 * BATCH :] if clean[d.doc_id].verdict is Verdict.UNIQUE)
    store, lock = _store(one_or_cluster_url)
    _attempt(store, lock, docs[:BATCH])
    assert not _attempt(store, lock, stopped, dies_after=1)
    assert store.pending_of(reused.doc_id) is not None
    newer = _attempt(store, lock, [replace(other, doc_id=reused.doc_id)])
    version = version_id(reused.doc_id, other.content_hash)
    assert reused.doc_id not in newer
    assert (newer[version].verdict, newer[version].canonical_id) == (Verdict.UNIQUE, version)
    redelivered = _attempt(store, lock, stopped)
    assert _explained(redelivered) == _explained({d.doc_id: clean[d.doc_id] for d in stopped})
    store._redis.close()


def test_a_pending_link_past_the_verdicts_retention_is_not_recorded_and_is_swept(one_or_cluster_url: str) -> None:
    """A stopped batch whose records never come back (the input topic dropped them, or the consumer group was
    moved past them) leaves its pending links behind. They age as verdicts do (`retention.verdicts_days`: as long
    as the input topic keeps records): past it a redelivery is a new document, and the sweep takes them out (kept,
    they were state that grew for ever, and a link given to a re-crawl against canonicals long gone)."""
    docs = _docs()
    store, lock = _store(one_or_cluster_url)
    _attempt(store, lock, docs[:BATCH])
    stopped = docs[BATCH : 2 * BATCH]
    assert not _attempt(store, lock, stopped, dies_after=1)
    pending = [d.doc_id for d in stopped if store.pending_of(d.doc_id) is not None]
    assert len(pending) > 10
    days = (int(time.time()) - max(d.published_at for d in docs[: 2 * BATCH])) / 86_400
    assert days > store.keep.verdicts / 86_400 + 1  # the articles are from 2026-11-01
    store.advance(int(time.time()))
    assert [d for d in pending if store.pending_of(d) is not None] == []
    while not store.sweep(100_000).done:
        pass
    assert [name for name in keys(store._redis, store._prefix) if name.startswith("p:")] == []
    store._redis.close()


def test_a_pending_link_written_before_they_had_a_stamp_is_read_and_kept(redis_url: str) -> None:
    """The layout's pending links were written without a stamp at first: one a crash left then is still the
    link its redelivery records, and the sweep leaves it to that redelivery."""
    docs = _docs()
    store, lock = _store(redis_url)
    _attempt(store, lock, docs[:BATCH])
    assert not _attempt(store, lock, docs[BATCH : 2 * BATCH], dies_after=1)
    doc_id = next(d.doc_id for d in docs[BATCH : 2 * BATCH] if store.pending_of(d.doc_id) is not None)
    name = store._bucket("p", doc_id)
    stamped = store._redis.hget(name, doc_id)
    store._redis.hset(name, doc_id, stamped.partition(" ")[2])  # as the first pending links were written
    assert store.pending_of(doc_id) == store._pending_link(doc_id, stamped, store.clock())
    store.advance(int(time.time()))
    while not store.sweep(100_000).done:
        pass
    assert store.pending_of(doc_id) is not None
    store._redis.close()


def test_a_batch_stopped_after_its_claims_whose_canonical_was_linked_back_meanwhile_is_decided(
    one_or_cluster_url: str,
) -> None:
    """A stopped batch's claims name a duplicate's canonical; before the redelivery a person links that canonical
    back into another group (allowed: the growth of its group had not landed, so it has no members). Decided
    again, the duplicate found its URL key held by a document that is no canonical, linked to it, and the batch
    was refused as a stale snapshot every time (a partition stalled for good): a key whose holder was linked
    since leads to the holder's canonical, as the relink's own keys do."""
    docs = _docs()
    clean = _decide(one_or_cluster_url, docs[: 2 * BATCH], None, 0)
    first = {d.doc_id: d for d in docs[:BATCH]}
    alone = set(first) - {clean[d].canonical_id for d in first if clean[d].canonical_id != d}  # no members yet
    stopped = docs[BATCH : 2 * BATCH]
    linked = next(
        d
        for d in stopped
        if clean[d.doc_id].stage in (Stage.CONTENT, Stage.SIMHASH) and clean[d.doc_id].canonical_id in alone
    )
    moved = first[clean[linked.doc_id].canonical_id]
    into = next(d for d in first.values() if clean[d.doc_id].verdict is Verdict.UNIQUE and d.doc_id != moved.doc_id)
    store, lock = _store(one_or_cluster_url)
    _attempt(store, lock, docs[:BATCH])
    assert store.group_size(moved.doc_id) == 1  # itself alone
    assert not _attempt(store, lock, stopped, dies_after=1)
    relinked = Link(
        moved.doc_id, Verdict.DUPLICATE, into.doc_id, Stage.SIMHASH, 9.0, content=clean[moved.doc_id].content
    )
    record = Recorded(
        relinked, moved.url_hash, moved.content_hash, moved.simhash, moved.language, moved.published_at,
        keys=(Stage.URL, Stage.CONTENT),
    )  # fmt: skip
    state = BatchedState(store)
    with lock.held() as lease:
        assert restore(record, state)
        state.flush(lease, exact=True)
    redelivered = _attempt(store, lock, stopped)
    assert redelivered[linked.doc_id].canonical_id == into.doc_id
    assert_invariants(
        {d: {"verdict": v.verdict.value, "canonical_id": v.canonical_id} for d, v in {**clean, **redelivered}.items()}
        | {moved.doc_id: {"verdict": "duplicate", "canonical_id": into.doc_id}}
    )
    store._redis.close()
