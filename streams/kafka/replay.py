"""`dedup replay` from Kafka: rebuild Redis and the vector store from `dedup.links`.

The topic is read from the beginning up to the end offsets seen when the replay
starts (records produced later are the live workers' business). Compaction keeps
the latest record per document, and so does the replay. Links are restored in
the order Redis recorded them (`seq`, given inside the transaction that recorded
the verdict; not a wall clock, which differs between hosts and is the re-send
time of a re-sent link), which gives back first-seen order to the SimHash band
sets and with it every tie; restoring is idempotent. Links without `seq` (written
before it existed) come first, by `linked_at`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Protocol

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from streams.config import Settings
from streams.core.ports import StateStore, VectorStore
from streams.core.replay import Recorded, ReplayStats, restore
from streams.records.output import read_link_record

POLL_S = 1.0
TIMEOUT_S = 30.0


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


def read_links(settings: Settings, stats: KafkaReplayStats, progress: Progress | None = None) -> list[Recorded]:
    """The latest link of every document, in decision order."""
    consumer = Consumer(
        {
            **settings.kafka_client_config(),
            "group.id": f"dedup-replay-{uuid.uuid4().hex}",  # nothing is committed under it
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    latest: dict[str, tuple[tuple[int, int, str, int, int], Recorded]] = {}
    try:
        ends = end_offsets(consumer, settings.topics.links)
        remaining = {tp.partition: tp.offset for tp in ends if tp.offset > 0}
        if progress is not None:
            progress.start(f"reading {settings.topics.links}", sum(remaining.values()))
        consumer.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in ends])
        while remaining:
            message = consumer.poll(POLL_S)
            if message is None:
                continue
            if message.error() is not None:
                raise KafkaException(message.error())
            partition, offset = message.partition(), message.offset()
            if partition not in remaining or offset >= remaining[partition]:
                continue
            if offset + 1 >= remaining[partition]:
                del remaining[partition]
            stats.read += 1
            if progress is not None:
                progress.advance(1)
            try:
                record = orjson.loads(message.value() or b"")
                recorded = read_link_record(record)
                seq = recorded.link.seq
                order = (seq is not None, seq or 0, str(record["linked_at"]), partition, offset)
            except (orjson.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError) as exc:
                stats.bad.append(f"{settings.topics.links}[{partition}]@{offset}: {type(exc).__name__}: {exc}")
                continue
            doc_id = recorded.link.doc_id
            kept = latest.get(doc_id)
            if kept is None or kept[0] < order:
                if kept is not None and kept[1].link == recorded.link:
                    # A re-send of the same verdict: it may lack the vector, and a relink's keys.
                    vector = kept[1].vector if recorded.vector is None else recorded.vector
                    keys = kept[1].keys if recorded.keys is None else recorded.keys
                    recorded = replace(recorded, vector=vector, keys=keys)
                latest[doc_id] = (order, recorded)
    finally:
        consumer.close()
    return [recorded for _, recorded in sorted(latest.values(), key=lambda entry: entry[0])]


def replay_links(
    settings: Settings,
    state: StateStore,
    vectors: VectorStore | None,
    progress: Progress | None = None,
) -> KafkaReplayStats:
    """Read `dedup.links` and restore every document's latest link into `state` and `vectors`."""
    stats = KafkaReplayStats()
    records = read_links(settings, stats, progress)
    stats.documents = len(records)
    if progress is not None:
        progress.start("restoring state", len(records))
    for recorded in records:
        if progress is not None:
            progress.advance(1)
        if vectors is None and recorded.vector is not None:
            stats.vectors_skipped += 1
        if restore(recorded, state, vectors):
            stats.restored += 1
        else:
            stats.already_there += 1
    return stats
