"""The registration lease fences every write: a late holder never writes, a lost race writes nothing.

Real Redis, real text (NTREX English); two "workers" are two BatchedStates over one server,
driven step by step so that every interleaving the streaming agents can meet is tried.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from streams.config import Settings
from streams.core.cascade import CONTENT_KEY, URL_KEY, Cascade
from streams.core.model import Document, Link, Stage, Verdict
from streams.evaluation.corpus import NtrexDocument
from streams.features.bands import FOUR_BY_16
from streams.records.article import Featurizer
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import Lease, LeaseLost, RedisLock
from streams.stores.redis_store import RedisStateStore, StaleSnapshot

CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]


def _pool(ntrex: list[NtrexDocument]) -> list[Document]:
    """Re-crawls, syndicated copies and one-word edits of a few real stories, plus unrelated ones."""
    featurizer = Featurizer(Settings(stages=CHEAP))
    docs = []
    for number, story in enumerate(ntrex[:4]):
        title, body = story.english[0], " ".join(story.english[1:6])
        words = body.split()
        edited = " ".join([*words[:-1], "indeed"])
        variants = [
            (f"https://a.example.com/{number}", body),  # the original
            (f"https://a.example.com/{number}?utm_source=x", body),  # a re-crawl
            (f"https://b.example.net/{number}", body),  # a syndicated copy
            (f"https://c.example.org/{number}", edited),  # a near-duplicate
            (f"https://a.example.com/{number}", edited),  # same URL, edited
        ]
        for copy, (url, text) in enumerate(variants):
            record = {"id": f"s{number}-{copy}", "url": url, "title": title, "body": text}
            doc = featurizer.featurize(record, b"", ingest_time=1_700_000_000)
            assert isinstance(doc, Document), doc
            docs.append(doc)
    return docs


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    connection.close()


def _worker(client: redis.Redis, prefix: str) -> tuple[BatchedState, Cascade]:
    state = BatchedState(RedisStateStore(client, prefix))
    return state, Cascade(Settings(stages=CHEAP), state)


def test_a_holder_whose_lease_expired_writes_nothing(client: redis.Redis, ntrex: list[NtrexDocument]) -> None:
    prefix = f"t{uuid.uuid4().hex}:"
    lock = RedisLock(client, f"{prefix}lock", ttl_s=0.2, renew=False)
    original, _, syndicated, *_ = _pool(ntrex)
    late, late_cascade = _worker(client, prefix)
    lease = lock.acquire()
    late.warm(late_cascade.reads([original]))
    assert late_cascade.decide(original).link.verdict is Verdict.UNIQUE
    time.sleep(0.3)  # stalled past the lease (a GC pause, SIGSTOP, a slow call)
    other, other_cascade = _worker(client, prefix)
    with lock.held() as current:
        other.warm(other_cascade.reads([syndicated]))
        assert other_cascade.decide(syndicated).link.verdict is Verdict.UNIQUE
        other.flush(current)
    with pytest.raises(LeaseLost):
        late.flush(lease)
    shared = RedisStateStore(client, prefix)
    assert shared.verdict_of(original.doc_id) is None
    assert shared.exact_lookup([CONTENT_KEY + original.content_hash]) == {
        CONTENT_KEY + original.content_hash: syndicated.doc_id
    }
    assert [c.doc_id for c in shared.band_candidates("en", FOUR_BY_16.keys(original.simhash))] == [syndicated.doc_id]


def test_a_lease_that_expires_during_the_write_refuses_it(client: redis.Redis, ntrex: list[NtrexDocument]) -> None:
    prefix = f"t{uuid.uuid4().hex}:"
    lock = RedisLock(client, f"{prefix}lock", ttl_s=0.2, renew=False)
    doc = _pool(ntrex)[0]
    state, cascade = _worker(client, prefix)
    lease = lock.acquire()
    state.warm(cascade.reads([doc]))
    cascade.decide(doc)
    client.delete(lease.key)  # expired, nobody took it yet: still not ours
    with pytest.raises(LeaseLost):
        state.flush(lease)
    assert RedisStateStore(client, prefix).verdict_of(doc.doc_id) is None


def test_a_lost_verdict_race_applies_none_of_its_writes(client: redis.Redis, ntrex: list[NtrexDocument]) -> None:
    """An agent before the last reads without the lease; the document is decided meanwhile elsewhere."""
    prefix = f"t{uuid.uuid4().hex}:"
    lock = RedisLock(client, f"{prefix}lock", ttl_s=5)
    original, recrawl, *_ = _pool(ntrex)
    first, first_cascade = _worker(client, prefix)
    with lock.held() as lease:
        first.warm(first_cascade.reads([original]))
        first_cascade.decide(original)
        first.flush(lease)
    resolver, resolver_cascade = _worker(client, prefix)
    resolver.warm(resolver_cascade.reads([recrawl], Stage.SIMHASH))
    decision = resolver_cascade.resolve(recrawl, Stage.SIMHASH)
    assert decision is not None and decision.link.canonical_id == original.doc_id
    shared = RedisStateStore(client, prefix)
    shared.record_verdict(Link(recrawl.doc_id, Verdict.REVIEW, original.doc_id, Stage.SIMHASH, 1.0))
    with lock.held() as lease:
        standing = resolver.flush(lease)
    assert standing[recrawl.doc_id].verdict is Verdict.REVIEW
    assert shared.group_size(original.doc_id) == 1  # the lost duplicate was not counted


def test_the_last_agent_refuses_a_snapshot_someone_changed(client: redis.Redis, ntrex: list[NtrexDocument]) -> None:
    prefix = f"t{uuid.uuid4().hex}:"
    lock = RedisLock(client, f"{prefix}lock", ttl_s=5)
    doc = _pool(ntrex)[0]
    state, cascade = _worker(client, prefix)
    with lock.held() as lease:
        state.warm(cascade.reads([doc]))
        cascade.decide(doc)
        RedisStateStore(client, prefix).record_verdict(Link.unique(doc.doc_id))  # a writer without the lease
        with pytest.raises(StaleSnapshot):
            state.flush(lease, exact=True)


def test_the_lease_is_renewed_while_its_holder_works(client: redis.Redis, ntrex: list[NtrexDocument]) -> None:
    prefix = f"t{uuid.uuid4().hex}:"
    lock = RedisLock(client, f"{prefix}lock", ttl_s=0.3)
    doc = _pool(ntrex)[0]
    state, cascade = _worker(client, prefix)
    with lock.held() as lease:
        state.warm(cascade.reads([doc]))
        cascade.decide(doc)
        time.sleep(1.0)  # three times the time to live
        standing = state.flush(lease)
    assert standing[doc.doc_id].seq is not None
    assert RedisStateStore(client, prefix).verdict_of(doc.doc_id) == Link.unique(doc.doc_id)


def test_ids_with_any_character_survive_the_encoding(client: redis.Redis) -> None:
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    for doc_id in ["a\x1fb", "x y", '"q"', "১২৩", "\x1f\x1f", "7 [1]", "3;4;", "-"]:
        store.exact_claim([URL_KEY + doc_id], doc_id, 0)
        store.add_canonical(doc_id, 0xFFFF_0000_1234_ABCD, "en", (1, 2, 3, 4), 0)
        store.record_verdict(Link(doc_id, Verdict.DUPLICATE, doc_id + "\x1f", Stage.SIMHASH, 2.0, "m\x1f"))
        assert store.verdict_of(doc_id) == Link(doc_id, Verdict.DUPLICATE, doc_id + "\x1f", Stage.SIMHASH, 2.0, "m\x1f")
    found = {c.doc_id: c.simhash for c in store.band_candidates("en", (1, 9, 9, 9))}
    assert found["a\x1fb"] == 0xFFFF_0000_1234_ABCD and len(found) == 8


class TwoWorkers(RuleBasedStateMachine):
    """Two workers' batches interleaved: reading, stalling past the lease, committing, in any order.

    Worker 0 is the last agent (decides under the lease, exact snapshot); worker 1 is an agent
    before the last (resolves on a snapshot read without the lease, flushes under it).
    """

    client: redis.Redis
    pool: list[Document]

    def __init__(self) -> None:
        super().__init__()
        self.prefix = f"t{uuid.uuid4().hex}:"
        self.lock = RedisLock(self.client, f"{self.prefix}lock", ttl_s=30, renew=False)
        self.workers = [_worker(self.client, self.prefix) for _ in range(2)]
        self.leases: list[Lease | None] = [None, None]
        self.busy = [False, False]
        self.shared = RedisStateStore(self.client, self.prefix)

    @precondition(lambda self: not self.busy[0])
    @rule(picks=st.lists(st.integers(0, 19), min_size=1, max_size=6))
    def last_agent_reads(self, picks: list[int]) -> None:
        if self.client.exists(self.lock._name):
            return  # the lease is someone else's: the last agent waits
        self.leases[0] = self.lock.acquire(wait_s=0)
        state, cascade = self.workers[0]
        docs = [self.pool[i] for i in picks]
        state.warm(cascade.reads(docs))
        for doc in docs:
            cascade.decide(doc)
        self.busy[0] = True

    @precondition(lambda self: not self.busy[1])
    @rule(picks=st.lists(st.integers(0, 19), min_size=1, max_size=6))
    def earlier_agent_reads(self, picks: list[int]) -> None:
        state, cascade = self.workers[1]
        docs = [self.pool[i] for i in picks]
        state.warm(cascade.reads(docs, Stage.SIMHASH))
        for doc in docs:
            cascade.resolve(doc, Stage.SIMHASH)
        self.busy[1] = True

    @rule(worker=st.integers(0, 1))
    def lease_expires(self, worker: int) -> None:
        """The holder stalls past the time to live: the lease is gone, whoever takes it next."""
        lease = self.leases[worker]
        if lease is not None:
            self.lock.release(lease)

    @precondition(lambda self: any(self.busy))
    @rule(worker=st.integers(0, 1))
    def commit(self, worker: int) -> None:
        if not self.busy[worker]:
            return
        state, _ = self.workers[worker]
        lease = self.leases[worker]
        if lease is None:  # an agent before the last takes the lease only to write
            if self.client.exists(self.lock._name):
                return
            lease = self.lock.acquire(wait_s=0)
        try:
            state.flush(lease, exact=worker == 0)
        except (LeaseLost, StaleSnapshot):
            state.reset()  # refused: the batch is decided again later
        finally:
            self.lock.release(lease)
            self.leases[worker] = None
            self.busy[worker] = False

    @invariant()
    def stars_one_canonical_per_key_counts_right(self) -> None:
        verdicts = {doc.doc_id: self.shared.verdict_of(doc.doc_id) for doc in self.pool}
        recorded = {doc_id: link for doc_id, link in verdicts.items() if link is not None}
        canonicals = {doc_id for doc_id, link in recorded.items() if link.verdict is Verdict.UNIQUE}
        for doc_id, link in recorded.items():
            if link.verdict is Verdict.DUPLICATE:
                assert link.canonical_id in canonicals, f"{doc_id} -> {link.canonical_id}: a chain"
                assert link.canonical_id != doc_id
        for doc in self.pool:
            for key in (URL_KEY + doc.url_hash, CONTENT_KEY + doc.content_hash):
                holder = self.shared.exact_lookup([key]).get(key)
                if holder is not None:
                    assert recorded.get(holder) is not None and recorded[holder].verdict is not Verdict.DUPLICATE
            in_bands = {c.doc_id for c in self.shared.band_candidates(doc.language, FOUR_BY_16.keys(doc.simhash))}
            assert in_bands <= canonicals, f"non-canonicals in the band sets: {in_bands - canonicals}"
        members = Counter(link.canonical_id for link in recorded.values() if link.verdict is Verdict.DUPLICATE)
        for canonical in canonicals:
            assert self.shared.group_size(canonical) == 1 + members[canonical]
        seqs = [link.seq for link in recorded.values()]
        assert len(set(seqs)) == len(seqs) and None not in seqs


def test_two_workers_keep_the_invariants_in_any_interleaving(client: redis.Redis, ntrex: list[NtrexDocument]) -> None:
    TwoWorkers.client = client
    TwoWorkers.pool = _pool(ntrex)
    TwoWorkers.TestCase.settings = settings(
        max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
    )
    TwoWorkers.TestCase().runTest()
