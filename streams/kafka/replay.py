"""`dedup replay` from Kafka: rebuild Redis and the vector store from `dedup.links`.

The topic is read from the beginning up to the end offsets seen when the replay
starts (records produced later are the live workers' business). Compaction keeps
the latest record per document, and so does the replay. Links are restored in
the order Redis recorded them (`seq`, given inside the transaction that recorded
the verdict; not a wall clock, which differs between hosts and is the re-send
time of a re-sent link), which gives back first-seen order to the SimHash band
sets and with it every tie; restoring is idempotent. Links without `seq` (written
before it existed) come first, by `linked_at`.

Memory stays bounded whatever the topic holds. `seq` order is not partition
order (a worker may send an older decision after a newer one, and documents are
spread over partitions by id), so the records cannot be merged as they stream
by: the first pass keeps every document's latest record in a temporary SQLite
file (`LatestLinks`), and the second reads it back in `seq` order through an
index. In memory at any time: one chunk of records read and one batch restored.

Restoring goes through `BatchedState` one batch at a time: the batch's reads in
one warm-up, each link restored against that snapshot, every write in one
transaction under the registration lease (live workers write under it too).
After each batch the order key of its last link is stored (`{prefix}replay`), with
the clock the replay found the state at, so an interrupted replay run again
restores only what comes after it, judging what was applied before as the first
run would (`Restorer._applied`); a replay that completes removes it. The clock found
is kept from the start (`{{prefix}replay}:clock`), so a replay stopped after its first
batch and before its first checkpoint judges by it too, not by the clock that batch
moved; a `--fresh` replay stopped while it cleared the state has the next replay, with
`--fresh` or without, clear it again before restoring over what the clear left. A link the
state cannot take is skipped and reported as an unreadable record is: one to a
document that is no canonical (a chain, which the store refuses with the whole
batch), one whose vector the vector store refuses. The checkpoint is written right after the batch's
transaction, not inside it (`RedisStateStore.apply` takes no extra write): a kill
between the two restores that batch again, which finds every link already there.

One replay at a time: a replay holds a lease of its own (`{{prefix}replay}:lease`,
renewed while it runs). Another waits out the lease (a killed replay's expires)
and then refuses. Two taking turns would write each other's checkpoints, and
`--fresh` would clear what the other restored. A replay stalled past its lease (a
paused or starved host) may have been replaced: under each batch's registration
lease, before writing, and with each checkpoint it writes, one script on the
checkpoint's slot finds the lease its own, or free with the checkpoint as this
replay left it (a lapse no other replay used: the lease is taken again). Otherwise
it stops without another write (`ReplayLeaseLost`).
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson
import redis
from pydantic import SecretStr

from streams.config import RetentionSettings, Settings
from streams.core.cascade import CONTENT_KEY, URL_KEY
from streams.core.model import Link, ModelId, Verdict
from streams.core.ports import Reads, VectorStore
from streams.core.replay import Recorded, ReplayStats, chain, restore
from streams.features.bands import DEFAULT, BandLayout
from streams.kafka.journal import read_to_end
from streams.records.article import parse_rfc3339
from streams.records.output import read_link_record, rfc3339
from streams.runner.collector import rare_collections
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import LeaseLost, LockTimeout, RedisLock
from streams.stores.redis_store import BUCKET_BITS, RedisStateStore

BATCH = 2_000
"""Links restored per transaction: round trips amortised, the lease held well under a second."""
CHUNK = 2_000
CHUNK_BYTES = 16 << 20
"""Records (and bytes of them) read from the topic before they are folded into the on-disk index."""
CACHE_KIB = 64 * 1024
"""SQLite page cache of the index: the bound on what it holds in memory."""
PREFETCH = {"queued.max.messages.kbytes": "16384", "fetch.max.bytes": "8388608"}
"""What the topic reader holds ahead of the replay, unless `kafka_config` says otherwise: librdkafka's
defaults (64 MiB queued, 50 MiB a fetch) would be most of a replay's memory."""
SWEEP_LIMIT = 10_000
"""Expired entries removed per sweep call once the links are restored."""

