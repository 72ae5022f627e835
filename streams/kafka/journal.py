"""The latest record per key of a compacted topic (`dedup.links`, `dedup.candidates`), read to its end now.

A compacted topic is a journal: every change of a key is appended, and the
latest record of each key is its current value. Compaction runs when the broker
decides, so a reader sees some superseded records too and must pick the latest
one itself. This does, for any topic of JSON objects:

- it reads from the beginning up to the end offsets seen at call time (records
  produced meanwhile are left for the next call), like `dedup replay`;
- per key, the latest record is the one with the highest `seq` where both
  records carry one (the order in which Redis recorded the decisions: a worker
  may send an older decision after a newer one), else the one at the higher
  offset (a key always lands on one partition, where offsets are its history);
- a record without a value (a tombstone) deletes its key, as compaction will;
- a record that cannot be read (no key, not a JSON object, a `seq` that is no
  positive integer) is skipped and described in `bad`: one bad record never
  hides the others.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.config import Settings
from streams.kafka.topics import CommandClient

POLL_S = 1.0
TIMEOUT_S = 30.0
TAIL = 64
"""Records read back from the end of each partition for `newest_seq`: a worker may send an older decision
after a newer one, so the last record alone need not hold its partition's newest seq."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where a kept record came from, and its `seq` if it carries one: what decides which record is newer."""

    partition: int
    offset: int
    seq: int | None

    def newer_than(self, other: Position) -> bool:
        if self.seq is not None and other.seq is not None and self.seq != other.seq:
            return self.seq > other.seq
        return (self.offset, self.partition) > (other.offset, other.partition)


@dataclass
class Latest:
    """The latest record of every key, in the order the keys were last written, and what could not be read."""

    records: dict[str, Any] = field(default_factory=dict)
    """Each key's latest record, or what `latest`'s `fold` made of it."""
    positions: dict[str, Position] = field(default_factory=dict)
    read: int = 0
    """Records read, superseded and unreadable ones included."""
    bad: list[str] = field(default_factory=list)
    """One line per unreadable record: `topic[partition]@offset: why`."""


def _seq(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"seq must be a positive integer, got {value!r}")
    return value


def end_offsets(consumer: Consumer, topic: str) -> list[TopicPartition]:
    """Every partition of `topic` with its end offset now (where reading stops)."""
    metadata = consumer.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise RuntimeError(f"topic {topic} does not exist; create it with `dedup topics create`")
    ends = []
    for partition in sorted(metadata.partitions):
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
        ends.append(TopicPartition(topic, partition, high))
    return ends


def recorded(settings: Settings, topic: str) -> int:
    """How many records `topic` holds now (between each partition's first and end offsets; 0 when there
    is no such topic). RuntimeError in one line when the broker cannot be reached."""
    client = CommandClient(settings)
    client.reach(AdminClient(client.config()))
    consumer = Consumer(client.config(**{"group.id": f"dedup-counter-{uuid.uuid4().hex}"}))
    try:
        metadata = consumer.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        total = 0
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
            total += high - low
        return total
    finally:
        consumer.close()


def newest_seq(settings: Settings, topic: str, tail: int = TAIL) -> int:
    """The highest `seq` among the link records in the last `tail` offsets of each partition of `topic` (0:
    none, or no such topic): a lower bound of the seqs a state that took in all of them has drawn. A record
    the replay would skip as unreadable is passed over here too: its seq never reached any state.
    RuntimeError in one line when the broker cannot be reached."""
    from streams.kafka.replay import UNREADABLE, read_link  # the replay's own reading of a link record

    if not recorded(settings, topic):
        return 0
    newest = 0
    for message in read_to_end(settings, topic, tail=tail):
        try:
            seq = read_link(message.value())[1].link.seq
        except UNREADABLE:
            continue
        newest = max(newest, seq or 0)
    return newest


def read_to_end(
    settings: Settings, topic: str, on_total: Callable[[int], None] | None = None, tail: int | None = None
) -> Iterator[Message]:
    """Every record of `topic` from its beginning (or, with `tail`, the last `tail` offsets of each partition)
    up to the end offsets seen when reading starts (records produced meanwhile are left for the next reader),
    under a throwaway group that commits nothing.

    `on_total` hears how many records that is, before the first. RuntimeError in one line when the
    broker cannot be reached or the topic does not exist.
    """
    client = CommandClient(settings)
    client.reach(AdminClient(client.config()))  # an unreachable broker is one line, not a 30 s hang
    consumer = Consumer(
        client.config(
            **{
                "group.id": f"dedup-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": True,  # a partition's end said as such: see `_read`
            }
        )
    )
    try:
        yield from _read(consumer, client, settings, topic, on_total, tail)
    except KafkaException as exc:  # the broker gone or restarting mid-read: one line, never a traceback
        reason = client.first_reason() or exc.args[0].str()
        raise RuntimeError(
            f"the Kafka broker at {settings.kafka_bootstrap} failed while {topic} was read ({reason}); run the"
            " command again once it is back"
        ) from None
    finally:
        consumer.close()


