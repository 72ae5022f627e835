"""`dedup publish`: raw articles from JSONL files to `articles.raw`, for crawlers and tests.

Lines are sent as they are, bad ones included: the workers reject those to
`articles.rejected` with a reason, so nothing is dropped on the way in. A line
that is a JSON object with an `id` is keyed by it, so redeliveries of one
document land in one partition, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from confluent_kafka import KafkaError, Message, Producer

from streams.config import Settings
from streams.runner.jsonl import read_lines


@dataclass
class PublishStats:
    sent: int = 0
    acknowledged: int = 0
    failed: list[str] = field(default_factory=list)


def record_key(raw: bytes) -> bytes | None:
    """The key of a raw line: its `id`, when it is a JSON object with one."""
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    doc_id = record.get("id") if isinstance(record, dict) else None
    return str(doc_id).encode() if isinstance(doc_id, str | int) and not isinstance(doc_id, bool) else None


def publish_files(
    settings: Settings, sources: list[str], on_bytes: Callable[[int], None] | None = None
) -> PublishStats:
    """Produce every non-blank line of `sources` to the raw topic; wait until the broker acknowledged all."""
    producer = Producer({**settings.kafka_client_config(), "enable.idempotence": True, "acks": "all", "linger.ms": 20})
    stats = PublishStats()

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is None:
            stats.acknowledged += 1
        else:
            stats.failed.append(f"offset unknown, key {message.key()!r}: {error.str()}")

    topic = settings.topics.raw
    for line in read_lines(sources, on_bytes):
        while True:
            try:
                producer.produce(topic, value=line.raw, key=record_key(line.raw), on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
        stats.sent += 1
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        stats.failed.append(f"{remaining} records still unacknowledged after 60 s")
    return stats
