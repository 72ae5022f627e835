"""`dedup publish`: raw articles from JSONL files to `articles.raw`, for crawlers and tests.

Lines are sent as they are, bad ones included: the workers reject those to
`articles.rejected` with a reason, so nothing is dropped on the way in. A line
the broker cannot take (above `max_record_bytes`, or larger than the broker
accepts) is rejected here the same way, and every other line is still sent. A
line that is a JSON object with an `id` is keyed by it, so redeliveries of one
document land in one partition, in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from streams.config import Settings
from streams.kafka.topics import CommandClient, message_limits
from streams.records.stage import rejected_record
from streams.runner.interrupts import Interrupts
from streams.runner.jsonl import InputLine, read_lines

SEND_TIMEOUT_S = 30
"""How long a record may wait for the broker (librdkafka's `message.timeout.ms`) before it counts as failed: a
broker gone mid-publish ends the command within about this, never hangs it."""


@dataclass
class PublishStats:
    lines: int = 0
    """Non-blank lines read."""
    sent: int = 0
    acknowledged: int = 0
    rejected: list[str] = field(default_factory=list)
    """`source:line: reason` of each line sent to the rejected topic instead of the raw one."""
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
    interrupts = Interrupts()
    """Ctrl-C is held while librdkafka runs (it runs the delivery callbacks), and stops publishing between calls."""
    with interrupts.installed():
        return _publish(settings, sources, on_bytes, interrupts)


def _publish(
    settings: Settings, sources: list[str], on_bytes: Callable[[int], None] | None, interrupts: Interrupts
) -> PublishStats:
    client = CommandClient(settings)
    limit = settings.worker.max_message_bytes
    common = {
        "enable.idempotence": True,
        "acks": "all",
        "message.max.bytes": limit,
        "message.timeout.ms": SEND_TIMEOUT_S * 1000,
    }
    producer = Producer(client.config(**common, **{"linger.ms": 20}))
    metadata = client.reach(producer)
    for topic in (settings.topics.raw, settings.topics.rejected):
        if topic not in metadata.topics:  # the broker would create it with its own defaults (one partition)
            raise RuntimeError(f"topic {topic} does not exist on the broker: run `dedup topics create` first")
    rejections = settings.topics.rejected
    # A rejection is cut to fit where it goes: a rejected topic that accepts less than the worker's limit would
    # refuse one cut to that limit, and the line it stands for would reach neither topic.
    fits = min(limit, message_limits(settings, [rejections]).get(rejections, limit))
    stats = PublishStats()
    alone: list[tuple[InputLine, bytes | None]] = []
    """Lines the broker refused with a batch that held a record too large for it: sent again one by one."""

    def reject(line: InputLine, key: bytes | None, reason: str) -> None:
        stats.rejected.append(f"{line.source}:{line.line_no}: {reason}")
        value = rejected_record(reason, line.raw, {"source": line.source, "line": line.line_no}, max_bytes=fits)
        _produce(producer, rejections, value, key, rejection_delivered, interrupts)

    def rejection_delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            stats.failed.append(f"a rejection to {rejections}: {error.str()}")

    def delivery(line: InputLine, key: bytes | None) -> Callable[[KafkaError | None, Message], None]:
        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                stats.acknowledged += 1
            elif error.code() == KafkaError.MSG_SIZE_TOO_LARGE:  # the broker's limit is below ours, or a batch's
                alone.append((line, key))
            else:
                stats.failed.append(f"{line.source}:{line.line_no}: {error.str()}")

        return delivered

    try:
        for line in read_lines(sources, settings.max_record_bytes):
            stats.lines += 1
            if on_bytes is not None:
                on_bytes(line.consumed)
            if line.size > settings.max_record_bytes:
                reject(line, None, f"record is {line.size:,} bytes, above the limit of {settings.max_record_bytes:,}")
                continue
            key = record_key(line.raw)
            try:
                _produce(producer, settings.topics.raw, line.raw, key, delivery(line, key), interrupts)
            except KafkaException as exc:
                if _fatal(exc.args[0]):
                    raise
                if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                    raise RuntimeError(f"{line.source}:{line.line_no}: {exc.args[0].str()}") from None
                reject(line, key, f"record is {line.size:,} bytes, above what the broker accepts ({limit:,})")
                continue
            stats.sent += 1
            with interrupts:
                producer.poll(0)
            if stats.failed:  # the broker is gone or refuses: stop here, said in one line, not after every line
                break
        remaining = _flush(producer, 0 if stats.failed else SEND_TIMEOUT_S, interrupts)  # failed: not waited for
        if remaining:
            stats.failed.append(f"{remaining} records still unacknowledged after {SEND_TIMEOUT_S} s")
        if alone:
            _send_alone(client, common, settings.topics.raw, alone, stats, reject, interrupts)
            _flush(producer, SEND_TIMEOUT_S, interrupts)  # the rejections of those refused alone too
    except KafkaException as exc:  # produce, poll and flush raise it: one line, never a traceback
        error: KafkaError = exc.args[0]
        if _fatal(error):
            raise RuntimeError(_refused(settings, client, error, stats)) from None
        raise RuntimeError(f"the Kafka producer failed: {error.str()}") from None
    return stats


def _fatal(error: KafkaError) -> bool:
    return bool(error.fatal()) or error.code() == KafkaError._FATAL


def _refused(settings: Settings, client: CommandClient, error: KafkaError, stats: PublishStats) -> str:
    """Why the producer stopped for good, in one line: librdkafka's fatal error (an idempotent producer whose
    sequence the broker lost track of: a broker restarted without that state), not a line of the input."""
    fatal = error if error.fatal() else next((e for e in client.errors if e.fatal()), error)
    return (
        f"the Kafka broker at {settings.kafka_bootstrap} refused the producer for good after {stats.acknowledged:,}"
        f" of the {stats.lines:,} lines read were acknowledged ({fatal.str()}); run `dedup publish` again: it"
        " sends every line again, and the workers take those already sent as redeliveries"
    )


def _send_alone(
    client: CommandClient,
    config: dict[str, object],
    topic: str,
    lines: list[tuple[InputLine, bytes | None]],
    stats: PublishStats,
    reject: Callable[[InputLine, bytes | None, str], None],
    interrupts: Interrupts,
) -> None:
    """Send each line again in a request of its own: a broker refuses a whole batch for one record above its
    limit, and the valid lines batched with it must still reach the topic; only one refused alone is rejected."""
    producer = Producer(client.config(**config, **{"linger.ms": 0, "batch.num.messages": 1}))
    for line, key in lines:
        refused: list[KafkaError] = []

        def delivered(error: KafkaError | None, message: Message, refused: list[KafkaError] = refused) -> None:
            if error is not None:
                refused.append(error)

        _produce(producer, topic, line.raw, key, delivered, interrupts)
        _flush(producer, SEND_TIMEOUT_S, interrupts)
        if not refused:
            stats.acknowledged += 1
        elif refused[0].code() == KafkaError.MSG_SIZE_TOO_LARGE:
            reject(line, key, f"record is {line.size:,} bytes, more than the broker accepts")
        else:
            stats.failed.append(f"{line.source}:{line.line_no}: {refused[0].str()}")


def _flush(producer: Producer, timeout_s: float, interrupts: Interrupts) -> int:
    """`producer.flush(timeout_s)` in steps of 0.2 s, Ctrl-C held during each: how many records are left."""
    deadline = time.monotonic() + timeout_s
    while True:
        with interrupts:
            left = int(producer.flush(max(0.0, min(0.2, deadline - time.monotonic()))))
        if not left or time.monotonic() >= deadline:
            return left


def _produce(
    producer: Producer,
    topic: str,
    value: bytes,
    key: bytes | None,
    on_delivery: Callable[[KafkaError | None, Message], None],
    interrupts: Interrupts,
) -> None:
    deadline = time.monotonic() + SEND_TIMEOUT_S
    while True:
        try:
            with interrupts:
                producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            with interrupts:
                producer.poll(0.5)
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the broker took nothing for {SEND_TIMEOUT_S} s (gone, or stalled): stopped publishing"
                ) from None
