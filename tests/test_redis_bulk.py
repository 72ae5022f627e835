"""A batch written in bulk (one script call per slot and round) leaves, key for key, the state of its writes
written one at a time, with the same answer for every write: on one server and on a Redis Cluster.

The batch mixes what a bulk call must keep in order: two claims of one key (the first holder wins), a key
claimed and then replaced, a group grown twice, a canonical registered again (with its fingerprint: under its
old seq; with another: anew), one removed and its document's verdict replaced, a verdict that stands already
(answered 0), verdicts with given seqs.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest
from redis.cluster import RedisCluster

from streams.core.model import Link, Stage, Verdict
from streams.stores.redis_lock import LeaseLost, RedisLock
from streams.stores.redis_store import RedisStateStore, connect
from streams.stores.writes import (
    CanonicalWrite,
    ClaimWrite,
    GrowWrite,
    RemoveCanonicalWrite,
    ReplaceVerdictWrite,
    ReplaceWrite,
    VerdictWrite,
    Write,
)

T = 1_700_000_000
DAY = 86_400


def _bands(n: int) -> tuple[int, ...]:
    return (n % 7, n % 11 + 100, n * 37 % 65_536, n * 101 % 65_536)


def _simhash(n: int) -> int:
    bands = _bands(n)
    return sum(value << (16 * i) for i, value in enumerate(bands))


def _setup() -> list[Write]:
    """What the state holds before the batch: canonicals c0..c9 (c3 to be registered again, c5 removed),
    and d0 decided already."""
    writes: list[Write] = []
    for n in range(10):
        doc = f"c{n}"
        writes += [
            ClaimWrite((f"u:{doc}", f"k:{doc}"), doc, T),
            CanonicalWrite(doc, _simhash(n), "en", _bands(n), T),
            VerdictWrite(replace(Link.unique(doc), published_at=T)),
        ]
    writes.append(VerdictWrite(Link("d0", Verdict.DUPLICATE, "c0", Stage.URL, published_at=T)))
    return writes


def _batch(removed: Link) -> list[Write]:
    writes: list[Write] = []
    for n in range(10, 60):  # new canonicals, their keys and verdicts
        doc = f"c{n}"
        published = T + n * 60
        writes += [
            ClaimWrite((f"u:{doc}", f"k:{doc}", "k:shared"), doc, published),  # k:shared: c10 holds it
            CanonicalWrite(doc, _simhash(n), "bn" if n % 2 else "en", _bands(n), published),
            VerdictWrite(replace(Link.unique(doc), published_at=published)),
        ]
    for n in range(60, 120):  # duplicates of c0..c9 (their groups grow several times) and of c10
        target = f"c{n % 11}" if n % 11 < 10 else "c10"
        doc = f"d{n}"
        writes += [
            ClaimWrite((f"k:{doc}",), target, T + n),
            GrowWrite(target, 1, T + n),
            VerdictWrite(Link(doc, Verdict.DUPLICATE, target, Stage.CONTENT, published_at=T + n)),
        ]
    writes += [
        ClaimWrite(("k:moving",), "c11", T),
        ReplaceWrite("k:moving", "c11", "c12", T + DAY),  # claimed, then re-pointed in the same batch
        ReplaceWrite("k:c1", "nobody", "c13", T),  # expects another holder: changes nothing
        ReplaceWrite("u:c2", "c2", "c14", None),  # keeps its stamp
        CanonicalWrite("c3", _simhash(3), "en", _bands(3), T),  # registered already: keeps its seq
        CanonicalWrite("c4", _simhash(40), "en", _bands(40), T + DAY),  # its id reused: registered anew
        VerdictWrite(Link("d0", Verdict.DUPLICATE, "c1", Stage.URL, published_at=T)),  # stands already: 0
        RemoveCanonicalWrite("c5", "en", _bands(5)),
        GrowWrite("c5", -1, 0),
        ReplaceVerdictWrite(Link("c5", Verdict.DUPLICATE, "c6", Stage.SIMHASH, 1.0, published_at=T), removed),
        GrowWrite("c6", 1, T),
        GrowWrite("c7", -1, 0),
        VerdictWrite(Link("g", Verdict.UNIQUE, "g", published_at=T, seq=5_000)),  # a given seq, drawn last
    ]
    return writes


def _dump(client: Any, prefix: str) -> dict[str, Any]:
    """Every key under `prefix` and its value (on a cluster, those of every master), the lease's aside."""
    found: dict[str, Any] = {}
    for key in client.scan_iter(match=f"{prefix}*", count=10_000):
        name = key[len(prefix) :]
        if name.startswith("lock:") and not name.startswith("lock:fence:"):
            continue
        found[name] = client.hgetall(key) if client.type(key) == "hash" else client.get(key)
    found["layout"] = found["layout"].partition(" ")[0]  # each state's token is its own
    return found


def _written(url: str, one_at_a_time: bool, forgotten: bool = False) -> tuple[list[Any], dict[str, Any], int]:
    """The batch's answers and the state it leaves; `forgotten`: the servers' script caches flushed first,
    as a restart or a promoted replica leaves them."""
    client = connect(url)
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    lock = RedisLock(client, f"{store._prefix}lock:register", ttl_s=30, fence=store.fence)
    with lock.held() as lease:
        store._write(_setup(), lease.epoch, T)
        removed = store.verdict_of("c5")
        assert removed is not None
        batch = _batch(removed)
        if forgotten:
            client.script_flush()
        if one_at_a_time:
            results = [store._write([write], lease.epoch, T)[0][0] for write in batch]
        else:
            results = store._write(batch, lease.epoch, T)[0]
    state = _dump(client, store._prefix)
    if isinstance(client, RedisCluster):
        assert len(client.get_primaries()) == 3
    client.close()
    return results, state, len(batch)


