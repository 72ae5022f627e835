"""The Redis state store on a real Redis Cluster: 3 masters and their replicas, local processes (tests/conftest.py).

Keys spread over every master, no script or pipeline crosses a slot (CROSSSLOT would raise), the store's
contract tests pass on the cluster as on one server, and a stream decided by the real worker survives a
master killed mid-stream: its replica takes over, every document gets one verdict, the invariants hold.
A state of another layout (written before this one) is refused in one line naming `dedup replay`.
"""

from __future__ import annotations

import contextlib
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from streams.config import RetentionSettings
from streams.core.model import Link, Stage, Verdict
from streams.core.ports import Reads
from streams.evaluation.services import local_redis
from streams.evaluation.stack import Stack, assert_invariants
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import LeaseLost, RedisLock
from streams.stores.redis_store import (
    _BULK,
    RedisStateStore,
    StateLost,
    _Cluster,
    _EvalByKeys,
    _marker,
    connect,
)
from streams.stores.writes import CanonicalWrite, ClaimWrite, GrowWrite, ReplaceVerdictWrite, VerdictWrite, Write
from tests.conftest import LocalRedisCluster, local_redis_cluster

# The store's contract, run here against the cluster: `redis_url` and `store` below replace conftest's.
from tests.test_state_stores import (  # noqa: F401
    test_a_batch_is_written_in_one_flush_and_the_first_verdict_stands,
    test_band_lookup_finds_canonicals_sharing_any_band_in_the_same_language,
    test_exact_claim_is_set_if_absent_and_replace_is_compare_and_set,
    test_redis_claims_are_atomic_across_clients,
    test_verdicts_and_groups,
)
from tests.test_streaming_faults import _copies


@pytest.fixture(scope="session")
def redis_url(redis_cluster: LocalRedisCluster) -> str:
    """The cluster's URL (`redis+cluster://`) where the imported contract tests ask for a Redis."""
    return redis_cluster.url


@pytest.fixture(params=["redis-cluster", "redis-cluster-batched"])
def store(request: pytest.FixtureRequest, redis_url: str) -> Iterator[RedisStateStore | BatchedState]:
    shared = RedisStateStore.from_url(redis_url, prefix=f"t{uuid.uuid4().hex}:")
    yield BatchedState(shared) if request.param == "redis-cluster-batched" else shared
    shared.close()


def _decide(store: RedisStateStore, count: int, tag: str) -> None:
    """`count` documents through batches flushed under the lease: canonicals, claims, links, group sizes."""
    lock = RedisLock(store._redis, f"{store._prefix}lock:register", ttl_s=5, fence=store.fence)
    for start in range(0, count, 100):
        batch = BatchedState(store)
        ids = [f"{tag}{i}" for i in range(start, min(count, start + 100))]
        with lock.held() as lease:
            batch.warm(Reads(doc_ids=ids, exact_keys=[f"u:{i}" for i in ids], band_queries=[]))
            for number, doc in enumerate(ids):
                if number % 4:
                    canonical = ids[number - number % 4]
                    batch.grow_group(canonical, 1_700_000_000)
                    batch.record_verdict(Link(doc, Verdict.DUPLICATE, canonical, Stage.URL, published_at=1_700_000_000))
                    continue
                value = random.Random(doc).getrandbits(64)
                bands = tuple((value >> (16 * i)) & 0xFFFF for i in range(4))
                batch.exact_claim([f"u:{doc}", f"c:{doc}"], doc, 1_700_000_000)
                batch.add_canonical(doc, value, "en", bands, 1_700_000_000)
                batch.record_verdict(replace(Link.unique(doc), published_at=1_700_000_000))
            batch.flush(lease)


def test_keys_spread_over_every_master_and_no_command_crosses_a_slot(redis_cluster: LocalRedisCluster) -> None:
    client = connect(redis_cluster.url)
    before = {port: redis.Redis(port=port).dbsize() for port in redis_cluster.masters()}
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    _decide(store, 2_000, "d")
    assert store.verdict_of("d5") == Link("d5", Verdict.DUPLICATE, "d4", Stage.URL, seq=6)
    assert store.group_size("d4") == 4
    grown = {port: redis.Redis(port=port).dbsize() - before[port] for port in before}
    assert len(grown) == 3
    assert min(grown.values()) > 0.2 * sum(grown.values()), grown  # every master holds a share
    store.close()


