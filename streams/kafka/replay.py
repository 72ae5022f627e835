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

from dataclasses import dataclass, replace
from typing import Protocol

import orjson

from streams.config import Settings
from streams.core.ports import StateStore, VectorStore
from streams.core.replay import Recorded, ReplayStats, restore
from streams.kafka.journal import read_to_end
from streams.records.output import read_link_record


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


def read_links(settings: Settings, stats: KafkaReplayStats, progress: Progress | None = None) -> list[Recorded]:
    """The latest link of every document, in decision order."""
    latest: dict[str, tuple[tuple[int, int, str, int, int], Recorded]] = {}
    topic = settings.topics.links
    on_total = (lambda total: progress.start(f"reading {topic}", total)) if progress is not None else None
    for message in read_to_end(settings, topic, on_total):
        partition, offset = message.partition(), message.offset()
        stats.read += 1
        if progress is not None:
            progress.advance(1)
        try:
            record = orjson.loads(message.value() or b"")
            recorded = read_link_record(record)
            seq = recorded.link.seq
            order = (seq is not None, seq or 0, str(record["linked_at"]), partition, offset)
        except (orjson.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError) as exc:
            stats.bad.append(f"{topic}[{partition}]@{offset}: {type(exc).__name__}: {exc}")
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
