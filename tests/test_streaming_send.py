"""`send_batched` on a real broker: every record where a per-record send puts it, in order;
records too large come back, whoever refuses them, and the rest of their batch still lands."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams.evaluation.services import LocalKafka
from streams.kafka.batched import DeliveryTimeout, send_batched

PARTITIONS = 4
T = TypeVar("T")


@dataclass(frozen=True)
class Out:
    topic: str
    key: bytes | None
    value: bytes


def _topics(bootstrap: str, *configs: dict[str, str]) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"send-{uuid.uuid4().hex[:8]}" for _ in configs]
    futures = admin.create_topics([NewTopic(n, PARTITIONS, 1, config=c) for n, c in zip(names, configs, strict=True)])
    for future in futures.values():
        future.result(30)
    return names


def _read(bootstrap: str, topic: str, count: int) -> dict[int, list[tuple[bytes | None, bytes]]]:
    """(key, value) of every record by partition, once `count` have arrived."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    found: dict[int, list[tuple[bytes | None, bytes]]] = defaultdict(list)
    try:
        for _ in range(240):
            if sum(map(len, found.values())) >= count:
                break
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    found[message.partition()].append((message.key(), message.value()))
    finally:
        consumer.close()
    return found


async def _with_producer(
    bootstrap: str, body: Callable[[AIOKafkaProducer], Awaitable[T]], batch_bytes: int, request_timeout_ms: int = 40_000
) -> T:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_batch_size=batch_bytes, request_timeout_ms=request_timeout_ms
    )
    await producer.start()
    try:
        return await body(producer)
    finally:
        await producer.stop()


def test_records_land_where_a_send_each_puts_them_in_order_and_too_large_ones_come_back(kafka_bootstrap: str) -> None:
    links, deduped = _topics(kafka_bootstrap, {}, {})
    records = [Out(links, f"doc-{i % 50}".encode(), b"%d:" % i + b"x" * 300) for i in range(400)]
    records += [Out(deduped, f"doc-{i}".encode(), b"d" * 100) for i in range(30)]
    too_large = Out(links, b"huge", b"h" * 70_000)
    records.insert(200, too_large)

    async def body(producer: AIOKafkaProducer) -> tuple[list[Out], dict[bytes, int]]:
        refused = await send_batched(producer, records, max_bytes=64 * 1024, timeout_s=60)
        # Where aiokafka's own per-record send puts each key: the partition must be the same.
        check = _topics(kafka_bootstrap, {})[0]
        where = {}
        for key in {r.key for r in records if r.topic == links and r is not too_large}:
            assert key is not None
            where[key] = (await producer.send_and_wait(check, b"probe", key=key)).partition
        return refused, where

    refused, where = asyncio.run(_with_producer(kafka_bootstrap, body, batch_bytes=16 * 1024))  # several a partition
    assert refused == [too_large]
    on_links = _read(kafka_bootstrap, links, 400)
    assert sum(map(len, on_links.values())) == 400
    sent_order: dict[bytes | None, list[bytes]] = defaultdict(list)
    for record in records:
        if record.topic == links and record is not too_large:
            sent_order[record.key].append(record.value)
    got_order: dict[bytes | None, list[bytes]] = defaultdict(list)
    for partition, items in on_links.items():
        for key, value in items:
            assert where[key] == partition, key
            got_order[key].append(value)
    assert got_order == sent_order  # every record, once, in the order sent per key
    assert sum(map(len, _read(kafka_bootstrap, deduped, 30).values())) == 30


def test_a_batch_the_broker_refuses_as_too_large_is_sent_again_record_by_record(kafka_bootstrap: str) -> None:
    (small,) = _topics(kafka_bootstrap, {"max.message.bytes": "20000"})
    fits = [Out(small, b"same-key", b"%d:" % i + b"s" * 3000) for i in range(12)]  # 36 KB: over, as one batch
    big = Out(small, b"same-key", b"b" * 30_000)  # over the topic's limit whatever the batch
    records = [*fits[:6], big, *fits[6:]]

    async def body(producer: AIOKafkaProducer) -> list[Out]:
        return await send_batched(producer, records, max_bytes=1 << 20, timeout_s=60)

    refused = asyncio.run(_with_producer(kafka_bootstrap, body, batch_bytes=256 * 1024))
    assert refused == [big]
    landed = [value for items in _read(kafka_bootstrap, small, len(fits)).values() for _, value in items]
    assert landed == [r.value for r in fits]


def test_a_broker_that_stops_answering_fails_the_send_within_its_deadline_and_it_resumes(tmp_path: Path) -> None:
    """A SIGSTOPped broker keeps its connections open and answers nothing: aiokafka would wait for its
    request timeout (faust's default: 20 minutes) with the batch's futures unresolved, and the worker with
    them. `send_batched` gives up at its deadline, so the caller retries the batch; once the broker is
    back, the same producer delivers."""
    broker = LocalKafka(tmp_path / "kafka")
    broker.start()
    try:
        (topic,) = _topics(broker.bootstrap, {})
        records = [Out(topic, f"doc-{i}".encode(), b"%d" % i) for i in range(50)]

        async def body(producer: AIOKafkaProducer) -> None:
            await send_batched(producer, records[:10], max_bytes=1 << 20, timeout_s=30)  # metadata in hand
            broker.pause()
            try:
                with pytest.raises(DeliveryTimeout, match="not acknowledged within 2"):
                    await asyncio.wait_for(send_batched(producer, records[10:], max_bytes=1 << 20, timeout_s=2), 120)
            finally:
                broker.resume()
            assert await send_batched(producer, records[10:], max_bytes=1 << 20, timeout_s=60) == []

        asyncio.run(_with_producer(broker.bootstrap, body, batch_bytes=16 * 1024, request_timeout_ms=1_200_000))
        landed = {value for items in _read(broker.bootstrap, topic, 50).values() for _, value in items}
        assert landed == {r.value for r in records}  # every record, some maybe twice (sent again after the deadline)
    finally:
        broker.stop()


def test_a_key_sent_to_topics_of_different_partition_counts_lands_where_each_topics_count_puts_it(
    kafka_bootstrap: str,
) -> None:
    """A send hashes each key once for all of its records: the partition must still be each topic's own."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    names = {count: f"send-{count}-{uuid.uuid4().hex[:8]}" for count in (4, 3)}
    for future in admin.create_topics([NewTopic(name, count, 1) for count, name in names.items()]).values():
        future.result(30)
    keys = [f"doc-{i}".encode() for i in range(40)]
    records = [Out(name, key, b"v") for key in keys for name in names.values()]

    async def body(producer: AIOKafkaProducer) -> dict[tuple[str, bytes], int]:
        assert await send_batched(producer, records, max_bytes=64 * 1024, timeout_s=60) == []
        expected = {}
        for name in names.values():
            for key in keys:
                expected[name, key] = (await producer.send_and_wait(name, b"probe", key=key)).partition
        return expected

    expected = asyncio.run(_with_producer(kafka_bootstrap, body, batch_bytes=16 * 1024))
    for count, name in names.items():
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"read-{uuid.uuid4().hex}"})
        consumer.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(count)])
        landed: dict[bytes, set[int]] = defaultdict(set)
        read = 0
        try:
            for _ in range(240):
                if read >= 2 * len(keys):  # each key's record and its probe
                    break
                for message in consumer.consume(500, timeout=0.5):
                    if message.error() is None:
                        landed[message.key()].add(message.partition())
                        read += 1
        finally:
            consumer.close()
        assert {key: parts for key, parts in landed.items()} == {key: {expected[name, key]} for key in keys}, name