def _read(
    consumer: Consumer,
    client: CommandClient,
    settings: Settings,
    topic: str,
    on_total: Callable[[int], None] | None,
    tail: int | None,
) -> Iterator[Message]:
    """`read_to_end`'s reading, on its consumer; KafkaException where librdkafka raises one."""
    ends = end_offsets(consumer, topic)
    starts = {tp.partition: OFFSET_BEGINNING for tp in ends}
    if tail is not None:
        starts = {tp.partition: max(0, tp.offset - tail) for tp in ends}
    remaining = {tp.partition: tp.offset for tp in ends if tp.offset > 0}
    if on_total is not None:
        on_total(sum(remaining.values()))
    consumer.assign([TopicPartition(tp.topic, tp.partition, starts[tp.partition]) for tp in ends])
    quiet_since = time.monotonic()
    while remaining:
        message = consumer.poll(POLL_S)
        if message is None:
            if time.monotonic() - quiet_since > TIMEOUT_S:  # the broker went away mid-read: said, not waited on
                reason = client.first_reason() or "no records and no error"
                raise RuntimeError(
                    f"the Kafka broker at {settings.kafka_bootstrap} sent nothing of {topic} for {TIMEOUT_S:.0f} s"
                    f" before its end offsets ({reason}); run the command again once it is back"
                )
            continue
        quiet_since = time.monotonic()
        error = message.error()
        if error is not None and error.code() == KafkaError._PARTITION_EOF:
            # Nothing more to give there now. The end offset may count offsets no record is given at: a
            # transaction's commit or abort marker (MirrorMaker 2 with exactly-once, a Streams job), an aborted
            # transaction's records. Waiting for the record at `end - 1` waited out TIMEOUT_S and failed.
            remaining.pop(message.partition(), None)
            continue
        if error is not None:
            raise KafkaException(error)
        partition, offset = message.partition(), message.offset()
        if partition not in remaining or offset >= remaining[partition]:
            continue
        if offset + 1 >= remaining[partition]:
            del remaining[partition]
        yield message


Again = Callable[[Any, Any], bool]
"""Whether a later record of a key (as `fold` made it) is the one kept sent again: then the kept one stands."""


def latest(
    settings: Settings, topic: str, fold: Callable[[dict[str, Any]], Any] | None = None, again: Again | None = None
) -> Latest:
    """Read `topic` from its beginning to its current end; keep the latest JSON record per key, or with `fold`
    what `fold` makes of it, made as it is read: a reader that needs a little of each record (the report, a
    decision) never holds the records themselves, whose vectors took 34 KB an embedded canonical (34 GB for a
    million). With `again`, a later record that is the kept one sent again leaves the kept one (a verdict's
    first record, not a redelivery's: `streams.kafka.replay.sent_again`).

    RuntimeError in one line when the broker cannot be reached or the topic does not exist.
    """
    result = Latest()
    for message in read_to_end(settings, topic):
        result.read += 1
        _keep(result, topic, message.partition(), message.offset(), message.key(), message.value(), fold, again)
    return result


def _keep(
    result: Latest,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    fold: Callable[[dict[str, Any]], Any] | None = None,
    again: Again | None = None,
) -> None:
    """Fold one record into `result`: it replaces its key's record if it is newer, unless it is that record
    sent `again`."""
    where = f"{topic}[{partition}]@{offset}"
    try:
        if not key:
            raise ValueError("record has no key")
        name = key.decode()
        record = orjson.loads(value) if value is not None else None
        if record is not None and not isinstance(record, dict):
            raise ValueError(f"record is a JSON {type(record).__name__}, not an object")
        position = Position(partition, offset, _seq(record.get("seq")) if record is not None else None)
    except (orjson.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        result.bad.append(f"{where}: {exc}")
        return
    kept = result.positions.get(name)
    if kept is not None and not position.newer_than(kept):
        return
    if record is None:
        result.records.pop(name, None)
        result.positions[name] = position  # a tombstone: the key is gone, unless a newer record comes
        return
    value = record if fold is None else fold(record)
    if again is not None and name in result.records and again(value, result.records[name]):
        return
    result.records.pop(name, None)  # the latest write goes last
    result.records[name] = value
    result.positions[name] = position
