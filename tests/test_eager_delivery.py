"""The worker consumer's `wait_first` (`streams.kafka.eager`): faust delivers every fetched record through it,
racing the delivery against a suspended flow. A delivery that completes at once takes no task; one that waits
races as mode races it, and gives way to the flow being suspended as before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams.kafka.eager import EagerFirst


def _run(body: Any) -> Any:
    return asyncio.run(body())


def test_a_delivery_that_completes_at_once_runs_in_the_callers_task_and_closes_the_others() -> None:
    async def body() -> tuple[bool, Any, bool]:
        service = EagerFirst()
        suspended = asyncio.Event()
        ran_in: list[asyncio.Task[Any] | None] = []

        async def deliver() -> str:
            ran_in.append(asyncio.current_task())
            return "delivered"

        other = suspended.wait()
        result = await service.wait_first(deliver(), other)
        return ran_in == [asyncio.current_task()], result[1:], other.cr_frame is None

    same_task, (results, stopped), other_closed = _run(body)
    assert same_task, "the delivery ran in a task of its own"
    assert results == ["delivered"] and not stopped
    assert other_closed, "the coroutine that lost the race was left unclosed"


def test_a_delivery_that_waits_gives_way_to_a_suspended_flow() -> None:
    """A delivery blocked on a full stream buffer is cancelled once the flow is suspended (a rebalance)."""

    async def body() -> tuple[list[str], bool]:
        service = EagerFirst()
        suspended = asyncio.Event()
        never = asyncio.get_running_loop().create_future()  # a buffer that never has room
        seen: list[str] = []

        async def deliver() -> None:
            try:
                await never
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        asyncio.get_running_loop().call_later(0.05, suspended.set)
        waited = suspended.wait()
        result = await asyncio.wait_for(service.wait_first(deliver(), waited), 5)
        return seen, result.done == [waited]

    seen, suspension_won = _run(body)
    assert seen == ["cancelled"]
    assert suspension_won


def test_a_delivery_that_waits_completes_with_what_it_waited_for() -> None:
    async def body() -> Any:
        service = EagerFirst()
        loop = asyncio.get_running_loop()
        room, failed = loop.create_future(), loop.create_future()
        loop.call_later(0.02, room.set_result, 7)
        loop.call_later(0.04, failed.set_exception, ValueError("no"))

        async def deliver() -> tuple[int, str]:
            await asyncio.sleep(0)  # a bare yield on the way
            value = await room
            try:
                await failed
            except ValueError as exc:
                return value, str(exc)
            return value, "not raised"

        first = deliver()
        result = await service.wait_first(first, asyncio.Event().wait())
        return result.done == [first], result.results

    named_itself, results = _run(body)
    assert named_itself, "the winner is not the coroutine the caller gave"
    assert results == [(7, "no")]


@pytest.mark.parametrize("waits", [False, True])
def test_a_delivery_that_fails_raises_its_error(waits: bool) -> None:
    async def body() -> None:
        service = EagerFirst()

        async def deliver() -> None:
            if waits:
                await asyncio.sleep(0.01)
            raise LookupError("bad record")

        await service.wait_first(deliver(), asyncio.Event().wait())

    with pytest.raises(LookupError, match="bad record"):
        _run(body)
