"""Retention in the Redis state store, on a real redis-server: every entry is stamped, an entry older than
its family's retention is invisible at once (stream time, `RetentionSettings`) and swept later by bucket."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis

from streams.config import RetentionSettings
from streams.core.model import DAY_S, Link, Stage, Verdict
from streams.core.ports import Reads
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import Lease, RedisLock
from streams.stores.redis_store import RedisStateStore, Swept

T0 = 1_700_000_000  # 2023-11-14, long before the wall clock: the clamp to wall + 1 day never bites
BANDS = (1, 2, 3, 4)
SIMHASH = 0x0004_0003_0002_0001


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex}:"


def _store(client: redis.Redis, prefix: str, bucket_bits: int = 12) -> RedisStateStore:
    return RedisStateStore(client, prefix, bucket_bits, RetentionSettings())


def _link(doc_id: str, published_at: int, canonical: str | None = None) -> Link:
    if canonical is None:
        return replace(Link.unique(doc_id), published_at=published_at)
    return Link(doc_id, Verdict.DUPLICATE, canonical, Stage.URL, published_at=published_at)


def _entries(client: redis.Redis, prefix: str, kind: str) -> int:
    """How many fields the hashes of one key family hold."""
    return sum(int(client.hlen(key)) for key in client.scan_iter(f"{prefix}{kind}:*", count=10_000))


def test_each_family_hides_its_entries_once_older_than_its_retention(client: redis.Redis, prefix: str) -> None:
    store = _store(client, prefix)
    store.advance(T0)
    store.add_canonical("a", SIMHASH, "en", BANDS, T0)
    store.exact_claim(["u:a"], "a", T0)
    store.record_verdict(_link("a", T0))
    assert store.grow_group("a", T0) == 2

    store.advance(T0 + 6 * DAY_S)  # within every retention
    assert store.verdict_of("a") == Link.unique("a")
    assert [c.doc_id for c in store.band_candidates("en", BANDS)] == ["a"]

    store.advance(T0 + 9 * DAY_S)  # past verdicts_days (7)
    assert store.verdict_of("a") is None
    assert store.verdicts_of(["a"]) == {"a": None}
    assert [c.doc_id for c in store.band_candidates("en", BANDS)] == ["a"]

    store.advance(T0 + 32 * DAY_S)  # past bands_days (30): no candidate, whatever the band
    assert store.band_candidates("en", BANDS) == []
    assert store.band_candidates_many([("en", (1, 0, 0, 0)), ("en", (0, 0, 0, 4))]) == [[], []]
    assert store.exact_lookup(["u:a"]) == {"u:a": "a"}
    assert store.group_size("a") == 2

    store.advance(T0 + 367 * DAY_S)  # past exact_days (365): keys and group sizes
    assert store.exact_lookup(["u:a"]) == {}
    assert store.group_size("a") == 1


def test_expired_entries_are_absent_to_writes_too(client: redis.Redis, prefix: str) -> None:
    """A key, a verdict, a canonical or a group past retention is claimed, recorded, registered or
    counted afresh, never kept alive by its old value."""
    store = _store(client, prefix)
    store.advance(T0)
    store.add_canonical("a", SIMHASH, "en", BANDS, T0)
    store.exact_claim(["u:a"], "a", T0)
    store.record_verdict(_link("a", T0))
    store.grow_group("a", T0)
    old_seq = store.band_candidates("en", BANDS)[0].seq

    later = T0 + 400 * DAY_S
    store.advance(later)
    assert store.exact_claim(["u:a"], "b", later) == {"u:a": "b"}
    assert not store.exact_replace("u:a", "a", "c")
    stood = store.record_verdict(_link("a", later, canonical="b"))
    assert stood.verdict is Verdict.DUPLICATE and store.verdict_of("a") == stood
    assert store.grow_group("a", later) == 2
    store.add_canonical("a", SIMHASH, "en", BANDS, later)
    (again,) = store.band_candidates("en", BANDS)
    assert again.doc_id == "a" and again.seq > old_seq
    assert again.published_at >= later  # the canonical carries its stamp (the last second of its day)


def test_the_clock_never_goes_back_is_shared_and_is_clamped_to_the_wall(client: redis.Redis, prefix: str) -> None:
    first, second = _store(client, prefix), _store(client, prefix)
    assert first.clock() == 0
    assert first.advance(T0) == T0
    assert second.advance(T0 - DAY_S) == T0
    assert second.clock() == T0
    assert first.advance(T0 + 5) == second.clock() == T0 + 5
    far = int(time.time()) + 3650 * DAY_S  # an article dated ten years ahead expires nothing early
    assert second.advance(far) <= int(time.time()) + DAY_S + 1
    assert first.clock() == second.clock()


def _populate(store: RedisStateStore, count: int, published_at: int, tag: str) -> None:
    for i in range(count):
        doc = f"{tag}{i}"
        simhash = (i << 48) | (i << 32) | (i << 16) | i
        store.add_canonical(doc, simhash, "en" if i % 2 else "bn", (i, i, i, i), published_at)
        store.exact_claim([f"u:{doc}", f"c:{doc}"], doc, published_at)
        store.record_verdict(_link(doc, published_at))
        store.grow_group(doc, published_at)


def test_expire_removes_in_bounded_steps_and_resumes_after_an_interruption(client: redis.Redis, prefix: str) -> None:
    store = _store(client, prefix, bucket_bits=4)
    later = T0 + 400 * DAY_S
    store.advance(T0)
    _populate(store, 120, T0, "old")
    store.advance(later)
    _populate(store, 30, later, "new")
    expired = 120 * (1 + 2 + 1 + 1)  # per document: its verdict, two keys, group and canonical (s:, c:, b:)
    assert store.expire(limit=100) == 100

    restarted = _store(client, prefix, bucket_bits=4)  # the cursor lives in Redis: another worker resumes
    removed = 100
    while step := restarted.expire(limit=97):
        assert step <= 97
        removed += step
    assert removed == expired
    assert restarted.expire() == 0
    assert [_entries(client, prefix, kind) for kind in ("v", "x", "g", "s", "c")] == [30, 60, 30, 30, 30]
    band_seqs = [s for key in client.scan_iter(f"{prefix}b:*") for v in client.hvals(key) for s in v.split()]
    assert len(band_seqs) == 30 * 4
    assert sorted(c.doc_id for c in restarted.band_candidates("en", (1, 1, 1, 1))) == ["new1"]


def test_a_sweep_after_the_server_forgot_its_scripts_loads_them_and_completes(client: redis.Redis, prefix: str) -> None:
    """A restarted Redis has an empty script cache: the sweep, first to run after it, loads its scripts again
    as every other call does, where it stopped on NoScriptError (logged, retried by the next batch)."""
    store = _store(client, prefix, bucket_bits=4)
    store.advance(T0)
    _populate(store, 5, T0, "old")
    store.advance(T0 + 400 * DAY_S)
    client.script_flush()
    assert store.expire() == 5 * 5


def test_a_sweep_past_its_deadline_still_takes_a_step(client: redis.Redis, prefix: str) -> None:
    """The sweep after a batch gets a share of the batch's time, which may be spent before it starts (a
    slow host): the pass moves on by a step anyway, or it would never complete."""
    store = _store(client, prefix, bucket_bits=4)
    store.advance(T0)
    _populate(store, 5, T0, "old")
    store.advance(T0 + 400 * DAY_S)
    swept = store.sweep(100, deadline=time.monotonic() - 1)
    assert swept.removed == 5 and not swept.done  # the first step: the v: buckets, all 16 of them
    assert client.hget(f"{prefix}sweep", "at") not in (None, "0")


def test_a_family_kept_forever_is_never_hidden_nor_swept(client: redis.Redis, prefix: str) -> None:
    store = RedisStateStore(client, prefix, 4, RetentionSettings(exact_days=0, bands_days=0))
    store.advance(T0)
    _populate(store, 5, T0, "old")
    store.advance(T0 + 4000 * DAY_S)
    assert store.expire() == 5  # the verdicts only
    assert store.exact_lookup(["u:old1"]) == {"u:old1": "old1"} and store.group_size("old1") == 2
    assert [c.doc_id for c in store.band_candidates("en", (1, 1, 1, 1))] == ["old1"]
    forever = RedisStateStore(
        client, f"{prefix}forever:", 4, RetentionSettings(verdicts_days=0, exact_days=0, bands_days=0)
    )
    forever.record_verdict(_link("a", T0))
    forever.advance(T0 + 4000 * DAY_S)
    assert forever.verdict_of("a") == Link.unique("a") and forever.expire() == 0
    assert not client.exists(f"{prefix}forever:sweep")  # no pass at all


def test_a_sweep_under_a_lease_lost_removes_nothing(client: redis.Redis, prefix: str) -> None:
    store = _store(client, prefix, bucket_bits=4)
    store.advance(T0)
    _populate(store, 5, T0, "old")
    store.advance(T0 + 400 * DAY_S)
    assert store.sweep(100, Lease(f"{prefix}lock", "not ours")) == Swept(0, False)
    assert store.expire() == 5 * 5


def test_batches_flushed_under_the_lease_advance_the_clock_and_sweep_a_share_each(
    client: redis.Redis, prefix: str
) -> None:
    """The first batch of a new day starts the pass; it goes on a step or more after each later batch (a
    share of the batch's time: the verdicts are not held back for the whole pass) until complete."""
    shared = _store(client, prefix, bucket_bits=4)
    shared.advance(T0)
    _populate(shared, 20, T0, "old")
    later = T0 + 400 * DAY_S
    batch = BatchedState(shared)
    lock = RedisLock(client, f"{prefix}lock", ttl_s=5)
    for n in range(8):  # the pass has 4 families, 16 buckets each, and the s: buckets: at most 5 steps
        doc = f"n{n}"
        batch.warm(Reads(doc_ids=[doc], exact_keys=[f"u:{doc}"], band_queries=[("en", BANDS)]))
        batch.exact_claim([f"u:{doc}"], doc, later)
        batch.record_verdict(_link(doc, later))
        with lock.held() as lease:
            assert batch.flush(lease) == {doc: Link.unique(doc)}
        assert shared.clock() == later and batch.clock() == later
        if n == 0:
            assert _entries(client, prefix, "v") == 1  # the old verdicts, swept by the first step
    assert [_entries(client, prefix, kind) for kind in ("v", "x", "g", "s", "c", "b")] == [8, 8, 0, 0, 0, 0]
    assert shared.sweep(100).done and not shared.sweep(100).removed


def test_a_verdict_within_its_retention_is_found_on_redelivery(client: redis.Redis, prefix: str) -> None:
    shared = _store(client, prefix, bucket_bits=4)
    lock = RedisLock(client, f"{prefix}lock", ttl_s=5)

    def decide(doc_id: str, published_at: int) -> Link | None:
        """One batch deciding `doc_id` as a canonical unless it has a verdict already."""
        batch = BatchedState(shared)
        batch.warm(Reads(doc_ids=[doc_id], exact_keys=[], band_queries=[]))
        prior = batch.verdict_of(doc_id)
        if prior is None:
            batch.record_verdict(_link(doc_id, published_at))
        with lock.held() as lease:
            batch.flush(lease)
        return prior

    assert decide("a", T0) is None
    assert decide("later", T0 + 6 * DAY_S) is None  # the clock moves on, a sweep runs
    assert decide("a", T0) == Link.unique("a")  # redelivered within verdicts_days: the same verdict
    assert decide("latest", T0 + 9 * DAY_S) is None
    assert decide("a", T0) is None  # past verdicts_days: gone, decided again
    assert shared.verdict_of("later") == Link.unique("later")


def test_a_link_to_a_canonical_whose_verdict_expired_is_written(client: redis.Redis, prefix: str) -> None:
    """Exact keys outlive verdicts (365 against 7 days): a copy found by its URL a month later links to a
    canonical whose verdict is gone, and that is no stale snapshot."""
    shared = _store(client, prefix)
    shared.advance(T0)
    shared.exact_claim(["u:a"], "a", T0)
    shared.record_verdict(_link("a", T0))
    later = shared.advance(T0 + 30 * DAY_S)
    batch = BatchedState(shared)
    batch.warm(Reads(doc_ids=["b"], exact_keys=["u:a"], band_queries=[]))
    assert batch.exact_lookup(["u:a"]) == {"u:a": "a"} and batch.verdict_of("a") is None
    batch.grow_group("a", later)
    batch.record_verdict(_link("b", later, canonical="a"))
    with RedisLock(client, f"{prefix}lock", ttl_s=5).held() as lease:
        assert batch.flush(lease, exact=True) == {"b": Link("b", Verdict.DUPLICATE, "a", Stage.URL)}
    assert shared.group_size("a") == 2


def test_made_in_a_batch_and_already_past_retention_is_hidden_as_redis_hides_it(
    client: redis.Redis, prefix: str
) -> None:
    """A backfilled document older than bands_days is no candidate in its own batch either: the batch
    decides as the store will read once it is written."""
    shared = _store(client, prefix)
    shared.advance(T0 + 60 * DAY_S)
    batch = BatchedState(shared)
    batch.warm(Reads(doc_ids=["old"], exact_keys=[], band_queries=[("en", BANDS)]))
    batch.add_canonical("old", SIMHASH, "en", BANDS, T0)
    assert batch.band_candidates("en", BANDS) == []
    batch.add_canonical("new", SIMHASH, "en", BANDS, T0 + 60 * DAY_S)
    assert [c.doc_id for c in batch.band_candidates("en", BANDS)] == ["new"]


def _bucket_reads(client: redis.Redis) -> int:
    """Keys looked up by the server so far (a script's HGETALL of a bucket counts, found or not)."""
    stats = client.info("stats")
    return int(stats["keyspace_hits"]) + int(stats["keyspace_misses"])


def _pass_reads(client: redis.Redis, store: RedisStateStore) -> int:
    """Keys the server looked up while `store` swept a whole pass."""
    before = _bucket_reads(client)
    while store.expire():
        pass
    return _bucket_reads(client) - before


def test_a_pass_reads_no_bucket_of_a_family_whose_oldest_entry_is_within_its_retention(
    client: redis.Redis, prefix: str
) -> None:
    """A pass reads every bucket of a family (2**bucket_bits of each of four) to find what expired; while the
    oldest stamp the family can hold is within its retention, nothing can have, and the pass skips it: a new
    state's first days, and a replay of a young topic, sweep for nothing otherwise."""
    store = _store(client, prefix, bucket_bits=8)
    store.advance(T0)
    _populate(store, 20, T0, "a")
    assert _pass_reads(client, store) < 64  # a new state: its first pass
    for day in (1, 2, 3):
        store.advance(T0 + day * DAY_S)
        _populate(store, 5, T0 + day * DAY_S, f"d{day}-")
        assert _pass_reads(client, store) < 64  # within every family's retention (verdicts: 7 days)
    store.advance(T0 + 8 * DAY_S)  # the first verdicts expired: that family is read, the others are not
    assert 256 <= _pass_reads(client, store) < 2 * 256
    assert _entries(client, prefix, "v") == 15
    assert [_entries(client, prefix, kind) for kind in ("x", "g", "s", "c")] == [70, 35, 35, 35]


def test_an_entry_written_older_than_its_familys_oldest_is_swept_once_expired(client: redis.Redis, prefix: str) -> None:
    """A backfill writes entries older than any the family held: the family's oldest stamp goes back with
    them, so the next pass reads the family and removes them."""
    store = _store(client, prefix, bucket_bits=8)
    store.advance(T0)
    _populate(store, 5, T0, "a")
    while store.expire():
        pass
    store.record_verdict(_link("archived", T0 - 30 * DAY_S))  # past verdicts_days at once: hidden, still written
    assert store.verdict_of("archived") is None and _entries(client, prefix, "v") == 6
    store.advance(T0 + DAY_S)
    assert _pass_reads(client, store) >= 256
    assert _entries(client, prefix, "v") == 5


def test_a_state_without_the_oldest_stamps_is_read_whole(client: redis.Redis, prefix: str) -> None:
    """A state marked before the families' oldest stamps were kept (or one whose stamps went with a failover):
    nothing says what it holds, so every family is read."""
    store = _store(client, prefix, bucket_bits=4)
    store.advance(T0)
    _populate(store, 5, T0, "old")
    client.delete(f"{prefix}oldest")
    store.advance(T0 + 400 * DAY_S)
    assert store.expire() == 5 * 5
    assert [_entries(client, prefix, kind) for kind in ("v", "x", "g", "s", "c", "b")] == [0, 0, 0, 0, 0, 0]


def test_every_s_bucket_is_swept_past_a_familys_worth_of_buckets(client: redis.Redis, prefix: str) -> None:
    """The s: buckets come after the hash families in a pass and are one family: with 4 bucket bits a family has
    16 buckets, and seqs from 16 * 256 on live in s: bucket 16 and later (16 bits: from 16.7M, which a long-lived
    state passes; seqs are never reused). A pass took each 16th s: bucket for a family's first and skipped the
    rest of the pass there, so those canonicals were never removed."""
    store = _store(client, prefix, bucket_bits=4)
    store.advance(T0)
    lock = RedisLock(client, f"{prefix}lock", ttl_s=30, fence=store.fence)
    count = 4_200
    for start in range(0, count, 700):
        ids = [f"d{i}" for i in range(start, min(count, start + 700))]
        batch = BatchedState(store)
        batch.warm(Reads(doc_ids=ids, exact_keys=[], band_queries=[]))
        for i, doc in enumerate(ids, start):
            simhash = (i << 48) | (i << 32) | (i << 16) | i
            batch.add_canonical(doc, simhash, "en", store.band_layout.keys(simhash), T0)
            batch.record_verdict(_link(doc, T0))
        with lock.held() as lease:
            batch.flush_applied(lease)
    assert int(client.get(f"{prefix}seq")) == count
    for day in (400, 401):  # past every retention, and a pass the day after
        store.advance(T0 + day * DAY_S)
        while store.expire():
            pass
    assert _entries(client, prefix, "s") == 0
    assert _entries(client, prefix, "b") == 0


def test_a_document_decided_meanwhile_keeps_the_verdict_that_stands_when_its_batch_sweeps_that_verdict(
    client: redis.Redis, prefix: str
) -> None:
    """An agent before the last reads without the lease: d has no verdict in its snapshot, and another worker records
    one (d a canonical) before the batch is written. The batch's write leaves d out (decided meanwhile) and its e,
    8 days later, moves the clock past d's verdict, which the flush's sweep then removes. The flush read what stands
    for d after that sweep, found nothing and returned no verdict for d: the agent published its own link for d
    (a duplicate of c), never recorded, beside the canonical verdict d has: two verdicts for one document."""
    shared = _store(client, prefix)
    shared.advance(T0)
    shared.exact_claim(["u:c"], "c", T0)
    shared.record_verdict(_link("c", T0))
    batch = BatchedState(shared)
    batch.warm(Reads(doc_ids=["d", "e"], exact_keys=["u:c"], band_queries=[]))
    assert batch.verdict_of("d") is None
    recorded = shared.record_verdict(_link("d", T0))  # another worker, meanwhile
    batch.grow_group("c", T0)
    batch.record_verdict(_link("d", T0, canonical="c"))
    later = T0 + 8 * DAY_S
    batch.record_verdict(_link("e", later))
    with RedisLock(client, f"{prefix}lock", ttl_s=5).held() as lease:
        standing = batch.flush(lease)
    assert shared.verdict_of("d") is None  # past verdicts_days at e's time: swept
    stood = standing.get("d")
    assert stood is not None, f"the flush gave d no verdict: {standing}"
    assert (stood.verdict, stood.canonical_id, stood.seq) == (Verdict.UNIQUE, "d", recorded.seq)
    assert shared.group_size("c") == 1
