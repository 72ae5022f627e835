"""The Redis state store after a restart on an older snapshot and under a clock a skewed worker moved years
ahead: a real redis-server of the test's own on a free port. Each test is a guarantee that once broke (a lost
state detected, one verdict per document, nothing lost to the sweep).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from streams.core.model import DAY_S, Link, Stage, Verdict
from streams.evaluation.services import LocalRedis
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import RedisStateStore, StateLost
from streams.stores.writes import CanonicalWrite, ClaimWrite, GrowWrite, ReplaceVerdictWrite, VerdictWrite, Write

NOW = int(time.time())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalRedis]:
    """A redis-server of this test alone (nothing saved unless the test says SAVE), restartable on its data."""
    local = LocalRedis(tmp_path / "redis")
    local.start()
    yield local
    local.stop()


def _client(server: LocalRedis) -> redis.Redis:
    return redis.Redis.from_url(server.url, decode_responses=True)


def _reconnected(client: redis.Redis) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return
        except (redis.ConnectionError, redis.BusyLoadingError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _batch(doc_id: str) -> list[Write]:
    return [ClaimWrite((f"u:{doc_id}",), doc_id, NOW), VerdictWrite(replace(Link.unique(doc_id), published_at=NOW))]


def _lock(store: RedisStateStore, client: Any) -> RedisLock:
    return RedisLock(client, f"{store._prefix}lock:register", ttl_s=30, renew=False, fence=store.fence)


def _apply(store: RedisStateStore, client: Any, writes: list[Write]) -> dict[str, int]:
    with _lock(store, client).held() as lease:
        return store.apply(writes, lease).seqs


def test_a_restart_from_a_snapshot_older_than_the_last_writes_is_a_lost_state(server: LocalRedis) -> None:
    """Redis restarted on an RDB taken before the last batches (default persistence, an AOF fsync'd every
    second, a backup restored): the verdicts written since are gone, the counters went back. The store that
    wrote them went on, giving b's seq to c; it now refuses (StateLost) instead of mixing the old state with
    new verdicts."""
    client = _client(server)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    _apply(store, client, _batch("a"))
    client.save()  # the snapshot: holds a
    seq_b = _apply(store, client, _batch("b"))["b"]
    assert store.verdict_of("b") is not None
    server.stop()  # no save points: nothing written on the way out
    server.start()  # loads the older dump.rdb
    _reconnected(client)
    assert store.verdict_of("a") is not None and store.verdict_of("b") is None  # b's verdict is lost
    try:
        seq_c = _apply(store, client, _batch("c"))
    except StateLost:
        return
    pytest.fail(
        f"a state restored from an older snapshot was written into silently: b's verdict (seq {seq_b}) is gone "
        f"and c got seq {seq_c['c']}"
    )


def test_a_store_that_only_read_before_a_restart_on_an_older_snapshot_refuses_it(server: LocalRedis) -> None:
    """A second worker began on the state before the restart (it saw the counter at b's seq) and had drawn no
    seq yet, say its partitions were idle: after Redis came back on a snapshot without b, it gave b's seq to c.
    The counter a store has seen is now its mark, not only what it drew: below it, the state went back."""
    client = _client(server)
    prefix = f"t{uuid.uuid4().hex}:"
    writer = RedisStateStore(client, prefix)
    _apply(writer, client, _batch("a"))
    client.save()  # the snapshot: holds a
    seq_b = _apply(writer, client, _batch("b"))["b"]
    idle = RedisStateStore(client, prefix)
    assert idle.verdict_of("b") is not None  # it began on the state, and read from it
    server.stop()
    server.start()  # loads the older dump.rdb
    _reconnected(client)
    try:
        seq_c = _apply(idle, client, _batch("c"))
    except StateLost as exc:
        assert "went back" in str(exc)
        return
    pytest.fail(f"b's verdict (seq {seq_b}) is gone and c got seq {seq_c['c']} from a store that saw {seq_b}")


def test_a_clock_far_ahead_of_the_wall_hides_and_sweeps_no_live_verdict(server: LocalRedis) -> None:
    """A worker whose wall clock is years ahead (a bad NTP, a VM resumed wrong) leaves `{prefix}clock` there:
    it clamps to its own wall. The other workers took it: at that clock every verdict was past its retention,
    hidden (a redelivery got a second verdict) and swept (lost for good). A clock read is now bounded by the
    reader's wall clock plus a day, as every write is."""
    client = _client(server)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    _apply(store, client, _batch("a"))
    client.set(f"{prefix}clock", NOW + 20 * 365 * DAY_S)  # what that worker's `advance` left
    removed = store.expire()
    bucket = store._bucket("v", "a")
    assert client.hget(bucket, "a") is not None, f"the sweep removed {removed} live entries, a's verdict with them"
    assert store.verdict_of("a") is not None


def test_a_redelivery_under_a_clock_far_ahead_gets_its_first_verdict(server: LocalRedis) -> None:
    """The same clock, without a sweep: a redelivered document was recorded a second time, with a new seq."""
    client = _client(server)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    first = _apply(store, client, _batch("a"))["a"]
    client.set(f"{prefix}clock", NOW + 20 * 365 * DAY_S)
    again = _apply(store, client, _batch("a"))
    assert again == {}, f"a was given a second verdict (seq {again.get('a')}, first {first})"


def test_a_restart_without_data_under_a_batch_is_a_lost_state_to_the_next_process_too(server: LocalRedis) -> None:
    """Redis restarts empty between two rounds of a batch: the store that was writing refuses (StateLost), yet
    the round's unfenced writes (the languages seen) land on the empty server, so keys are back with no layout
    marker and no fence. A worker started next must see a lost state (rebuild it with `dedup replay --fresh`),
    not a state of an older version of the software, and the rebuild must be able to clear it."""
    client = _client(server)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    _apply(store, client, _batch("a"))
    landed, rounds = store._sink, 0

    def restarted(sinks: list[Any]) -> None:
        nonlocal rounds
        rounds += 1
        if rounds == 2:
            server.stop()
            server.start()  # nothing saved: empty
            _reconnected(client)
        landed(sinks)

    store._sink = restarted  # type: ignore[method-assign]
    first = [*_batch("b")[:1], CanonicalWrite("b", 1, "en", (1, 2, 3, 4), NOW), _batch("b")[1]]
    with pytest.raises(StateLost):
        _apply(store, client, first)
    assert client.keys(f"{prefix}*")  # what the round wrote after the restart
    fresh_process = RedisStateStore(_client(server), prefix)
    with pytest.raises(StateLost, match="--fresh"):
        fresh_process.verdict_of("a")
    RedisStateStore(_client(server), prefix, restoring=True).clear()
    rebuilt = RedisStateStore(_client(server), prefix)
    assert rebuilt.verdict_of("a") is None
    assert _apply(rebuilt, client, _batch("c")).keys() == {"c"}


def test_a_relink_that_loses_its_document_to_another_writer_leaves_the_group_as_it_was(
    server: LocalRedis,
) -> None:
    """A relink takes b, a's only member, out of a's group; between its read and its verdict another writer
    (without the lease) replaces b's verdict, so the relink's verdict is not written. The shrink it planned
    must leave no trace: a's group still counts b, stamp and all (a group that reads as alone while b links
    to a lets a relink link a into another group: a chain)."""
    client = _client(server)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    linked = Link("b", Verdict.DUPLICATE, "a", Stage.URL, published_at=NOW)
    _apply(store, client, [*_batch("a"), GrowWrite("a", 1, NOW), VerdictWrite(linked)])
    assert store.group_sizes(["a"]) == {"a": 2}
    was = store.verdict_of("b")
    assert was is not None
    landed, rounds = store._sink, 0

    def raced(sinks: list[Any]) -> None:
        nonlocal rounds
        rounds += 1
        if rounds == 3:  # the verdicts: another writer got there first
            other = RedisStateStore(_client(server), prefix)
            assert other.replace_verdict(replace(linked, stage=Stage.CONTENT), was)
        landed(sinks)

    store._sink = raced  # type: ignore[method-assign]
    moved = replace(Link.unique("b"), published_at=NOW)
    _apply(store, client, [GrowWrite("a", -1, 0), ReplaceVerdictWrite(moved, was)])
    assert store.verdict_of("b").stage == Stage.CONTENT  # type: ignore[union-attr]
    assert store.group_sizes(["a"]) == {"a": 2}