Order = tuple[int, int, str, int, int]
"""(has seq, seq, linked_at, partition, offset): the decision order of a document's record."""


class Progress(Protocol):
    """Where a long replay reports: each phase starts with its total, then advances."""

    def start(self, phase: str, total: int) -> None: ...

    def advance(self, count: int) -> None: ...


@dataclass
class KafkaReplayStats(ReplayStats):
    documents: int = 0
    """Documents among the records read (the latest record of each is restored)."""
    vectors_skipped: int = 0
    """Embedded canonicals whose vectors had nowhere to go (no vector store configured)."""
    resumed: int = 0
    """Documents an interrupted replay had restored already (before its checkpoint): not restored again."""


@dataclass(slots=True)
class _Read:
    order: Order
    value: bytes
    """The record as read (JSON): bytes take less memory than the parsed record and its vector."""
    recorded: Recorded


def _newest(kept: _Read | None, read: _Read) -> _Read:
    """The later of two records of a document; of a verdict sent again (`sent_again`), the first record, which
    says what deciding it claimed (while compaction keeps it; README, "Stage agents"). A re-send without a
    `seq` may lack what the other carries (a vector and its facts, a relink's keys): the later one keeps
    them, and the stages of the earlier one."""
    if kept is None:
        return read
    newer, older = (read, kept) if kept.order < read.order else (kept, read)
    if sent_again(newer.recorded.link, older.recorded.link):
        # A redelivery's record carries the features of what came again (another URL, a later date), which
        # deciding never claimed: the state holds the first record's keys, stamps, stages and vector, and so
        # must a replay.
        return older
    if newer.recorded.link != older.recorded.link:
        return newer
    lacks_vector = newer.recorded.vector is None and older.recorded.vector is not None
    lacks_keys = newer.recorded.keys is None and older.recorded.keys is not None
    other_stages = newer.recorded.stages != older.recorded.stages
    if not (lacks_vector or lacks_keys or other_stages):
        return newer
    record, other = orjson.loads(newer.value), orjson.loads(older.value)
    if other_stages:
        record.pop("stages", None)
        record.update({"stages": other["stages"]} if "stages" in other else {})
    if lacks_vector:
        record["vector"] = other["vector"]
        if record.get("facts") is None and other.get("facts") is not None:
            record["facts"] = other["facts"]
    if lacks_keys:
        record["keys"] = other["keys"]
    return _Read(newer.order, orjson.dumps(record), read_link_record(record))


def sent_again(newer: Link, older: Link) -> bool:
    """Whether `newer`, a later record of a document, is `older` sent again (a redelivered document given its
    verdict): the same verdict (the links compare equal), recorded once (the same `seq`), of the same content.
    Then `older` stands: it says what deciding claimed (its URL, its date), `newer` what came again. Every
    reader of a document's verdict on `dedup.links` keeps it by this rule (the replay's `_newest`, the
    relink's `streams.service.relink.latest_links`, the report). A new verdict of the id (its earlier one
    expired, the id reused) has a `seq` of its own."""
    return newer == older and newer.seq is not None and newer.seq == older.seq and newer.content == older.content


