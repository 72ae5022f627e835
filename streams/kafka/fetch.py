"""A floor under the interval between a worker's empty fetches.

A consumer asks the broker to hold a fetch until records arrive or `fetch.max.wait.ms` passes
(faust fixes 1.5 s), so an idle aiokafka consumer sends a fetch a partition leader every 1.5 s.
A broker that answers at once instead (noida-db 0.2.3, the tests' and benchmarks' broker, does)
turns aiokafka's fetch loop into a busy loop: about 9,000 empty fetches a second, a whole core of
the worker's consumer thread and a tenth of one of the broker's, and the GIL the agents' threads
need between their Redis round trips (docs/benchmarks.md, streaming). Here a fetch that brings no
records waits out the rest of `floor_s` from when it was sent before the next one goes to that
broker: against a broker that long-polls nothing changes (its empty answers take longer than the
floor), and a record that arrives meanwhile waits at most `floor_s` longer.

faust builds its aiokafka consumer inside its consumer thread, with no setting for this: the
worker's app gets a transport (`PacedTransport`) whose consumer thread wraps the fetcher of the
consumer it starts.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from prometheus_client import Counter

from streams.kafka.eager import EagerFirst

FETCHES = Counter(
    "dedup_fetches", "Fetch requests the worker's consumer sent, by whether records came back.", ["result"]
)
for _result in ("empty", "records"):
    FETCHES.labels(_result)  # both series from the start, at 0


def pace_empty_fetches(fetcher: Any, floor_s: float) -> None:
    """Make `fetcher` (an aiokafka `Fetcher`) wait out `floor_s` after a fetch that added no records."""
    fetch = fetcher._proc_fetch_request  # the one coroutine aiokafka's fetch loop runs per request

    async def paced(assignment: Any, node_id: int, request: Any) -> bool:
        sent = time.monotonic()
        found = await fetch(assignment, node_id, request)
        FETCHES.labels("records" if found else "empty").inc()
        rest = floor_s - (time.monotonic() - sent)
        if not found and rest > 0:
            try:
                await asyncio.sleep(rest)
            except asyncio.CancelledError:  # closed or unassigned meanwhile: as aiokafka's own fetch
                return False
        return found

    fetcher._proc_fetch_request = paced


class PacedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        """faust's consumer, reading committed records only. faust asks for that only in its exactly-once mode;
        otherwise a crawler's aborted transaction (a Kafka Connect source with exactly-once support, a
        transactional producer) was decided: its articles reached the indexers' feed and their verdicts
        `dedup.links`, though they were never written."""
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"  # read when it starts its fetcher, after this
        return consumer

    async def on_start(self) -> None:
        await super().on_start()
        assert self._consumer is not None
        pace_empty_fetches(self._consumer._fetcher, self.transport.fetch_floor_s)  # type: ignore[attr-defined]


class PacedConsumer(EagerFirst, faust_aiokafka.Consumer):
    """faust's aiokafka consumer: its thread's empty fetches paced, committed records only, each record
    delivered eagerly (`streams.kafka.eager`)."""

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return PacedConsumerThread(self, loop=self.loop, beacon=self.beacon)


class PacedTransport(faust_aiokafka.Transport):
    """faust's aiokafka transport, its consumer's empty fetches at least `fetch_floor_s` apart and its records
    delivered to the streams without a task each."""

    Consumer = PacedConsumer

    def __init__(self, *args: Any, fetch_floor_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fetch_floor_s = fetch_floor_s
