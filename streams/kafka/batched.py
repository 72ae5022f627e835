"""Sending a worker's records a record batch per topic partition, with one future each.

faust's `Topic.send` costs tens of microseconds a record (its message objects, callbacks and
producer buffer on top of aiokafka's `send`, itself a future and a buffer lookup a record), and a
worker sends one to three records per document: it was the largest single cost of the streaming
path (docs/benchmarks.md). Here a batch's records are appended to an aiokafka `BatchBuilder` per
topic partition, in order, and each builder is sent whole (`AIOKafkaProducer.send_batch`): the
records still reach the same partitions (the default partitioner, murmur2 of the key, as Java
clients and aiokafka's own `send`), in the same order per key.

A send has a deadline: aiokafka resolves a batch's future only once the broker answers or the
producer's request timeout passes (faust's default: 20 minutes), and a broker that hangs, or a
request lost across its restart, would hold the worker that long. Past the deadline the send
raises, and the worker sends the batch again (a record may then land twice: a verdict sent
again is the same verdict, which readers of the topics expect from any redelivery).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.record.default_records import DefaultRecordBatchBuilder

_PARTITIONER = DefaultPartitioner()


class Record(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes: ...


R = TypeVar("R", bound=Record)


class DeliveryTimeout(RuntimeError):
    """The broker did not acknowledge every record of a send within its deadline."""


async def send_batched(producer: AIOKafkaProducer, records: Sequence[R], max_bytes: int, timeout_s: float) -> list[R]:
    """Send every record and wait until the broker has acknowledged each; the records refused
    as too large (above `max_bytes`, or by the broker) come back. `DeliveryTimeout` when that
    takes more than `timeout_s`; any other failure raises too."""
    try:
        return await asyncio.wait_for(_send(producer, records, max_bytes), timeout_s)
    except TimeoutError:
        raise DeliveryTimeout(f"{len(records)} records not acknowledged within {timeout_s:g} s") from None


async def _send(producer: AIOKafkaProducer, records: Sequence[R], max_bytes: int) -> list[R]:
    refused: list[R] = []
    groups: dict[tuple[str, int], list[R]] = {}
    partitions: dict[str, list[int]] = {}
    # aiokafka's murmur2 is Python (3.6 us a key), and a document's records (its link, its article) share its
    # key: each key is hashed once a send. A topic's partitions are 0 to n - 1, so n decides where a key goes.
    placed: dict[tuple[bytes, int], int] = {}
    for record in records:
        if DefaultRecordBatchBuilder.estimate_size_in_bytes(record.key, record.value, []) > max_bytes:
            refused.append(record)
            continue
        if record.topic not in partitions:
            partitions[record.topic] = sorted(await producer.partitions_for(record.topic))
        every = partitions[record.topic]
        if record.key is None:  # a random partition each
            partition = _PARTITIONER(None, every, every)
        elif (partition := placed.get((record.key, len(every)), -1)) < 0:
            partition = placed[record.key, len(every)] = _PARTITIONER(record.key, every, every)
        groups.setdefault((record.topic, partition), []).append(record)
    sent: list[tuple[asyncio.Future[object], list[R]]] = []
    for (topic, partition), members in groups.items():
        sent.extend(await _submit(producer, topic, partition, members))
    results = await asyncio.gather(*(future for future, _ in sent), return_exceptions=True)
    again: list[R] = []
    for result, (_, members) in zip(results, sent, strict=True):
        if isinstance(result, MessageSizeTooLargeError) and len(members) > 1:
            again.extend(members)  # which record the broker refused: each alone, below
        elif isinstance(result, MessageSizeTooLargeError):
            refused.extend(members)
        elif isinstance(result, BaseException):
            raise result
    for record in again:
        refused.extend(await _send(producer, [record], max_bytes))
    return refused


async def _submit(
    producer: AIOKafkaProducer, topic: str, partition: int, records: list[R]
) -> list[tuple[asyncio.Future[object], list[R]]]:
    """Queue `records` as one or more record batches (a builder holds `producer_max_batch_size`)."""
    futures = []
    batch, members = producer.create_batch(), []
    for record in records:
        if batch.append(key=record.key, value=record.value, timestamp=None) is None:  # full: send it, start anew
            futures.append((await producer.send_batch(batch, topic, partition=partition), members))
            batch, members = producer.create_batch(), []
            batch.append(key=record.key, value=record.value, timestamp=None)  # the first record always fits
        members.append(record)
    futures.append((await producer.send_batch(batch, topic, partition=partition), members))
    return futures
