"""A Redis that lost the state (restarted without its data, flushed, failed over to an empty replica) or
holds a half-finished replay is never decided on: the workers' writes are refused until it is rebuilt.

Written into, an emptied state would give redelivered documents second verdicts, make duplicates new
canonicals and restart the verdict counter, whose order `dedup replay` restores in.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from streams.config import RetentionSettings
from streams.core.model import Link
from streams.kafka.replay import Restorer
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
    restorer.begin()
    assert restorer.checkpoint() is None  # nothing restored yet: it starts from the beginning
    with pytest.raises(StateLost, match="replay"):
        _apply(worker, client, _batch("b"))
    restorer.done()
    _apply(worker, client, _batch("b"))
    assert worker.verdict_of("b") is not None
    client.close()