class LatestLinks:
    """The latest record of every document, in a temporary SQLite file; read back in decision order.

    Memory: one chunk of records being folded in, and SQLite's page cache (`CACHE_KIB`).
    Disk: the documents' latest records (about the size of the compacted topic). The file is unlinked
    as soon as it is made (one connection, no journal: nothing opens it again), so the space comes back
    when the process ends, however it ends.
    """

    def __init__(self, folder: str | None = None) -> None:
        """`folder`: where the temporary file goes (default: TMPDIR)."""
        self._folder = folder or tempfile.gettempdir()
        with self._sorting():
            made = tempfile.mkdtemp(prefix="dedup-replay-", dir=folder)
        path = Path(made) / "latest.sqlite3"
        try:
            with self._sorting():
                self._db = sqlite3.connect(path, isolation_level=None)
                self._db.executescript(
                    f"""
                    PRAGMA journal_mode = OFF;
                    PRAGMA synchronous = OFF;
                    PRAGMA cache_size = -{CACHE_KIB};
                    PRAGMA temp_store = FILE;
                    CREATE TABLE latest (
                        doc_id TEXT PRIMARY KEY, has_seq INTEGER, seq INTEGER, linked_at TEXT,
                        part INTEGER, off INTEGER, value BLOB
                    );
                    """
                )
        finally:
            shutil.rmtree(made, ignore_errors=True)
        self._pending: dict[str, _Read] = {}
        self._pending_bytes = 0
        self._indexed = False

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _sorting(self) -> Iterator[None]:
        """The file's failures in one line that names its folder: said as a state file's ("a state folder's
        SQLite file cannot be used: database or disk is full"), a full TMPDIR sent people to their state."""
        try:
            yield
        except (sqlite3.Error, OSError) as exc:
            raise RuntimeError(
                f"the replay's sorting file in {self._folder} failed ({exc}): it holds the latest link of every"
                " document, about the size of the compacted topic; set TMPDIR to a folder with room for it"
            ) from None

    def add(self, read: _Read) -> None:
        """Fold one record in: it replaces its document's record if it is later (`_newest`)."""
        doc_id = read.recorded.link.doc_id
        self._pending[doc_id] = _newest(self._pending.get(doc_id), read)
        self._pending_bytes += len(read.value)
        if len(self._pending) >= CHUNK or self._pending_bytes >= CHUNK_BYTES:
            self._fold()

    def _fold(self) -> None:
        pending, self._pending, self._pending_bytes = self._pending, {}, 0
        if pending:
            with self._sorting():
                self._fold_in(pending)

    def _fold_in(self, pending: dict[str, _Read]) -> None:
        ids = list(pending)
        stored: dict[str, _Read] = {}
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            rows = self._db.execute(
                "SELECT has_seq, seq, linked_at, part, off, value FROM latest"
                f" WHERE doc_id IN ({','.join('?' * len(part))})",
                part,
            )
            for *order, value in rows:
                read = _Read(tuple(order), value, read_link_record(orjson.loads(value)))  # type: ignore[arg-type]
                stored[read.recorded.link.doc_id] = read
        rows = []
        for doc_id, read in pending.items():
            kept = stored.get(doc_id)
            newest = _newest(kept, read)
            if newest is not kept:
                rows.append((doc_id, *newest.order, newest.value))
        self._db.execute("BEGIN")
        self._db.executemany("INSERT OR REPLACE INTO latest VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        self._db.execute("COMMIT")

    def __len__(self) -> int:
        self._fold()
        with self._sorting():
            return int(self._db.execute("SELECT COUNT(*) FROM latest").fetchone()[0])

    def _index(self) -> None:
        self._fold()
        if not self._indexed:
            with self._sorting():
                self._db.execute("CREATE INDEX decision_order ON latest (has_seq, seq, linked_at, part, off)")
            self._indexed = True

    def newest_seq(self) -> int:
        """The highest `seq` of every record read (a document's kept record holds its highest); 0: none."""
        self._fold()
        with self._sorting():
            return int(self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM latest").fetchone()[0])

    def count_through(self, order: Order) -> int:
        """How many documents come at or before `order`."""
        self._index()
        query = "SELECT COUNT(*) FROM latest WHERE (has_seq, seq, linked_at, part, off) <= (?, ?, ?, ?, ?)"
        with self._sorting():
            return int(self._db.execute(query, order).fetchone()[0])

    def ordered(self, after: Order | None = None) -> Iterator[tuple[Order, dict[str, Any]]]:
        """Every document's latest record in decision order (only those after `after` when given)."""
        self._index()
        where = "WHERE (has_seq, seq, linked_at, part, off) > (?, ?, ?, ?, ?)" if after is not None else ""
        with self._sorting():
            rows = self._db.execute(
                f"SELECT has_seq, seq, linked_at, part, off, value FROM latest {where}"
                " ORDER BY has_seq, seq, linked_at, part, off",
                after or (),
            )
            for *order, value in rows:
                yield tuple(order), orjson.loads(value)  # type: ignore[misc]


def decided_at(linked_at: Any) -> str:
    """A record's `linked_at` as the writers spell it (UTC, milliseconds: `now_rfc3339`), so that times compare as
    text in decision order whatever offset or precision another writer gave them; ValueError when it is no
    RFC 3339 time."""
    if not isinstance(linked_at, str):
        raise ValueError(f"linked_at must be an RFC 3339 time, got {linked_at!r}")
    if _WRITTEN.fullmatch(linked_at):
        return linked_at
    try:
        moment = parse_rfc3339(linked_at)
    except ValueError:
        raise ValueError(f"linked_at must be an RFC 3339 time, got {linked_at[:80]!r}") from None
    return rfc3339(moment)


_WRITTEN = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
"""`linked_at` as `now_rfc3339` writes it: kept as it is."""


UNREADABLE = (orjson.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError)
"""What `read_link` raises for a record the replay skips (and reports)."""


def read_link(value: bytes | None) -> tuple[dict[str, Any], Recorded, str]:
    """A `dedup.links` record as the replay reads it: the record, its link and features, and its decision
    time (`decided_at`); one of `UNREADABLE` when the replay skips it (the relink skips it too)."""
    record = orjson.loads(value or b"")
    return record, read_link_record(record), decided_at(record["linked_at"])


def read_links(
    settings: Settings, stats: KafkaReplayStats, progress: Progress | None = None, folder: str | None = None
) -> LatestLinks:
    """The latest link of every document of `dedup.links`, on disk (close it when done)."""
    topic = settings.topics.links
    on_total = (lambda total: progress.start(f"reading {topic}", total)) if progress is not None else None
    prefetch = {name: SecretStr(value) for name, value in PREFETCH.items() if name not in settings.kafka_config}
    reader = settings.model_copy(update={"kafka_config": {**prefetch, **settings.kafka_config}})
    latest = LatestLinks(folder)
    unreported = 0
    try:
        for message in read_to_end(reader, topic, on_total):
            partition, offset = message.partition(), message.offset()
            stats.read += 1
            unreported += 1
            if progress is not None and unreported >= 1000:
                progress.advance(unreported)
                unreported = 0
            try:
                _, recorded, decided = read_link(message.value())
            except UNREADABLE as exc:
                stats.bad.append(f"{topic}[{partition}]@{offset}: {type(exc).__name__}: {exc}")
                continue
            seq = recorded.link.seq
            order = (int(seq is not None), seq or 0, decided, partition, offset)
            latest.add(_Read(order, message.value() or b"", recorded))
        if progress is not None and unreported:
            progress.advance(unreported)
        stats.documents = len(latest)
    except BaseException:
        latest.close()
        raise
    return latest


_BEGUN = "begun"
"""The checkpoint of a replay that has restored nothing yet."""
_CLEARING = "clearing"
"""The found clock of a `--fresh` replay while it clears the state."""
_HOLD = """
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then
  if holder or redis.call('GET', KEYS[2]) ~= ARGV[3] then return 0 end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
end
if ARGV[2] == '' then redis.call('DEL', KEYS[2], KEYS[3]) else redis.call('SET', KEYS[2], ARGV[2]) end
if ARGV[5] == '' then redis.call('DEL', KEYS[3]) elseif ARGV[5] ~= '-' then redis.call('SET', KEYS[3], ARGV[5]) end
return 1
"""
# KEYS: the replay's lease, its checkpoint, the clock the replay found (one slot: each name hash-tags the
# checkpoint's); ARGV: the lease's token, the checkpoint's new value ('' deletes it, and the found clock with
# it), the value it wrote last, the lease's time to live in ms, the found clock ('' deletes it, '-' leaves it).
# Writes only while the lease is the caller's, or free with the checkpoint as the caller left it (a lapse no
# other replay used: taken again); 0 otherwise.


class ReplayLeaseLost(RuntimeError):
    """This replay's lease expired (a pause, a starved host) and another replay may have taken over: it stops
    without writing again."""


class ReplayState(BatchedState):
    """`BatchedState` that also warms the group sizes a batch of links grows: `warm` loads only those of
    the canonicals it finds through exact keys and bands, and a link found by SimHash or meaning names
    its canonical in neither, which would cost a round trip per link."""

    def warm_groups(self, canonical_ids: Iterable[str]) -> None:
        missing = [c for c in dict.fromkeys(canonical_ids) if c not in self._groups]
        if missing:
            # With their stamps, as `BatchedState` keeps every group since ac90ea9 (sizes alone: a TypeError at the
            # first duplicate replayed, `dedup replay` on Kafka stopped for good).
            self._groups.update(self._backend.group_entries(missing))

    def warm_verdicts(self, doc_ids: Iterable[str]) -> None:
        """The verdicts of the canonicals a batch links to, in one round trip: each is checked (`_chained`)."""
        missing = [d for d in dict.fromkeys(doc_ids) if d not in self._verdicts]
        if missing:
            self._verdicts.update(self._backend.verdicts_of(missing))


class _Refused(Exception):
    """A link the state cannot take as it is: skipped and reported, never fatal."""


class _Guarded:
    """The vector store, its refusal of a vector (ValueError: another dimension than its model's collection)
    told apart from every other failure, which stops the replay (run again to resume)."""

    def __init__(self, store: VectorStore) -> None:
        self._store = store

    def add(
        self,
        model: ModelId,
        doc_id: str,
        vector: np.ndarray,
        published_at: int,
        language: str,
        facts: dict[str, list[str]] | None = None,
    ) -> None:
        try:
            self._store.add(model, doc_id, vector, published_at, language, facts)
        except ValueError as exc:
            raise _Refused(f"the vector store refused its vector: {exc}") from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class Restorer:
    """Restores links into Redis a batch at a time, each in one transaction under the registration lease,
    with the checkpoint that lets an interrupted replay resume. A link the state cannot take (to a document
    that is no canonical: a chain; with a vector the store refuses) is skipped, and the caller told why.

    The lease of a batch is not renewed, so a batch has a bounded time to be written: one that outlasts
    the lease (a loaded host) is refused by the fence (the lease's epoch, checked in every one-slot
    script), and restored again in two halves. Each lease publishes its epoch as the workers' does, so a
    paused earlier holder writes nothing once the replay has read."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        vectors: VectorStore | None,
        retention: RetentionSettings,
        lock_ttl_s: float,
        bucket_bits: int = BUCKET_BITS,
        band_layout: BandLayout = DEFAULT,
    ) -> None:
        self.state = RedisStateStore(client, prefix, bucket_bits, retention, restoring=True, band_layout=band_layout)
        self._batched = ReplayState(self.state)
        self._client = client
        self._vectors = _Guarded(vectors) if vectors is not None else None
        self._retention = retention
        self._lock = RedisLock(client, f"{prefix}lock:register", lock_ttl_s, renew=False, fence=self.state.fence)
        self._sweep_lock = RedisLock(client, f"{prefix}lock:register", lock_ttl_s, fence=self.state.fence)
        """Renewed: the sweep checks its lease inside each script, not by WATCH."""
        self._clear_lock = RedisLock(client, f"{prefix}lock:register", lock_ttl_s)
        """Not fenced: the state it clears may have lost its fence keys (a failover), and it deletes them."""
        self._checkpoint = self.state.checkpoint_key
        self._own_key = f"{{{self._checkpoint}}}:lease"
        """The replay's own lease, hash-tagged with its checkpoint's name: one slot, one script for both."""
        self._own_lock = RedisLock(client, self._own_key, lock_ttl_s)
        self._found_key = f"{{{self._checkpoint}}}:clock"
        """The clock the replay found, kept from `begin` until `done`: a replay stopped after its first batch
        and before its first checkpoint (still "begun") resumes judging by it, not by the clock that batch moved."""
        self._own_wait_s = 2 * lock_ttl_s
        self._owner: str | None = None
        self._written: str | None = None
        """The checkpoint as this replay found or wrote it last: its mark on the state while its lease lapses."""
        self._hold_script = client.register_script(_HOLD)
        self._ttl_ms = int(lock_ttl_s * 1000)
        self.found_clock = 0
        """The clock of the state the replay found before its first write (0: empty, or cleared), kept in its
        checkpoint for a resumed replay: see `_applied`."""

    @contextmanager
    def owned(self) -> Iterator[None]:
        """This replay's lease, held (and renewed) for the block, which every write needs; RuntimeError in one
        line while another replay's is renewed (waited out for twice its lifetime first: a killed replay's
        expires)."""
        with ExitStack() as held:
            try:
                lease = held.enter_context(self._own_lock.held(wait_s=self._own_wait_s))
            except LockTimeout:
                raise RuntimeError(
                    f"another `dedup replay` is restoring this state ({self._own_key} is renewed: waited"
                    f" {self._own_wait_s:.0f} s); wait for it to finish, then run this one if it is still needed"
                ) from None
            self._owner = lease.token
            try:
                yield
            finally:
                self._owner = None

    def _own(self) -> None:
        """ReplayLeaseLost unless this replay's lease is still its own (or free, the checkpoint as it left it:
        then its own again)."""
        self._hold(self._written or "")

    def _hold(self, value: str, found: str = "-") -> None:
        """The checkpoint set to `value` ('' deletes it, with the found clock) and the found clock to `found`
        ('' deletes it, '-' leaves it) under this replay's lease, else ReplayLeaseLost."""
        if self._owner is None:
            raise self._lost()
        args = [self._owner, value, self._written or "", self._ttl_ms, found]
        if not self._hold_script(keys=[self._own_key, self._checkpoint, self._found_key], args=args):
            raise self._lost()
        self._written = value or None

    def _lost(self) -> ReplayLeaseLost:
        return ReplayLeaseLost(
            f"this replay lost its lease {self._own_key} (stopped or starved for longer than worker.lock_ttl_s)"
            " and another replay may have taken over: it stopped without writing again; run `dedup replay`"
            " again if none is running"
        )

    def checkpoint(self) -> Order | None:
        """The order key of the last link an interrupted replay restored (None: start from the beginning)."""
        return self._checkpointed()[0]

    def resume(self) -> Order | None:
        """`checkpoint`, with `found_clock` set: the state's clock when no replay is under way, else the one
        the interrupted replay found (its own batches have moved the state's clock since: its first one may
        have been written before its first checkpoint, so "begun" alone does not mean the state is as found)."""
        after, clock = self._checkpointed()
        if after is None:
            found = self._client.get(self._found_key) if self._client.get(self._checkpoint) == _BEGUN else None
            clock = int(found) if found is not None and found.isdigit() else self.state.clock()
        self.found_clock = clock
        return after

    def _checkpointed(self) -> tuple[Order | None, int]:
        """The checkpoint's order key and found clock; one written before it kept the clock (an order key
        alone) has no known clock: 0, as an empty state's."""
        value = self._client.get(self._checkpoint)
        if not value or value == _BEGUN:
            return None, 0
        saved = orjson.loads(value)
        if isinstance(saved, list):
            return tuple(saved), 0  # type: ignore[return-value]
        return tuple(saved["after"]), int(saved["clock"])  # type: ignore[return-value]

    def clear(self) -> None:
        """Start from nothing: the checkpoint back to "begun" (the workers keep waiting), then every other key of
        the state deleted (`dedup replay --fresh`, for a state lost in part). Under the registration lease: a
        worker's batch in flight is written before, not across, the clear."""
        with self._clear_lock.held():
            self._hold(_BEGUN, found=_CLEARING)  # stopped in the clear (family by family), the next replay clears
            self.state.clear()
            self._hold(_BEGUN, found="")  # the clock found is the cleared state's: `resume` reads it after this

    def clearing(self) -> bool:
        """Whether a `--fresh` replay stopped while it cleared the state: what the clear left (group sizes
        whose members' verdicts went first) must go before anything is restored, or it would count again."""
        return self._client.get(self._checkpoint) == _BEGUN and self._client.get(self._found_key) == _CLEARING

    def begin(self) -> None:
        """Mark the replay as under way before its first write, where no checkpoint is there yet: the
        workers write nothing from now until `done` (the store's "Lost")."""
        self._written = self._client.get(self._checkpoint)
        self._hold(self._written or _BEGUN, found=str(self.found_clock))

    def done(self, newest_seq: int = 0) -> None:
        """The replay completed: the verdict counter past `newest_seq` (the newest seq read, restored or
        skipped), the sweep's pass for the clock's day completed, as the workers complete it (what replayed
        links left past its retention is removed), and the checkpoint removed (a later replay checks every
        link again)."""
        if newest_seq:
            self._own()
            self.state.count_past(newest_seq)
        while True:
            with self._sweep_lock.held() as lease:
                self._own()
                if self.state.sweep(SWEEP_LIMIT, lease).done:
                    break
        self._hold("")

    def restore(self, batch: list[Recorded], last: Order | None = None) -> list[bool | str]:
        """Restore `batch` (in decision order); then store `last` as the checkpoint, with `found_clock`.
        Returns, per link, whether it was restored (False: it was there already), or why it was skipped."""
        done = self._restore(batch)
        if last is not None:
            self._hold(orjson.dumps({"after": last, "clock": self.found_clock}).decode())
        return done

    def _applied(self, recorded: Recorded) -> bool:
        """Whether a link whose document has no verdict was applied to the state before the replay began
        (`core.replay.restore`): its verdict is past its retention at the clock the replay found, since the
        topic holds every link the state saw and the sweep took its verdict. An empty state's clock is 0."""
        return bool(self.found_clock) and self.state.stale(
            self.state.keep.verdicts, recorded.verdict_stamp, self.found_clock
        )

    def _restore(self, batch: list[Recorded]) -> list[bool | str]:
        """`batch` in one transaction; in halves (and so on) while the lease runs out before it is written."""
        reads = Reads(
            doc_ids=[r.link.doc_id for r in batch],
            exact_keys=[key for r in batch for key in (URL_KEY + r.url_hash, CONTENT_KEY + r.content_hash)],
            band_queries=[],
        )
        refused: dict[int, str | bool] = {}
        try:
            with self._lock.held() as lease:
                self._own()  # under the registration lease: a replay that took over waits for it to write
                done = self._attempt(batch, reads, refused)
                while done is None:
                    done = self._attempt(batch, reads, refused)
                self._batched.flush_applied(lease)
            return done
        except LeaseLost:
            self._batched.reset()
            if len(batch) == 1:
                raise
            half = len(batch) // 2
            return self._restore(batch[:half]) + self._restore(batch[half:])

    def _attempt(self, batch: list[Recorded], reads: Reads, refused: dict[int, str | bool]) -> list[bool | str] | None:
        """`batch` restored into a fresh snapshot but for the links `refused` (why, by position; False: passed
        over, see `_outlived`). None when one more is refused after it was restored in part, or when a link
        restored goes to a document that a later link of the batch made no canonical (the store would refuse
        the whole batch): what the snapshot holds is dropped, and the batch is restored again without it."""
        state = self._batched
        state.warm(reads)
        state.warm_groups(r.link.canonical_id for r in batch if r.link.verdict is Verdict.DUPLICATE)
        state.warm_verdicts(r.link.canonical_id for r in batch if not r.link.verdict.canonical)
        done: list[bool | str] = []
        for i, recorded in enumerate(batch):
            why = refused[i] if i in refused else self._chained(recorded.link)
            if why is None:
                try:
                    done.append(restore(recorded, state, self._vectors, self._retention, self._applied))
                    continue
                except _Refused as exc:
                    refused[i] = str(exc)
                    return None
            refused[i] = why
            done.append(why)
        later = {
            i: not self._outlived(r, batch[i + 1 :]) and why
            for i, r in enumerate(batch)
            if done[i] is True and (why := self._chained(r.link))
        }
        refused.update(later)
        return None if later else done

    def _outlived(self, member: Recorded, after: list[Recorded]) -> bool:
        """Whether `member`'s link to its canonical had expired when a later link of the batch made that
        canonical no canonical: its place in the group (stamped with its `published_at`, kept with the exact
        keys) was gone then, as a canonical with members is never linked. Its id reused, the canonical's first
        record was compacted away: the link is history, not a chain, and is passed over (the live state holds
        nothing of it that is not past its retention)."""
        again = next((r for r in after if r.link.doc_id == member.link.canonical_id), None)
        return again is not None and self.state.stale(self.state.keep.exact, member.published_at, again.verdict_stamp)

    def _chained(self, link: Link) -> str | None:
        """Why `link` would make a chain in the snapshot, as the batch has left it so far (`chain`)."""
        return chain(link, self._batched.verdict_of)


