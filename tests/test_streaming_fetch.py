"""The floor under a consumer's empty fetches (`streams.kafka.fetch`), on a real broker: an idle
consumer sends a fetch at most every `floor` seconds, whether or not the broker holds empty fetches
as Kafka does, and records still arrive."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic

from streams.evaluation.stack import Stack
from streams.kafka.fetch import FETCHES, pace_empty_fetches


def _fetches(result: str) -> float:
    return FETCHES.labels(result)._value.get()


def _topic(bootstrap: str) -> str:
    name = f"fetch-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 4, 1)])[name].result(30)
    return name


def test_an_idle_consumer_fetches_at_most_once_a_floor(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    floor_s, idle_s = 0.05, 1.0

    async def body() -> tuple[float, float, list[bytes]]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            pace_empty_fetches(consumer._fetcher, floor_s)
            before = _fetches("empty")
            await consumer.getmany(timeout_ms=int(idle_s * 1000))  # nothing there: the fetch loop idles
            idle = _fetches("empty") - before
            async with AIOKafkaProducer(bootstrap_servers=kafka_bootstrap) as producer:
                for n in range(3):
                    await producer.send_and_wait(topic, b"%d" % n, key=b"k")
            got: list[bytes] = []
            with_records = _fetches("records")
            for _ in range(100):
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(record.value for record in records)
                if len(got) == 3:
                    break
            return idle, _fetches("records") - with_records, got
        finally:
            await consumer.stop()

    idle, fetched, got = asyncio.run(body())
    # unpaced, an idle aiokafka consumer asked noida-db about 9,000 times a second
    assert idle <= idle_s / floor_s + 5, f"{idle:.0f} empty fetches in {idle_s} s with a floor of {floor_s} s"
    assert got == [b"0", b"1", b"2"]
    assert fetched >= 1


def test_an_idle_worker_paces_its_fetches(make_stack: Callable[[str], Stack]) -> None:
    stack = make_stack("url,content,simhash")
    stack.extra_env["DEDUP_WORKER__FETCH_FLOOR_S"] = "0.05"
    stack.create_topics()
    worker = stack.start_worker()

    def empty() -> float:
        found = re.search(r'^dedup_fetches_total\{result="empty"\} (\S+)$', worker.metrics(), re.M)
        assert found is not None, "the worker reports no dedup_fetches_total"
        return float(found.group(1))

    before, started = empty(), time.monotonic()
    time.sleep(2)
    idle, took = empty() - before, time.monotonic() - started
    assert idle <= took / 0.05 + 10, f"{idle:.0f} empty fetches in {took:.1f} s idle"