@pytest.mark.parametrize("prefix", ["{dedup}:", "x{y:", "dedup{:"])
def test_a_prefix_with_a_hash_tag_is_refused_on_a_cluster(redis_cluster: LocalRedisCluster, prefix: str) -> None:
    """A brace in the prefix makes Redis hash by it instead of the buckets' own tags: every key on one master
    ('{dedup}:', what deploy/ once suggested), or the families of one tag in other slots ('x{y:'), where
    a batch's scripts would cross slots."""
    with pytest.raises(ValueError, match=r"prefix .* '\{'.*Redis Cluster.*DEDUP_REDIS_PREFIX"):
        RedisStateStore(connect(redis_cluster.url), prefix)


def test_the_sweep_and_a_relink_run_on_the_cluster(redis_cluster: LocalRedisCluster) -> None:
    store = RedisStateStore(
        connect(redis_cluster.url),
        f"t{uuid.uuid4().hex}:",
        retention=RetentionSettings(bands_days=7, exact_days=7, verdicts_days=7),
    )
    _decide(store, 400, "r")
    assert store.remove_canonical("r0", "en", _bands("r0")) is None
    assert store.band_candidates("en", _bands("r0")) == []
    assert store.replace_verdict(Link("r1", Verdict.UNIQUE, "r1"), store.verdict_of("r1"))  # type: ignore[arg-type]
    assert store.shrink_group("r0") == 3
    store.advance(1_700_000_000 + 30 * 86_400)
    assert store.verdict_of("r4") is None  # past its retention: hidden at once
    removed = 0
    while step := store.expire(limit=500):
        removed += step
    assert removed >= 400 + 100  # verdicts, exact keys, group sizes and canonicals
    assert store.band_candidates("en", _bands("r4")) == []
    store.close()


def _bands(doc: str) -> tuple[int, ...]:
    value = random.Random(doc).getrandbits(64)
    return tuple((value >> (16 * i)) & 0xFFFF for i in range(4))


@pytest.mark.parametrize("server", ["cluster", "one"])
def test_a_state_of_another_layout_is_refused_in_one_line(redis_url: str, server: str, tmp_path: Path) -> None:
    if server == "one":
        with local_redis(tmp_path) as url:
            _refuses_another_layout(url)
    else:
        _refuses_another_layout(redis_url)


def _refuses_another_layout(redis_url: str) -> None:
    client = connect(redis_url)
    prefix = f"t{uuid.uuid4().hex}:"
    client.set(f"{prefix}seq", 41)  # this morning's layout: data, and no layout key (nor a fence)
    client.hset(f"{prefix}v:abc", "doc", "4e2f1 uu-;0;")
    # no fence either: what a restart under a batch also leaves (a lost state), rebuilt the same way
    with pytest.raises(StateLost, match=r"older version .*`dedup replay --fresh`") as refused:
        RedisStateStore(client, prefix).verdict_of("doc")
    assert "\n" not in str(refused.value)
    fresh = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    fresh.record_verdict(Link.unique("a"))
    assert RedisStateStore(client, fresh._prefix).verdict_of("a") == replace(Link.unique("a"), seq=1)
    client.close()


