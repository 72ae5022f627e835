"""`BatchPipeline`, the worker agents' batching (streams/kafka/pipeline.py), on a real event loop with
deciders and senders that record what they were given and when, and can be held: batches are what
arrived while the previous one was decided; one batch is sent while the next is decided, never two;
a batch is acknowledged only after its outputs are, in order; a failed batch is decided again, never
while another decision runs. And the worker's app leaves its start-up objects out of the collector."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from streams.config import Settings
from streams.kafka.pipeline import BatchPipeline
from streams.service.app import build_app
from streams.service.resources import Resources
from streams.service.stages import Agent


class Recorder:
    """A decider, sender and acknowledger that log each step; `hold(step)` keeps that step waiting
    until `release(step)`; `fail_sends` sends fail before one goes."""

    def __init__(self, fail_sends: int = 0) -> None:
        self.log: list[tuple[str, tuple[int, ...]]] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.deciding = 0
        self.most_deciding = 0
        self.fail_sends = fail_sends

    def hold(self, step: str) -> None:
        self.gates[step] = asyncio.Event()

    def release(self, step: str) -> None:
        self.gates[step].set()

    async def _gate(self, step: str) -> None:
        if step in self.gates:
            await self.gates[step].wait()

    async def decide(self, batch: list[int]) -> tuple[int, ...]:
        self.deciding += 1
        self.most_deciding = max(self.most_deciding, self.deciding)
        try:
            self.log.append(("decide", tuple(batch)))
            await self._gate(f"decide {batch[0]}")
            return tuple(batch)
        finally:
            self.deciding -= 1

    async def send(self, outputs: tuple[int, ...]) -> None:
        self.log.append(("send", outputs))
        await self._gate(f"send {outputs[0]}")
        if self.fail_sends:
            self.fail_sends -= 1
            raise ConnectionError("broker away")
        self.log.append(("sent", outputs))

    async def ack(self, batch: list[int]) -> None:
        self.log.append(("ack", tuple(batch)))

    def pipeline(self, size: int, within: float = 0.0) -> BatchPipeline[int, tuple[int, ...]]:
        return BatchPipeline(self.decide, self.send, self.ack, size, within, pauses=(0.0,))

    def steps(self, kind: str) -> list[tuple[int, ...]]:
        return [batch for step, batch in self.log if step == kind]


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def _run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 30))


async def _with(pipeline: BatchPipeline[Any, Any], body: Callable[[], Awaitable[None]]) -> None:
    runner = asyncio.create_task(pipeline.run())
    try:
        await body()
    finally:
        runner.cancel()


def test_a_batch_is_what_arrived_while_the_previous_was_decided() -> None:
    recorder = Recorder()
    pipeline = recorder.pipeline(size=256)

    async def body() -> None:
        recorder.hold("decide 0")
        await pipeline.put(0)
        await _until(lambda: recorder.steps("decide") == [(0,)])  # taken at once: no timer to wait out
        for n in range(1, 11):
            await pipeline.put(n)
        recorder.release("decide 0")
        await _until(lambda: len(recorder.steps("ack")) == 2)

    _run(lambda: _with(pipeline, body))
    assert recorder.steps("decide") == [(0,), tuple(range(1, 11))]


def test_a_batch_holds_at_most_size_records_and_put_waits_for_room() -> None:
    recorder = Recorder()
    pipeline = recorder.pipeline(size=4)

    async def body() -> None:
        recorder.hold("decide 0")
        await pipeline.put(0)
        await _until(lambda: recorder.steps("decide") == [(0,)])
        feeder = asyncio.create_task(_put_all(pipeline, range(1, 10)))
        await _until(lambda: len(pipeline._pending) == 4)
        for _ in range(100):
            await asyncio.sleep(0)
        assert not feeder.done(), "put took a fifth record while a whole batch was pending"
        recorder.release("decide 0")
        await feeder
        await _until(lambda: sum(map(len, recorder.steps("ack"))) == 10)

    _run(lambda: _with(pipeline, body))
    assert [len(batch) for batch in recorder.steps("decide")] == [1, 4, 4, 1]
    assert [n for batch in recorder.steps("ack") for n in batch] == list(range(10))


async def _put_all(pipeline: BatchPipeline[int, Any], records: range) -> None:
    for record in records:
        await pipeline.put(record)


def test_the_next_batch_is_decided_while_the_previous_is_sent_and_acked_only_after() -> None:
    recorder = Recorder()
    pipeline = recorder.pipeline(size=256)

    async def body() -> None:
        recorder.hold("send 0")
        await pipeline.put(0)
        await _until(lambda: recorder.steps("send") == [(0,)])
        await pipeline.put(1)
        await _until(lambda: recorder.steps("decide") == [(0,), (1,)])
        await pipeline.put(2)
        for _ in range(100):
            await asyncio.sleep(0)
        # batch 1 is decided while batch 0 is in flight, but neither sent nor acknowledged before it,
        # and batch 2 waits: one batch in flight and one decided, never more
        assert recorder.steps("send") == [(0,)]
        assert recorder.steps("ack") == []
        assert recorder.steps("decide") == [(0,), (1,)]
        recorder.release("send 0")
        await _until(lambda: len(recorder.steps("ack")) == 3)

    _run(lambda: _with(pipeline, body))
    order = [(step, batch) for step, batch in recorder.log if step != "send"]
    assert order.index(("sent", (0,))) < order.index(("ack", (0,))) < order.index(("sent", (1,)))
    assert order.index(("sent", (1,))) < order.index(("ack", (1,))) < order.index(("sent", (2,)))
    assert recorder.steps("ack") == [(0,), (1,), (2,)]


def test_a_batch_that_fails_to_send_is_decided_and_sent_again_before_it_is_acked() -> None:
    recorder = Recorder(fail_sends=2)
    pipeline = recorder.pipeline(size=256)

    async def body() -> None:
        recorder.hold("send 0")
        await pipeline.put(0)
        await _until(lambda: recorder.steps("send") == [(0,)])
        await pipeline.put(1)
        await _until(lambda: (1,) in recorder.steps("decide"))
        recorder.release("send 0")  # fails twice, then goes
        await _until(lambda: len(recorder.steps("ack")) == 2)

    _run(lambda: _with(pipeline, body))
    assert recorder.steps("decide") == [(0,), (1,), (0,), (0,)]
    assert recorder.steps("sent") == [(0,), (1,)]
    assert recorder.steps("ack") == [(0,), (1,)]
    assert recorder.most_deciding == 1


def test_with_a_window_an_idle_decider_waits_for_a_whole_batch() -> None:
    recorder = Recorder()
    pipeline = recorder.pipeline(size=3, within=60.0)

    async def body() -> None:
        for n in range(3):
            await pipeline.put(n)
            for _ in range(20):
                await asyncio.sleep(0)
        await _until(lambda: len(recorder.steps("ack")) == 1)  # taken when full, not after 60 s

    _run(lambda: _with(pipeline, body))
    assert recorder.steps("decide") == [(0, 1, 2)]


def test_the_worker_app_freezes_what_start_up_made(kafka_bootstrap: str, redis_url: str) -> None:
    """A full collection walks every object the collector tracks: with the worker's start-up heap
    (modules, compiled kernels, the featurizer's tables) that took 115 to 125 ms, every few seconds,
    and a batch waiting behind it was late by as much. Frozen, those objects are left out."""
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        redis_url=redis_url,
        redis_prefix=f"freeze-{uuid.uuid4().hex[:8]}:",
        stages=["url", "content", "simhash"],
    )
    resources = Resources(settings)
    gc.unfreeze()
    try:
        build_app(settings, [Agent.EXACT, Agent.SIMHASH], resources)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        resources.close()


def test_the_worker_app_keeps_no_per_message_statistics_of_its_own(kafka_bootstrap: str, redis_url: str) -> None:
    """faust registers its `Monitor` among the app's sensors at boot, and every message then passes it four
    times (received, into the stream, out of it, acknowledged) for statistics that only faust's debug pages
    show; the worker's metrics are Prometheus's. Booted, the worker's sensors leave it out."""
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        redis_url=redis_url,
        redis_prefix=f"monitor-{uuid.uuid4().hex[:8]}:",
        stages=["url", "content", "simhash"],
    )
    resources = Resources(settings)
    try:
        app, _ = build_app(settings, [Agent.EXACT, Agent.SIMHASH], resources)
        app.on_init_dependencies()  # what the app does at boot: faust registers its sensors here
        assert app.monitor not in set(app.sensors)
    finally:
        gc.unfreeze()
        resources.close()
