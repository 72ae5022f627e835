"""A Redis that lost the state (restarted without its data, flushed, failed over to an empty replica) or
holds a half-finished replay is never decided on: the workers' writes are refused until it is rebuilt.

Written into, an emptied state would give redelivered documents second verdicts, make duplicates new
canonicals and restart the verdict counter, whose order `dedup replay` restores in.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from benchmarks.replay_speed import keys, link_records, produce
from streams.config import RetentionSettings
from streams.core.model import Link
from streams.evaluation.stack import Stack
from streams.kafka.replay import Restorer, replay_links
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import RedisStateStore, StateLost, connect
from streams.stores.writes import ClaimWrite, VerdictWrite, Write

T = 1_700_000_000


def _batch(doc_id: str) -> list[Write]:
    return [ClaimWrite((f"u:{doc_id}",), doc_id, T), VerdictWrite(Link.unique(doc_id))]


def _apply(store: RedisStateStore, client: Any, writes: list[Write]) -> None:
    lock = RedisLock(client, f"{store._prefix}lock:register", ttl_s=30, fence=store.fence)
    with lock.held() as lease:
        store.apply(writes, lease)


def _state_keys(client: Any, prefix: str) -> list[str]:
    return sorted(k for k in client.scan_iter(match=f"{prefix}*", count=10_000) if ":lock:" not in k)


def test_a_state_emptied_under_a_running_store_is_never_written_into(one_or_cluster_url: str) -> None:
    client = connect(one_or_cluster_url)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    _apply(store, client, _batch("a"))
    assert store.verdict_of("a") is not None
    for key in _state_keys(client, prefix):  # what a restart without persistence or FLUSHALL leaves
        client.delete(key)
    with pytest.raises(StateLost, match="dedup replay"):
        _apply(store, client, _batch("b"))
    assert _state_keys(client, prefix) == []
    # Rebuilt (a replay marks the layout first): this process still refuses, since it may have decided on
    # what it read before; restarted, it writes.
    client.set(f"{prefix}layout", store.layout)
    with pytest.raises(StateLost, match="restart"):
        _apply(store, client, _batch("b"))
    fresh = RedisStateStore(client, prefix)
    _apply(fresh, client, _batch("b"))
    assert fresh.verdict_of("b") is not None
    client.close()


def test_the_workers_wait_for_an_unfinished_replay(one_or_cluster_url: str) -> None:
    client = connect(one_or_cluster_url)
    prefix = f"t{uuid.uuid4().hex}:"
    worker = RedisStateStore(client, prefix)
    _apply(worker, client, _batch("a"))
    replaying = RedisStateStore(client, prefix, restoring=True)
    client.set(replaying.checkpoint_key, b"[1, 2]")  # a replay stopped half-way, or still running
    with pytest.raises(StateLost, match="replay"):
        _apply(worker, client, _batch("b"))
    assert worker.verdict_of("b") is None
    _apply(replaying, client, _batch("c"))  # the replay itself goes on
    client.delete(replaying.checkpoint_key)  # it completed
    _apply(worker, client, _batch("b"))
    assert worker.verdict_of("b") is not None
    client.close()


def test_a_replay_holds_the_workers_back_from_before_its_first_write(redis_url: str) -> None:
    client = connect(redis_url)
    prefix = f"t{uuid.uuid4().hex}:"
    worker = RedisStateStore(client, prefix)
    _apply(worker, client, _batch("a"))
    restorer = Restorer(client, prefix, None, RetentionSettings(), lock_ttl_s=30)
    with restorer.owned():
        restorer.begin()
        assert restorer.checkpoint() is None  # nothing restored yet: it starts from the beginning
        with pytest.raises(StateLost, match="replay"):
            _apply(worker, client, _batch("b"))
        restorer.done()
    _apply(worker, client, _batch("b"))
    assert worker.verdict_of("b") is not None
    client.close()


def test_a_cluster_master_failed_over_to_an_empty_replica_is_a_lost_state(redis_cluster: Any) -> None:
    """A replica that had not synced (its first copy still under way, or restarted without data) takes over
    its master's slots empty, while the other masters keep theirs and the layout marker may well be among
    them: written into, that third of the state would give its documents second verdicts and make copies
    canonicals. Every batch is refused, by this store and by one started afresh, until it is rebuilt."""
    client = connect(redis_cluster.url)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    _apply(store, client, [w for i in range(40) for w in _batch(f"a{i}")])
    emptied = redis_cluster.empty_a_master(prefix, spared=f"{prefix}layout")
    assert emptied > 0  # the layout marker survived on another master: a state that looks whole
    later = [w for i in range(40) for w in _batch(f"b{i}")]
    with pytest.raises(StateLost, match="dedup replay"):
        _apply(store, client, later)
    with pytest.raises(StateLost, match="dedup replay"):
        _apply(RedisStateStore(client, prefix), client, later)  # a worker restarted meanwhile
    assert all(store.verdict_of(f"b{i}") is None for i in range(40))
    assert store.exact_lookup([f"u:b{i}" for i in range(40)]) == {}
    client.close()


def test_replay_fresh_rebuilds_a_state_a_failover_left_in_part(
    redis_cluster: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A state partly lost cannot be replayed into (what survived is not what the links rebuild in order);
    `dedup replay --fresh` deletes it first and rebuilds it whole: the same keys as the first replay."""
    stack = Stack(kafka_bootstrap, redis_cluster.url, tmp_path, partitions=3)
    stack.create_topics()
    settings = stack.settings()
    produce(stack.bootstrap, settings.topics.links, iter(list(link_records(600, seed=3))))
    client = connect(redis_cluster.url)
    prefix = f"{stack.name}:"
    replay_links(settings, client, None, prefix=prefix, batch=100)
    whole = keys(client, prefix, ignore=("sweep",))
    redis_cluster.empty_a_master(prefix, spared=f"{prefix}layout")
    with pytest.raises(StateLost, match="--fresh"):
        replay_links(settings, client, None, prefix=prefix, batch=100)
    stats = replay_links(settings, client, None, prefix=prefix, batch=100, fresh=True)
    assert stats.restored == 600
    assert keys(client, prefix, ignore=("sweep",)) == whole
    assert RedisStateStore(client, prefix).verdict_of(next(iter(link_records(1, seed=3)))[0]) is not None
    client.close()


