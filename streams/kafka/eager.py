"""A consumer that hands each fetched record to its streams without four tasks a record.

faust's fetch loop delivers every record with `await self.wait_first(callback(record),
self.suspend_flow.wait())`: the delivery races the flow being suspended (a rebalance), so that a
delivery blocked on a full stream buffer gives way. mode's `wait_first` makes a task of each
coroutine, two more for the service's stopped and crashed events, and an `asyncio.wait` over the
four: 45 us of the worker's CPU a document, a sixth of all of it (docs/benchmarks.md, streaming),
for deliveries that nearly all complete at once (the buffer has room).

Here the delivery runs first, in the caller's task, until it completes or waits on something. One
that completes (nearly every record) is all there is to it: the others lost the race, and are
closed without having run, as mode cancels the losers. One that waits races the others exactly as
before: what is left of it, driven by `_rest` as a task would drive it, against the others through
mode's `wait_first`. Python 3.12's `asyncio.eager_task_factory` starts every task this way; this
project supports 3.11, and only this one call needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Generator
from typing import Any

from mode import Service
from mode.services import WaitArgT, WaitResults
from mode.utils.times import Seconds


class EagerFirst(Service):
    """A mode service whose `wait_first` runs its first coroutine at once, racing the others only if it waits."""

    async def wait_first(self, *coros: WaitArgT, timeout: Seconds | None = None) -> WaitResults:
        first, *others = coros
        if timeout is not None or not isinstance(first, Coroutine) or self._stopped.is_set() or self._crashed.is_set():
            return await super().wait_first(*coros, timeout=timeout)
        try:
            yielded = first.send(None)
        except StopIteration as done:
            _close(others)
            return WaitResults([first], [done.value], False)
        except BaseException:
            _close(others)
            raise
        rest = _rest(first, yielded)
        result = await super().wait_first(rest, *others, timeout=timeout)
        return result._replace(done=[first if winner is rest else winner for winner in result.done])


async def _rest(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """The rest of `coro`, which has run up to where it yielded `yielded`, driven as an asyncio task drives
    a coroutine: a future it waits on is awaited here (and cancelled with this task), and its outcome
    is then read by `coro` itself, from the future, when it resumes; a bare yield is a turn of the loop."""
    while True:
        if yielded is None:
            await asyncio.sleep(0)
        elif not asyncio.isfuture(yielded):
            raise RuntimeError(f"a coroutine given to wait_first yielded {yielded!r}, not a future")
        else:
            yielded._asyncio_future_blocking = False  # taken over, as a task takes a future its coroutine yields
            # an exception (a cancellation of this task included, which cancels the future) is raised again
            # inside `coro`, which reads the future's outcome when it resumes
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await yielded
        try:
            yielded = coro.send(None)
        except StopIteration as done:
            return done.value


def _close(others: list[WaitArgT]) -> None:
    for other in others:
        if isinstance(other, Coroutine | Generator):
            other.close()
