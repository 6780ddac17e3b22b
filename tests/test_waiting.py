"""``Signal``: every waiter woken, a cancelled waiter leaves the others waiting."""

from __future__ import annotations

import anyio
import pytest

from oma_bridge.waiting import Signal

pytestmark = pytest.mark.anyio


async def test_notify_wakes_every_waiter_and_costs_nothing_without_one() -> None:
    signal = Signal()
    signal.notify()  # nobody waits: nothing to do, nothing kept
    woken: list[int] = []

    async def waiter(n: int) -> None:
        await signal.wait()
        woken.append(n)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            for n in range(3):
                group.start_soon(waiter, n)
            await anyio.wait_all_tasks_blocked()
            signal.notify()
    assert sorted(woken) == [0, 1, 2]


async def test_a_cancelled_waiter_leaves_the_others_waiting() -> None:
    signal = Signal()
    woken: list[str] = []

    async def stays() -> None:
        await signal.wait()
        woken.append("stays")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(stays)
            with anyio.move_on_after(0.05) as scope:
                await signal.wait()
            assert scope.cancelled_caught
            await anyio.sleep(0.05)
            assert woken == []  # the other waiter was not woken by the cancel
            signal.notify()
    assert woken == ["stays"]
