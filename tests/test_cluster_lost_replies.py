"""Every writer of the state on a Redis Cluster takes a write whose reply was lost and which was sent again.

redis-py's cluster client sends a whole pipeline (or a command) again when its reply is lost after the node
ran it (a dropped connection, a timeout, a failover): every write may run twice. Each write command of a
sweep pass, of a replay's batches and checkpoints, and of the lease's own life has its reply lost in turn
through the TCP proxy of `tests.test_redis_cluster`; what is left must be what a run without a lost reply
leaves.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from streams.config import RetentionSettings
from streams.core.model import DAY_S, Link, Stage, Verdict
from streams.core.ports import Reads
from streams.core.replay import Recorded
from streams.kafka.replay import Restorer
from streams.records.article import format_timestamp
from streams.records.output import read_link_record
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import ENTRIES, RedisStateStore, connect
from streams.stores.writes import VerdictWrite
from tests.conftest import LocalRedisCluster
from tests.test_redis_cluster import _LostReplies, _through

T = 1_700_000_000
"""The day the old entries are written (2023-11-14); the new ones 30 days later."""
LATER = T + 30 * DAY_S
RETENTION = RetentionSettings(verdicts_days=7, exact_days=10, bands_days=7)
BITS = 4
"""16 buckets a family: a sweep pass is a few dozen requests."""

_WRITING = {*b"SET HSET HSETNX HINCRBY HDEL DEL UNLINK INCR INCRBY PEXPIRE EVALSHA".split()}
"""Commands that write; EVALSHA: the lock's and the replay's scripts, every one of which writes."""
_WRITES_IN_SCRIPT = re.compile(rb"redis\.call\('(?:SET|HSET|HSETNX|DEL|HDEL|HINCRBY|INCRBY|PEXPIRE)'")
"""A script that writes (the store's EVAL carries its body)."""


class _LosesWrites(_LostReplies):
    """`_LostReplies` counting every command that writes (not only the store's write script): the reply of the
    `nth` one is lost, and of every command after it on that connection, which is closed."""

    def __init__(self, ports: Sequence[int], nth: int) -> None:
        super().__init__(ports, nth=nth)
        self.names: list[bytes] = []
        """What each write command was (a script by its first line): runs of alike ones are sampled."""

    def _counts(self, command: list[bytes]) -> bool:
        name = command[0].upper()
        if name not in _WRITING and not (name == b"EVAL" and _WRITES_IN_SCRIPT.search(command[1])):
            return False
        self.names.append(command[1].strip().split(b"\n")[0] if name == b"EVAL" else name)
        return True


def _state(client: Any, prefix: str) -> dict[str, Any]:
    """Every key of the state with its content, canonical seqs as the documents they name (a seq drawn twice,
    its INCRBY sent again, leaves a gap: no other state), the lease's keys and the layout marker's token
    aside."""
    raw: dict[str, Any] = {}
    for key in client.scan_iter(f"{prefix}*"):
        name = key[len(prefix) :]
        if name == "layout" or name.startswith("lock:register") or name == "seq":
            continue
        kind = client.type(key)
        raw[name] = client.hgetall(key) if kind == "hash" else client.get(key)
    entries = [item for name, fields in raw.items() if name.startswith("s:") for item in fields.items()]
    docs = {seq: ENTRIES.read(entry)[2] for seq, entry in entries}
    top = int(client.get(f"{prefix}seq") or 0)
    assert all(int(seq) <= top for seq in docs), (top, docs)  # the counter is past every seq given
    state: dict[str, Any] = {}
    for name, value in raw.items():
        if name.startswith("s:"):
            state.setdefault("s", {}).update({docs[seq]: entry[:20] for seq, entry in value.items()})
        elif name.startswith("b:"):
            state[name] = {f: [docs.get(seq, f"?{seq}") for seq in seqs.split()] for f, seqs in value.items()}
        elif name.startswith("c:"):
            state[name] = {doc: docs.get(seq) == doc for doc, seq in value.items()}
        else:
            state[name] = value
    return state


def _values(client: Any, keys: Sequence[str]) -> list[Any]:
    """The values of `keys`, in one pipeline (a cluster's sends each node its share)."""
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.get(key)
        return list(pipe.execute())


class _Records(logging.Handler):
    """The records logged, kept."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _lease_log() -> Iterator[_Records]:
    """What the leases log meanwhile (`redis_lock`: lost before a renewal, expired while held, not released)."""
    records = _Records()
    logger = logging.getLogger("streams.stores.redis_lock")
    logger.addHandler(records)
    try:
        yield records
    finally:
        logger.removeHandler(records)


@dataclass
class _Target:
    """Where the state is: the nodes a proxy stands before, a client straight to them, one through a proxy."""

    ports: Sequence[int]
    url: str
    through: Callable[[_LosesWrites], Any]

    def direct(self) -> Any:
        return connect(self.url)


@pytest.fixture
def target(redis_cluster: LocalRedisCluster) -> _Target:
    """The Redis Cluster. (The store's client of one server, from `connect`, tries a command once: a lost reply
    is a ConnectionError there, and the batch is applied again as after a crash.)"""
    return _Target(redis_cluster.ports, redis_cluster.url, lambda proxy: _through(proxy, redis_cluster))


def _lease_lock(client: Any, store: RedisStateStore) -> RedisLock:
    return RedisLock(client, f"{store._prefix}lock:register", ttl_s=30, fence=store.fence)


# --- the sweep ------------------------------------------------------------------------------------------


def _populate(store: RedisStateStore) -> None:
    """Canonicals with their claims and band entries, duplicates growing their groups, one relinked out of
    its group; half of them from `T` (past every retention at `LATER`), half from `LATER`."""
    lock = _lease_lock(store._redis, store)
    for tag, when in (("o", T), ("n", LATER)):
        batch = BatchedState(store)
        batch._swept_day = 1 << 30  # no sweep after the flush (time-bounded: a state that differs run to run)
        ids = [f"{tag}{i}" for i in range(12)]
        with lock.held() as lease:
            batch.warm(Reads(doc_ids=ids, exact_keys=[f"u:{i}" for i in ids], band_queries=[]))
            for number, doc in enumerate(ids):
                if number % 3:
                    canonical = ids[number - number % 3]
                    batch.exact_claim([f"u:{doc}"], canonical, when)
                    batch.grow_group(canonical, when)
                    batch.record_verdict(Link(doc, Verdict.DUPLICATE, canonical, Stage.URL, published_at=when))
                    continue
                value = (0x9E37_79B9_7F4A_7C15 * (number + 1 + (when & 0xFF))) & (1 << 64) - 1
                bands = tuple((value >> (16 * i)) & 0xFFFF for i in range(4))
                batch.exact_claim([f"u:{doc}", f"c:{doc}"], doc, when)
                batch.add_canonical(doc, value, "en" if number % 2 else "de", bands, when)
                batch.record_verdict(replace(Link.unique(doc), published_at=when))
            batch.flush(lease)


def _swept(client: Any, prefix: str, limit: int, lease_client: Any) -> tuple[RedisStateStore, int]:
    """A pass of the sweep through `client` (each call removes up to `limit`), under a lease taken through
    `lease_client`; the store and how many it said it removed."""
    store = RedisStateStore(client, prefix, BITS, RETENTION)
    owner = RedisStateStore(lease_client, prefix, BITS, RETENTION)
    removed = 0
    with _lease_lock(lease_client, owner).held() as lease:
        for _ in range(1000):
            swept = store.sweep(limit, lease)
            removed += swept.removed
            if swept.done:
                break
        else:
            raise AssertionError("the pass never completed")
    return store, removed


def _made(target: _Target) -> tuple[Any, str]:
    client = target.direct()
    prefix = f"t{uuid.uuid4().hex}:"
    _populate(RedisStateStore(client, prefix, BITS, RETENTION))
    return client, prefix


def _each_lost(target: _Target, run: Callable[[_LosesWrites], Any], clean: Any, most: int = 0) -> int:
    """`run` through a proxy that loses the reply of its first write command, then of its second, and so on:
    each run leaves `clean`. Of a run of more than 8 alike (a lease's publication: 256 calls, one a slot
    group) only the first 3 and the last 2; with `most`, that many at most, spread evenly over them (the last
    included), so that a long run costs the suite a bounded time. Returns how many runs had a reply lost."""
    counting = _LosesWrites(target.ports, nth=1 << 30)
    try:
        assert run(counting) == clean
    finally:
        counting.close()
    every = list(range(1, counting.writes + 1))
    alike = [list(g) for _, g in itertools.groupby(every, key=lambda nth: counting.names[nth - 1])]
    chosen = [nth for g in alike for nth in (g if len(g) <= 8 else [*g[:3], *g[-2:]])]
    if most and len(chosen) > most:
        step = len(chosen) / most
        chosen = sorted({chosen[int(i * step)] for i in range(most - 1)} | {chosen[-1]})
    for nth in chosen:
        proxy = _LosesWrites(target.ports, nth=nth)
        try:
            assert run(proxy) == clean, (nth, counting.names[nth - 1])
            assert proxy.dropped == 1, nth
        finally:
            proxy.close()
    return len(chosen)


def test_each_write_of_a_sweep_pass_whose_reply_is_lost_leaves_what_the_pass_leaves(
    target: _Target,
) -> None:
    """Each write request of a pass (a bucket run's `_EXPIRE_FIELDS`, a canonical's removal rounds: its c:
    entry 'u', band entries 'B', its s: entry, the cursor's moves, the families' oldest stamps) has its
    reply lost once and is sent again: the pass completes, and the state is the one a pass without a lost
    reply leaves: nothing expired left, no canonical half removed, the cursor at the pass's end. Each call
    removes 3 at most: the pass stops inside buckets and inside the canonicals' s: bucket."""
    client, prefix = _made(target)
    before = _state(client, prefix)
    _, removed = _swept(client, prefix, 3, client)
    clean = _state(client, prefix)
    assert clean != before and removed > 0
    assert sorted(clean["s"]) == [f"n{i}" for i in (0, 3, 6, 9)]  # the old canonicals went, the new stay
    client.close()

    def run(proxy: _LosesWrites) -> dict[str, Any]:
        client, prefix = _made(target)
        store, _ = _swept(target.through(proxy), prefix, 3, client)
        store.close()
        state = _state(client, prefix)
        client.close()
        return state

    assert _each_lost(target, run, clean, most=20) == 20


# --- the replay -----------------------------------------------------------------------------------------


def _record(
    doc_id: str,
    seq: int,
    canonical: str | None = None,
    language: str = "en",
    keys: list[str] | None = None,
    model: str | None = None,
) -> Recorded:
    """A `dedup.links` record as the replay reads it: a unique canonical, or a near-duplicate of `canonical`
    (by meaning when it names the embedding `model`); `keys`: a relink's record (the exact keys it points at
    the document's holder)."""
    record: dict[str, Any] = {
        "doc_id": doc_id,
        "verdict": "duplicate" if canonical else "unique",
        "canonical_id": canonical or doc_id,
        "stage": ("semantic" if model else "simhash") if canonical else None,
        "score": 0.9 if canonical else None,
        "linked_at": "2026-11-01T00:00:00.000Z",
        "model": model,
        "url_hash": uuid.uuid5(uuid.NAMESPACE_URL, f"u{doc_id}").hex * 2,
        "content_hash": uuid.uuid5(uuid.NAMESPACE_URL, f"c{doc_id}").hex * 2,
        "simhash": f"{uuid.uuid5(uuid.NAMESPACE_URL, doc_id).int & 0xFFFF_FFFF_FFFF_FFFF:016x}",
        "language": language,
        "published_at": format_timestamp(LATER),
        "seq": seq,
    }
    if keys is not None:
        record["keys"] = keys
    return read_link_record(record)


FIRST = [
    [_record("a", 1), _record("b", 2, "a"), _record("c", 3)],
    [_record("d", 4, "a"), _record("e", 5, "c", model="BAAI/bge-m3@5617a9f")],
    [_record("f", 6, language="de"), _record("g", 7, "f", "de")],
]
"""A replay into an empty state: canonicals in two languages, groups of three and two, a link naming an
embedding model (registered on first use: `_REGISTER_MODEL`)."""
RELINKED = [
    [_record("b", 8, "c", keys=["url"]), _record("d", 9, keys=[])],
    [_record("g", 10, "d", "de", keys=[]), _record("h", 11)],
    [_record("f", 12, "h", "de", keys=["url"]), _record("i", 13, "h")],
]
"""Then the later records of a relink over it: b moves from a's group to c's (its URL key re-pointed), d
leaves a's group for a canonical of its own, g moves to d, f stops being a canonical (its band entries, s: and
c: entries removed) and joins h's group."""


def _replayed(client: Any, prefix: str, batches: Sequence[Sequence[Recorded]], fresh: bool = False) -> list[Any]:
    """`dedup replay`'s writes as `replay_links` makes them, through `client`, a restore per batch (after
    deleting the state, `fresh`): what each restore answered and the checkpoint it left, then the checkpoint
    once the replay is done, and what the leases logged."""
    restorer = Restorer(client, prefix, None, RETENTION, lock_ttl_s=30, bucket_bits=BITS)
    seen: list[Any] = []
    with _lease_log() as logged, restorer.owned():
        if fresh:
            restorer.clear()
        restorer.resume()
        restorer.begin()
        for batch in batches:
            last = batch[-1].link.seq
            assert last is not None
            seen.append(restorer.restore(list(batch), (1, last, "2026-11-01T00:00:00.000Z", 0, last)))
            seen.append(client.get(f"{prefix}replay"))
        restorer.done(max(r.link.seq or 0 for batch in batches for r in batch))
    seen.append(client.get(f"{prefix}replay"))
    seen.append([record.getMessage() for record in logged.records])  # a lease said lost or not released
    return seen


def _restored(client: Any, prefix: str) -> dict[str, Any]:
    """`_state` with the fence keys' epochs aside (a lease's INCR or its publication sent again draws a later
    epoch, no other state), and the group sizes and verdicts as the store reads them."""
    state = {
        name: "fenced" if name.startswith("lock:fence:") else value for name, value in _state(client, prefix).items()
    }
    store = RedisStateStore(client, prefix, BITS, RETENTION)
    docs = list("abcdefghi")
    state["groups"] = store.group_sizes(docs)
    state["verdicts"] = store.verdicts_of(docs)
    return state


@pytest.mark.parametrize("over", ["fresh", "relinked"])
def test_each_write_of_a_replay_whose_reply_is_lost_restores_the_state_a_replay_restores(
    target: _Target, over: str
) -> None:
    """Each write request of `dedup replay` (the replay's own lease and checkpoint, the registration lease's
    SET, INCR, publication and release, every round of each batch, the verdict counter moved past the
    newest seq, the sweep pass, the checkpoint's removal) has its reply lost once and is sent again: every
    link restored as it is without a lost reply (none found there already, none skipped), the checkpoints
    the same, the state the same, group sizes included. Over a state a first replay restored, which is
    deleted first (`dedup replay --fresh`: every key but the lease's and the checkpoint, then marked anew),
    or which the later records of a relink change: members move between groups, a canonical is taken out
    (`relinked`)."""
    then = RELINKED if over == "relinked" else FIRST

    def replayed(client: Any) -> tuple[list[Any], dict[str, Any]]:
        setup = target.direct()
        prefix = f"t{uuid.uuid4().hex}:"
        _replayed(setup, prefix, FIRST)
        seen = _replayed(client, prefix, then, fresh=over == "fresh")
        client.close()
        state = _restored(setup, prefix)
        setup.close()
        return seen, state

    clean = replayed(target.direct())
    assert [set(done) for done in clean[0][:-2:2]] == [{True}] * 3  # every link restored
    assert clean[0][-2:] == [None, []]  # the replay completed, every lease released
    assert clean[1]["groups"] == (
        {"a": 1, "b": 1, "c": 3, "d": 2, "e": 1, "f": 1, "g": 1, "h": 3, "i": 1}
        if over == "relinked"
        else {"a": 3, "b": 1, "c": 2, "d": 1, "e": 1, "f": 2, "g": 1, "h": 1, "i": 1}
    )
    assert _each_lost(target, lambda proxy: replayed(target.through(proxy)), clean, most=16) == 16


# --- the lease ------------------------------------------------------------------------------------------


def test_each_write_of_a_lease_whose_reply_is_lost_leaves_it_taken_fenced_and_released(
    target: _Target,
) -> None:
    """Each write request of a lease's life (its SET NX, the epoch's INCR, its publication to every slot
    group's fence, a batch under it, its renewal, its release) has its reply lost once and is sent again: the
    lease is taken at once, every fence holds its epoch, the batch is written, it is renewed, and its release
    frees the lock with no word of a lease lost (a release sent again finds the lock free: it released it)."""

    def run(client: Any) -> tuple[Any, ...]:
        store = RedisStateStore(client, f"t{uuid.uuid4().hex}:", BITS, RETENTION)
        lock = _lease_lock(client, store)
        with _lease_log() as logged, lock.held(wait_s=5) as lease:
            fences = set(_values(client, store._fences))
            applied = store.apply([VerdictWrite(replace(Link.unique("a"), published_at=LATER))], lease)
            renewed = bool(lock._extend(keys=[lease.key], args=[lease.token, 30_000]))
        warned = [record.getMessage() for record in logged.records]
        left = client.get(lease.key)
        store.close()
        return fences == {str(lease.epoch)}, sorted(applied.seqs), applied.lost, renewed, warned, left

    clean = run(target.direct())
    assert clean == (True, ["a"], [], True, [], None)
    assert _each_lost(target, lambda proxy: run(target.through(proxy)), clean) >= 5