def replay_links(
    settings: Settings,
    client: redis.Redis,
    vectors: VectorStore | None,
    progress: Progress | None = None,
    prefix: str | None = None,
    batch: int = BATCH,
    fresh: bool = False,
) -> KafkaReplayStats:
    """Read `dedup.links` and restore every document's latest link into Redis (under `prefix`, default
    the configured one) and `vectors`; resumes after the last batch an interrupted replay restored.

    `fresh` deletes the state first and replays from the beginning: a state lost in part (a cluster master
    failed over to a replica that had not copied it) is refused otherwise (`StateLost`). A `fresh` replay
    stopped in its clear is cleared again by the next one, with `fresh` or without.

    RuntimeError in one line when Redis or the broker cannot be reached.
    """
    prefix = settings.redis_prefix if prefix is None else prefix
    restorer = Restorer(
        client,
        prefix,
        vectors,
        settings.retention,
        settings.worker.lock_ttl_s,
        settings.redis_bucket_bits,
        settings.simhash.band_layout,
    )
    with ExitStack() as held:
        try:
            held.enter_context(restorer.owned())  # before anything is written: one replay at a time
            if fresh or restorer.clearing():
                restorer.clear()
            resume_at = restorer.resume()  # Redis first: an unreachable one is said before the topic is read
            restorer.begin()
        except redis.RedisError as exc:
            raise RuntimeError(f"cannot reach Redis: {exc}") from None
        stats = KafkaReplayStats()
        latest = read_links(settings, stats, progress)
        try:
            if resume_at is not None:
                stats.resumed = latest.count_through(resume_at)
            if progress is not None:
                progress.start("restoring state", stats.documents - stats.resumed)
            position = stats.resumed
            with rare_collections():
                for chunk in _batches(latest.ordered(resume_at), batch):
                    records = []
                    for _, record in chunk:
                        recorded = read_link_record(record)
                        position += 1
                        records.append(_numbered(recorded, position))
                    done = restorer.restore(records, chunk[-1][0])
                    for restored, recorded, (order, _) in zip(done, records, chunk, strict=True):
                        if isinstance(restored, str):
                            stats.bad.append(f"{settings.topics.links}[{order[3]}]@{order[4]}: skipped: {restored}")
                            continue
                        if vectors is None and recorded.vector is not None and recorded.link.verdict.canonical:
                            stats.vectors_skipped += restored
                        stats.restored += restored
                        stats.already_there += not restored
                    if progress is not None:
                        progress.advance(len(chunk))
            restorer.done(latest.newest_seq())
        except redis.ConnectionError as exc:
            raise RuntimeError(f"lost Redis while restoring (run again to resume): {exc}") from None
        except redis.RedisError as exc:  # a full Redis (OOM under noeviction), a read-only replica: said in one line
            raise RuntimeError(f"Redis refused a write while restoring (run again to resume): {exc}") from None
        finally:
            latest.close()
        return stats


def _numbered(recorded: Recorded, position: int) -> Recorded:
    """A record without `seq` (written before verdicts carried one) numbered by its position in the replay's
    order, where such records come first: the numbers an uninterrupted replay into an empty state draws for
    them, and the same again when a replay stopped after drawing a batch's numbers runs again (drawn afresh,
    they would come after records whose own seqs they precede)."""
    if recorded.link.seq:
        return recorded
    return replace(recorded, link=replace(recorded.link, seq=position))


def _batches(items: Iterable[tuple[Order, dict[str, Any]]], size: int) -> Iterator[list[tuple[Order, dict[str, Any]]]]:
    batch: list[tuple[Order, dict[str, Any]]] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
