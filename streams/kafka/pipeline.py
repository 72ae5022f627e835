"""A worker agent's batches: taken as the decider frees up, decided one at a time, each sent while
the next is decided, and acknowledged (committed) in order once everything it produced is.

Batching is natural: records wait in `pending` while a batch is decided, and the next batch is
whatever is pending when the decider is free (at most `size`), so a batch is larger under load
and a record at low load waits for no timer. `within` > 0 makes an idle decider wait up to that
long for a full batch first (the older fixed window: fewer, larger batches at low load).

One batch's outputs are in flight while the next one is decided, never more: batch N+1 is sent
only once every output of batch N is acknowledged, so the outputs of a document leave in the
order of its records, and N's records are acknowledged (so their offsets may be committed) only
after that. A batch whose outputs fail to send is decided again and sent again, after a pause,
until it goes; decisions are idempotent, so it sends the same verdicts. Only one decision runs at
a time, the retried one included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Out = TypeVar("Out")

RETRY_PAUSE_S = (0.5, 1.0, 2.0, 5.0)


class BatchPipeline(Generic[T, Out]):
    """Feed records with `put`; `run` decides (`decide`, retried until it succeeds), sends (`send`) and
    acknowledges (`ack`) them in batches. `failed(error)` and `succeeded()` report a batch's attempts."""

    def __init__(
        self,
        decide: Callable[[list[T]], Awaitable[Out]],
        send: Callable[[Out], Awaitable[None]],
        ack: Callable[[list[T]], Awaitable[None]],
        size: int,
        within: float = 0.0,
        failed: Callable[[list[T], BaseException, float], None] | None = None,
        succeeded: Callable[[], None] | None = None,
        pauses: tuple[float, ...] = RETRY_PAUSE_S,
    ) -> None:
        self._decide, self._send, self._ack = decide, send, ack
        self._size, self._within = size, within
        self._failed, self._succeeded = failed, succeeded
        self._pauses = pauses
        self._pending: list[T] = []
        self._arrived = asyncio.Event()  # something is pending
        self._full = asyncio.Event()  # a whole batch is pending
        self._room = asyncio.Event()  # fewer than a batch are pending
        self._room.set()
        self._deciding = asyncio.Lock()  # one decision at a time: a retried batch's too
        self._stopped: BaseException | None = None

    async def put(self, record: T) -> None:
        """Add a record; waits while a whole batch is pending already (the broker's side buffers the rest)."""
        while len(self._pending) >= self._size and self._stopped is None:
            self._room.clear()
            await self._room.wait()
        if self._stopped is not None:
            raise RuntimeError("the batch pipeline stopped") from self._stopped
        self._pending.append(record)
        self._arrived.set()
        if len(self._pending) >= self._size:
            self._full.set()

    async def run(self) -> None:
        """Take, decide and hand over batches until cancelled; never returns."""
        delivering: asyncio.Task[None] | None = None
        try:
            while True:
                batch = await self._take()
                outputs = await self._decided(batch)
                if delivering is not None:
                    await delivering  # the previous batch acknowledged before this one is sent
                delivering = asyncio.create_task(self._deliver(batch, outputs))
        except BaseException as exc:
            self._stopped = exc
            self._room.set()
            if delivering is not None:
                delivering.cancel()
            raise

    async def _take(self) -> list[T]:
        await self._arrived.wait()
        if self._within > 0 and len(self._pending) < self._size:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self._within)
        batch, self._pending = self._pending[: self._size], self._pending[self._size :]
        if len(self._pending) < self._size:
            self._full.clear()
            self._room.set()
        if not self._pending:
            self._arrived.clear()
        return batch

    async def _decided(self, batch: list[T]) -> Out:
        attempt = 0
        while True:
            try:
                async with self._deciding:
                    return await self._decide(batch)
            except Exception as exc:  # a store or model failure: decide the batch again, never skip it
                attempt = await self._pause(batch, exc, attempt)

    async def _deliver(self, batch: list[T], outputs: Out) -> None:
        attempt = 0
        while True:
            try:
                await self._send(outputs)
                break
            except Exception as exc:  # a broker failure: decide again and send again, never skip it
                attempt = await self._pause(batch, exc, attempt)
                outputs = await self._decided(batch)
        if self._succeeded is not None:
            self._succeeded()
        await self._ack(batch)

    async def _pause(self, batch: list[T], exc: Exception, attempt: int) -> int:
        pause = self._pauses[min(attempt, len(self._pauses) - 1)]
        if self._failed is not None:
            self._failed(batch, exc, pause)
        await asyncio.sleep(pause)
        return attempt + 1