def test_a_stream_survives_a_master_killed_mid_stream(
    kafka_bootstrap: str, tmp_path: Path, ntrex: list[object]
) -> None:
    """The real worker against a cluster of its own; one master SIGKILLed while documents flow."""
    records = _copies(30, random.Random(5))
    ids = {r["id"] for r in records}
    with local_redis_cluster(tmp_path / "cluster") as cluster:
        folder = tmp_path / "stack"
        folder.mkdir()
        stack = Stack(kafka_bootstrap, cluster.url, folder, partitions=2)
        stack.create_topics()
        stack.start_worker()
        stack.start_worker()
        links = stack.settings().topics.links
        try:
            stack.wait_assigned(stack.settings().topics.raw)  # both in the group, each holding partitions
            half = len(records) // 2
            stack.produce(orjson.dumps(r) for r in records[:half])
            stack.read(links, until=half // 3, timeout=180)
            victim = cluster.masters()[0]
            cluster.kill(victim)
            stack.produce(orjson.dumps(r) for r in records[half:])
            deadline = time.monotonic() + 30
            while victim in cluster.masters() or len(cluster.masters()) < 3:
                assert time.monotonic() < deadline, "no replica took over"
                time.sleep(0.2)
            latest, _ = stack.final_links(ids, timeout=300)
            unfed = stack.unfed(latest)
        finally:
            stack.stop()
    assert latest.keys() == ids
    assert_invariants(latest)
    assert unfed == set()


def test_a_paused_holder_writes_nothing_in_a_slot_a_newer_lease_was_published_to(redis_url: str) -> None:
    """The attacker: a holder that passed the lease check and then slept past its lease. The next holder
    published its epoch to every slot on taking the lock, so each of the old holder's scripts is refused."""
    store = RedisStateStore(connect(redis_url), f"t{uuid.uuid4().hex}:")
    key = f"{store._prefix}lock:register"
    old = RedisLock(store._redis, key, ttl_s=0.2, renew=False, fence=store.fence).acquire()
    time.sleep(0.3)  # paused past its lease
    # the next holder's lease outlasts what it writes here, also on a loaded machine (0.2 s did not)
    new = RedisLock(store._redis, key, ttl_s=30, renew=False, fence=store.fence).acquire()
    assert new.epoch > old.epoch
    claim = ClaimWrite(("u:late",), "late", 1_700_000_000)
    with pytest.raises(redis.ResponseError, match="FENCED"):
        store._write([claim, VerdictWrite(Link.unique("late"))], old.epoch, 1_700_000_000)
    assert store.exact_lookup(["u:late"]) == {} and store.verdict_of("late") is None
    with pytest.raises(LeaseLost):
        store.apply([claim, VerdictWrite(Link.unique("late"))], old)
    assert store.apply([claim, VerdictWrite(Link.unique("late"))], new).seqs.keys() == {"late"}
    assert store.exact_lookup(["u:late"]) == {"u:late": "late"}
    store.close()


T = 1_700_000_000


def _batch() -> list[Write]:
    """Two canonicals with their keys and band entries, and a duplicate that grows the first's group."""
    a, c = 0x0004_0003_0002_0001, 0x0008_0007_0006_0005
    return [
        ClaimWrite(("u:a", "c:a"), "a", T),
        CanonicalWrite("a", a, "en", (1, 2, 3, 4), T),
        VerdictWrite(replace(Link.unique("a"), published_at=T)),
        GrowWrite("a", 1, T),
        VerdictWrite(Link("b", Verdict.DUPLICATE, "a", Stage.URL, published_at=T)),
        ClaimWrite(("u:c",), "c", T),
        CanonicalWrite("c", c, "en", (5, 6, 7, 8), T),
        VerdictWrite(replace(Link.unique("c"), published_at=T)),
    ]


def _seen(store: RedisStateStore) -> tuple[object, ...]:
    """What the batch leaves, seqs aside (a batch applied again draws new ones)."""
    verdicts = {d: (v.verdict, v.canonical_id) if v else None for d, v in store.verdicts_of(["a", "b", "c"]).items()}
    bands = [[c.doc_id for c in store.band_candidates("en", q)] for q in [(1, 0, 0, 0), (0, 0, 0, 8)]]
    return verdicts, store.exact_lookup(["u:a", "c:a", "u:c"]), bands, store.group_sizes(["a", "c"])


def _crash_after(store: RedisStateStore, rounds: int) -> Callable[[list[Any]], None]:
    """Make `store`'s writes die after `rounds` write rounds landed; returns the real round runner."""
    landed = store._sink
    left = rounds

    def crash(sinks: list[Any]) -> None:
        nonlocal left
        if left == 0:
            raise redis.ConnectionError("the worker died here")
        left -= 1
        landed(sinks)

    store._sink = crash  # type: ignore[method-assign]
    return landed


@pytest.mark.parametrize("rounds", [0, 1, 2, 3])
def test_a_batch_stopped_between_slots_is_completed_by_its_redelivery(redis_url: str, rounds: int) -> None:
    """A crash after `rounds` write rounds landed (exact keys and c: entries; then s: and band entries; then
    the verdicts, before the group sizes), and the batch applied again: the state is the one a batch applied
    once leaves, group sizes included (a group one member short lets a relink link its canonical back)."""
    client = connect(redis_url)
    clean = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    with RedisLock(client, f"{clean._prefix}lock", ttl_s=5, fence=clean.fence).held() as lease:
        clean.apply(_batch(), lease)
    crashed = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    landed = _crash_after(crashed, rounds)
    with RedisLock(client, f"{crashed._prefix}lock", ttl_s=5, fence=crashed.fence).held() as lease:
        with pytest.raises(redis.ConnectionError):
            crashed.apply(_batch(), lease)
        if rounds < 3:
            assert crashed.verdicts_of(["a", "b", "c"]) == {"a": None, "b": None, "c": None}
        crashed._sink = landed  # type: ignore[method-assign]
        crashed.apply(_batch(), lease)  # the redelivery
    assert _seen(crashed) == _seen(clean)
    assert _seen(clean)[3] == {"a": 2, "c": 1}
    assert not _markers(client, crashed._prefix)
    # After its verdicts, the duplicate's link is left pending: a redelivery reads it with the verdicts
    # and takes it out (the next test); the same writes applied again leave it.
    assert _pending(client, crashed._prefix) == (["b"] if rounds == 3 else [])
    client.close()


def _pending(client: Any, prefix: str) -> list[str]:
    """The documents whose link is pending (a batch stopped between its rounds)."""
    return [field for key in client.scan_iter(f"{prefix}p:*") for field in client.hkeys(key)]


def _markers(client: Any, prefix: str) -> list[str]:
    groups = list(client.scan_iter(f"{prefix}g:*"))
    assert groups
    return [field for key in groups for field in client.hkeys(key) if field.startswith("\x00")]


def test_a_redelivery_that_finds_its_verdicts_standing_takes_out_the_markers_a_crash_left(redis_url: str) -> None:
    """Stopped after its verdicts, before its group sizes: the growths are counted and their markers left,
    and the duplicate's pending link. The batch read again (a worker's redelivery, a resumed replay) finds
    every verdict standing and writes nothing, and the markers and the pending link go, so the state is the
    one a batch applied once leaves, key for key."""
    client = connect(redis_url)
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    landed = _crash_after(store, 3)
    with RedisLock(client, f"{store._prefix}lock", ttl_s=5, fence=store.fence).held() as lease:
        with pytest.raises(redis.ConnectionError):
            store.apply(_batch(), lease)
        store._sink = landed  # type: ignore[method-assign]
        assert _markers(client, store._prefix)
        assert _pending(client, store._prefix) == ["b"]
        batched = BatchedState(store)
        batched.warm(Reads(doc_ids=["a", "b", "c"], exact_keys=[], band_queries=[]))
        assert batched.flush(lease) == {}  # nothing decided: every document stood already
    assert not _markers(client, store._prefix)
    assert not _pending(client, store._prefix)
    assert store.group_sizes(["a", "c"]) == {"a": 2, "c": 1}  # a and b; c alone
    client.close()


def test_a_lease_drawn_from_an_epoch_counter_that_went_back_still_writes(redis_url: str) -> None:
    """The counter's key deleted (an operator clearing `lock:*`), or its INCR lost in a failover: the fences
    hold a newer epoch than the next lease draws. Taking the lock moves the counter past them."""
    store = RedisStateStore(connect(redis_url), f"t{uuid.uuid4().hex}:")
    lock = RedisLock(store._redis, f"{store._prefix}lock:register", ttl_s=5, fence=store.fence)
    with lock.held() as first:
        store.apply([VerdictWrite(Link.unique("a"))], first)
    store._redis.delete(f"{store._prefix}lock:register:epoch")
    with lock.held() as later:
        assert later.epoch > first.epoch
        assert store.apply([VerdictWrite(Link.unique("b"))], later).seqs.keys() == {"b"}
    store.close()


def _item(code: str, first: str) -> bytes:
    """A pattern of a write script's item as its arguments carry it: its code, its bucket's position, its first
    argument."""
    return rb"\r\n\$1\r\n%b\r\n\$\d+\r\n\d+\r\n\$%d\r\n%b\r\n" % (
        code.encode(),
        len(first.encode()),
        re.escape(first.encode()),
    )


def _command(name: str, key: str) -> bytes:
    """A pattern of a command on `key`."""
    return rb"\$%d\r\n%b\r\n\$%d\r\n%b\r\n" % (len(name), name.encode(), len(key.encode()), re.escape(key.encode()))


def _parsed(buffer: bytearray) -> list[bytes] | None:
    """The first whole command (a RESP array of bulk strings) in `buffer`, taken out of it; None: none yet."""
    pos = buffer.find(b"\r\n")
    if pos < 0:
        return None
    count, pos = int(buffer[1:pos]), pos + 2
    parts = []
    for _ in range(count):
        end = buffer.find(b"\r\n", pos)
        if end < 0:
            return None
        start = end + 2
        stop = start + int(buffer[pos + 1 : end])
        if len(buffer) < stop + 2:
            return None
        parts.append(bytes(buffer[start:stop]))
        pos = stop + 2
    del buffer[:pos]
    return parts


def _spelled(command: list[bytes]) -> bytes:
    """`command` as it travels (RESP), for `_item` and `_command` to match."""
    return b"*%d\r\n" % len(command) + b"".join(b"$%d\r\n%b\r\n" % (len(part), part) for part in command)


_WRITE_SCRIPT = _BULK.split("\n")[1].encode()
"""The first line of the store's write script (`_BULK`), which a cluster client's EVAL carries."""


class _LostReplies:
    """A TCP proxy before each node of a cluster (redis-py's `address_remap` sends the client through it) that
    loses the reply to one write request: the first matching one of `patterns` (`_item`, `_command`), or the
    `nth` carrying the store's write script. The node runs it, and the client's connection is closed before
    the answer reaches it, as when a network path or a master's process fails right after a write. redis-py's
    cluster client then sends its pipeline again."""

    def __init__(self, ports: Sequence[int], *patterns: bytes, nth: int = 0) -> None:
        self._pattern = re.compile(b"|".join(patterns)) if patterns else None
        self._nth = nth
        self.writes = 0
        """Commands counted so far (`_counts`: those carrying the write script; a round sends one a slot)."""
        self.dropped = 0
        self._lock = threading.Lock()
        self._listeners: dict[int, socket.socket] = {}
        for port in ports:
            listener = socket.create_server(("127.0.0.1", 0))
            self._listeners[port] = listener
            threading.Thread(target=self._accept, args=(listener, port), daemon=True).start()

    def _counts(self, command: list[bytes]) -> bool:
        """Whether `command` is one `nth` counts."""
        return command[0].upper() == b"EVAL" and _WRITE_SCRIPT in command[1]

    def _loses(self, command: list[bytes]) -> bool:
        """Whether the reply to `command` (and to what follows on its connection) is the one to lose."""
        with self._lock:
            counted = self._counts(command)
            self.writes += counted
            if self._nth:
                hit = counted and self.writes == self._nth
            else:
                hit = bool(self._pattern and self._pattern.search(_spelled(command)))
            if hit and not self.dropped:
                self.dropped = 1
                return True
            return False

    def remap(self, address: tuple[str, int]) -> tuple[str, int]:
        host, port = address
        return (host, self._listeners[port].getsockname()[1]) if port in self._listeners else address

    def _accept(self, listener: socket.socket, port: int) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", port))
            lose = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, lose), daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, lose), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, lose: threading.Event) -> None:
        buffer = bytearray()  # a pipeline's commands reach the proxy in one read or in several
        with contextlib.suppress(OSError):
            while data := client.recv(1 << 16):
                buffer += data
                while (command := _parsed(buffer)) is not None:
                    if self._loses(command):
                        lose.set()
                server.sendall(data)

    def _replies(self, server: socket.socket, client: socket.socket, lose: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(1 << 16):
                if lose.is_set():  # the node ran it; its answer never arrives
                    break
                client.sendall(data)
        for end in (client, server):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        for listener in self._listeners.values():
            listener.close()


def test_a_round_the_cluster_client_sends_again_keeps_its_verdicts_and_group_sizes(
    redis_cluster: LocalRedisCluster,
) -> None:
    """The reply to the verdict round is lost after a master ran it: redis-py's cluster client sends the
    round again, and the masters run it twice. The second run finds the verdicts the first wrote. They are
    this batch's own: none is lost to "another writer", no growth is undone, and the group counts its member
    (a group one short lets a relink link its canonical back: a chain)."""
    proxy = _LostReplies(redis_cluster.ports, _item("v", "b"))
    client = _through(proxy, redis_cluster)
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    with RedisLock(client, f"{store._prefix}lock", ttl_s=30, fence=store.fence).held() as lease:
        applied = store.apply(_batch(), lease)
    assert proxy.dropped == 1
    assert applied.lost == []
    assert set(applied.seqs) == {"a", "b", "c"}
    verdicts = store.verdicts_of(["a", "b", "c"])
    assert {d: (v.verdict, v.canonical_id) for d, v in verdicts.items() if v} == {
        "a": (Verdict.UNIQUE, "a"),
        "b": (Verdict.DUPLICATE, "a"),
        "c": (Verdict.UNIQUE, "c"),
    }
    assert store.group_sizes(["a", "c"]) == {"a": 2, "c": 1}
    client.close()
    proxy.close()


def _through(proxy: _LostReplies, cluster: LocalRedisCluster) -> _Cluster:
    """A cluster client as `connect` makes one, reaching every node through `proxy`."""
    port = cluster.ports[0]
    return _Cluster("127.0.0.1", port, decode_responses=True, policy_resolver=_EvalByKeys(), address_remap=proxy.remap)


def _batch_with_d() -> list[Write]:
    """`_batch` with a second duplicate of a, d: a's group is a, b and d."""
    batch = _batch()
    batch[5:5] = [GrowWrite("a", 1, T), VerdictWrite(Link("d", Verdict.DUPLICATE, "a", Stage.URL, published_at=T))]
    return batch


def test_a_shrink_the_cluster_client_sends_again_counts_once(redis_cluster: LocalRedisCluster) -> None:
    """A relink takes b out of a's group (a, b, d) and the reply to the round that shrinks the group is lost:
    sent again, the shrink must not count twice. a would be left with no member while d still links to it,
    and a relink could then link a into another group: d's link would lead to a duplicate (a chain)."""
    prefix = f"t{uuid.uuid4().hex}:"
    setup = connect(redis_cluster.url)
    first = RedisStateStore(setup, prefix)
    with RedisLock(setup, f"{prefix}lock", ttl_s=30, fence=first.fence).held() as lease:
        first.apply(_batch_with_d(), lease)
    assert first.group_sizes(["a"]) == {"a": 3}
    was = first.verdicts_of(["b"])["b"]
    assert was is not None
    setup.close()
    proxy = _LostReplies(redis_cluster.ports, _item("n", "a"), _item("m", _marker("a", "b", leaving=True)))
    client = _through(proxy, redis_cluster)
    store = RedisStateStore(client, prefix)
    relink = [GrowWrite("a", -1, 0), ReplaceVerdictWrite(replace(Link.unique("b"), published_at=T), was)]
    with RedisLock(client, f"{prefix}lock", ttl_s=30, fence=store.fence).held() as lease:
        applied = store.apply(relink, lease, exact=True)
    assert proxy.dropped == 1
    assert set(applied.seqs) == {"b"}
    assert store.group_sizes(["a", "b"]) == {"a": 2, "b": 1}  # a and d; b alone
    client.close()
    proxy.close()


def _move_b_to_c(store: RedisStateStore) -> list[Write]:
    """A relink's writes: b, a's duplicate, becomes c's (a's group shrinks, c's grows)."""
    was = store.verdicts_of(["b"])["b"]
    assert was is not None
    moved = Link("b", Verdict.DUPLICATE, "c", Stage.URL, published_at=T)
    return [GrowWrite("a", -1, 0), GrowWrite("c", 1, T), ReplaceVerdictWrite(moved, was)]


@pytest.mark.parametrize("relink", [False, True], ids=["batch", "relink"])
def test_any_write_request_whose_reply_is_lost_leaves_the_state_applying_once_leaves(
    redis_cluster: LocalRedisCluster, relink: bool
) -> None:
    """Each write request of a batch (or of a relink after it) in turn, every round and every slot, has its
    reply lost once and is sent again by the cluster client: the state is the one applying it once leaves,
    group sizes included, with no marker or pending link left behind and no verdict taken for another
    writer's."""

    def applied(client: Any, proxy: _LostReplies | None) -> tuple[RedisStateStore, list[str]]:
        setup = RedisStateStore(connect(redis_cluster.url), f"t{uuid.uuid4().hex}:")
        store = RedisStateStore(client, setup._prefix)
        first = setup if relink else store
        with RedisLock(first._redis, f"{first._prefix}lock", ttl_s=30, fence=first.fence).held() as lease:
            lost = first.apply(_batch_with_d() if relink else _batch(), lease).lost
        if relink:
            if proxy is not None:
                proxy.writes = 0  # count the relink's requests only
            with RedisLock(client, f"{store._prefix}lock", ttl_s=30, fence=store.fence).held() as lease:
                lost = store.apply(_move_b_to_c(store), lease, exact=True).lost
        setup.close()
        return store, lost

    clean, _ = applied(connect(redis_cluster.url), None)
    counting = _LostReplies(redis_cluster.ports, nth=10_000)
    store, _ = applied(_through(counting, redis_cluster), counting)
    requests = counting.writes
    assert requests >= (3 if relink else 5)  # every round, and a round in more than one slot
    store.close()
    counting.close()
    for nth in range(1, requests + 1):
        proxy = _LostReplies(redis_cluster.ports, nth=nth)
        store, lost = applied(_through(proxy, redis_cluster), proxy)
        assert proxy.dropped == 1, nth
        assert lost == [], nth
        assert _seen(store) == _seen(clean), nth
        assert not _markers(store._redis, store._prefix), nth
        assert not _pending(store._redis, store._prefix), nth
        store.close()
        proxy.close()
    clean.close()


def test_a_lock_whose_reply_was_lost_is_taken_at_once(redis_cluster: LocalRedisCluster) -> None:
    """The reply to the SET NX that took the lock is lost, and the cluster client sends it again: the second
    finds the key set, with this taker's token. The lock is its own, not another worker's to wait out for
    the whole lease (the stream stood still that long)."""
    proxy = _LostReplies(redis_cluster.ports, _command("SET", "lost-reply-lock"))
    client = _through(proxy, redis_cluster)
    lock = RedisLock(client, "lost-reply-lock", ttl_s=60, renew=False)
    lease = lock.acquire(wait_s=5)
    assert proxy.dropped == 1
    assert client.get("lost-reply-lock") == lease.token
    assert lock.release(lease)
    client.close()
    proxy.close()


@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_a_relink_stopped_before_its_group_sizes_leaves_no_group_short(redis_url: str, rounds: int) -> None:
    """A relink moving b from a's group (a, b, d) to c's dies after `rounds` write rounds, before its group
    sizes: a's group is never left short of a member b may still link to (b's verdict is written in the
    third round, so before it b still links to a); too many, at worst, refuses a relink, never makes a chain."""
    client = connect(redis_url)
    store = RedisStateStore(client, f"t{uuid.uuid4().hex}:")
    with RedisLock(client, f"{store._prefix}lock", ttl_s=30, fence=store.fence).held() as lease:
        store.apply(_batch_with_d(), lease)
        relink = _move_b_to_c(store)
        landed = _crash_after(store, rounds)
        with pytest.raises(redis.ConnectionError):
            store.apply(relink, lease, exact=True)
        store._sink = landed  # type: ignore[method-assign]
    assert store.group_sizes(["a"]) == {"a": 3}
    client.close()