def test_a_batch_written_in_bulk_equals_its_writes_one_at_a_time(one_or_cluster_url: str) -> None:
    bulk, bulk_state, count = _written(one_or_cluster_url, one_at_a_time=False)
    single, single_state, _ = _written(one_or_cluster_url, one_at_a_time=True)
    assert bulk == single
    assert bulk_state == single_state
    assert len(bulk) == count
    # A sample of the answers, as each write gives them on its own.
    assert bulk[0] == ["c10", "c10", "c10"] and bulk[3] == ["c11", "c11", "c10"]
    assert [b for b in bulk if isinstance(b, list) and len(b) == 1][:2] == [["c5"], ["c6"]]
    assert bulk_state["seq"] == "61" and bulk_state["vseq"] == "5000"  # c0..c59, and c4 anew
    assert sum(len(h) for name, h in bulk_state.items() if name.startswith("g:")) == 11


def test_scripts_forgotten_by_the_server_are_loaded_again_and_run_once(one_or_cluster_url: str) -> None:
    """A restarted server (or a replica promoted) has no scripts: the calls that found none run after
    loading them, and only those (a plain command of the same round, the seq counters', ran already)."""
    bulk, bulk_state, _ = _written(one_or_cluster_url, one_at_a_time=False, forgotten=True)
    single, single_state, _ = _written(one_or_cluster_url, one_at_a_time=True)
    assert bulk == single
    assert bulk_state == single_state


def test_a_round_is_one_round_trip_without_asking_for_the_scripts(redis_url: str) -> None:
    """redis-py's pipeline asks the server whether its scripts exist (SCRIPT EXISTS, a round trip of its
    own) before every execution; the store loads them once and calls them by digest."""
    client = connect(redis_url)
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    lock = RedisLock(client, f"{store._prefix}lock:register", ttl_s=30, fence=store.fence)
    with lock.held() as lease:
        store._write(_setup(), lease.epoch, T)
        client.config_resetstat()
        store._write(_batch(store.verdict_of("c5")), lease.epoch, T)  # type: ignore[arg-type]
        store.verdicts_of([f"c{n}" for n in range(60)])
    stats = client.info("commandstats")
    client.close()
    assert "cmdstat_script|exists" not in stats and "cmdstat_script|load" not in stats
    assert stats["cmdstat_evalsha"]["calls"] >= 6


def test_a_batch_refused_by_a_newer_fence_is_a_lost_lease(one_or_cluster_url: str) -> None:
    """The scripts' FENCED refusal reaches the caller as `LeaseLost`, which `dedup replay` and `dedup relink`
    answer by deciding again (a pipeline's error used to come out as a plain ResponseError whose message
    redis-py had prefixed with the command, so the store never recognised it)."""
    client = connect(one_or_cluster_url)
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    lock = RedisLock(client, f"{store._prefix}lock:register", ttl_s=30, fence=store.fence)
    with lock.held() as lease:
        for tag in range(256):
            client.set(f"{store._prefix}lock:fence:{{{tag:02x}}}", lease.epoch + 1)
        with pytest.raises(LeaseLost):
            store.apply([VerdictWrite(Link.unique("v1"))], lease)
        with pytest.raises(LeaseLost):
            store._settle([("c1", "d1")], lease.epoch, T)
    assert store.verdict_of("v1") is None
    client.close()


def test_a_newer_lease_in_any_slot_of_a_bulk_call_refuses_the_whole_call(redis_url: str) -> None:
    """On one server a round is one call over keys of every slot group: a newer epoch in the fence of any
    of them refuses it all (a slot-by-slot fence would have let the other groups' writes land)."""
    client = connect(redis_url)
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    lock = RedisLock(client, f"{store._prefix}lock:register", ttl_s=30, fence=store.fence)
    with lock.held() as lease:
        writes: list[Write] = [VerdictWrite(Link.unique(f"v{n}")) for n in range(200)]
        tag = store._bucket("v", "v199").partition("{")[2][:2]
        client.set(f"{store._prefix}lock:fence:{{{tag}}}", lease.epoch + 1)
        with pytest.raises(Exception, match="FENCED"):
            store._write(writes, lease.epoch, T)
    assert store.verdicts_of([f"v{n}" for n in range(200)]) == {f"v{n}": None for n in range(200)}
    client.close()


def test_a_canonical_registered_again_with_another_fingerprint_is_registered_anew(redis_url: str) -> None:
    """An id reused for another text once its verdict expired: it is a new canonical (a new seq, first seen now),
    and its first text's entries are taken out. Redis wrote no entry over the live one: the first text's entries
    found the id for that text's near-duplicates, and the new text was found by nothing."""
    client = connect(redis_url)
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    store._write(_setup(), 0, T)
    (before,) = [c for c in store.band_candidates("en", _bands(4)) if c.doc_id == "c4"]
    store._write([CanonicalWrite("c4", _simhash(40), "en", _bands(40), T + DAY)], 0, T + DAY)
    assert [c.doc_id for c in store.band_candidates("en", _bands(4))] == []
    (after,) = [c for c in store.band_candidates("en", _bands(40)) if c.doc_id == "c4"]
    assert after.seq > before.seq and after.simhash == _simhash(40)
    assert client.hget(store._entries_key(before.seq // 256), str(before.seq)) is None
    old_entries = set(store._band_entries("en", _bands(4))) - set(store._band_entries("en", _bands(40)))
    assert old_entries
    for bucket, field_ in old_entries:
        assert str(before.seq) not in (client.hget(bucket, str(field_)) or "").split()
    client.close()