@pytest.mark.parametrize("older", [False, True], ids=["same layout", "from layout 2"])
def test_a_state_rebuilt_under_a_running_store_is_never_written_into(one_or_cluster_url: str, older: bool) -> None:
    """`dedup replay --fresh` while a worker runs: the worker waits out the checkpoint and, unless one of its
    batches fell in the instant the marker was gone, never saw the state lost. The rebuilt state is not the
    one it read: its model codes are drawn again, and a layout 2 state comes back as layout 3 (exact keys as
    integers, where the worker would write and look up hex). It refuses, until restarted."""
    client = connect(one_or_cluster_url)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    _apply(store, client, _batch("a"))
    if older:  # a state of before layout 3, as the worker found it at its start
        client.set(f"{prefix}layout", "2/16")
        store = RedisStateStore(client, prefix)
        _apply(store, client, _batch("b"))
    rebuilt = RedisStateStore(client, prefix, restoring=True)
    rebuilt.clear()
    _apply(rebuilt, client, _batch("a"))  # what the replay restores: marked anew, as layout 3
    with pytest.raises(StateLost, match=r"rebuilt.*restart"):
        _apply(store, client, _batch("c"))
    assert RedisStateStore(client, prefix).verdict_of("c") is None
    restarted = RedisStateStore(client, prefix)
    _apply(restarted, client, _batch("c"))
    assert restarted.exact_lookup(["u:a", "u:c"]) == {"u:a": "a", "u:c": "c"}
