"""The turnstile of run events (``server/agents/turnstile.py``, D23).

At most ``per_tick`` callers pass per event-loop iteration, in the order
they came; a caller that finds room passes without waiting; a cancelled
waiter gives its place up; nothing stays scheduled once nobody waits.  An
iteration is observed by a task that checkpoints in a loop: it logs ``"|"``
once per iteration.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from oma_bridge.server.agents.turnstile import PER_TICK, Turnstile

pytestmark = pytest.mark.anyio


async def _passes(turnstile: Turnstile, callers: int, *, turns: int = 1) -> list[str]:
    """The log of ``callers`` tasks passing ``turns`` times each, with ``"|"`` per iteration."""
    log: list[str] = []
    finished = 0
    everyone = anyio.Event()

    async def ticks() -> None:
        while not everyone.is_set():
            log.append("|")
            await anyio.lowlevel.checkpoint()

    async def caller(name: str) -> None:
        nonlocal finished
        for turn in range(turns):
            await turnstile.turn()
            log.append(f"{name}{turn}" if turns > 1 else name)
        finished += 1
        if finished == callers:
            everyone.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticks)
        for index in range(callers):
            tg.start_soon(caller, chr(ord("a") + index))
    return log


def _per_iteration(log: list[str]) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    for item in log:
        if item == "|":
            groups.append([])
        else:
            groups[-1].append(item)
    return [group for group in groups if group]


async def test_at_most_per_tick_pass_in_an_iteration_in_their_order() -> None:
    log = await _passes(Turnstile(3), 10)
    passed = [item for item in log if item != "|"]
    assert passed == list("abcdefghij")  # first come, first through
    assert max(len(group) for group in _per_iteration(log)) == 3


async def test_a_caller_with_room_does_not_wait() -> None:
    turnstile = Turnstile(4)
    with anyio.CancelScope() as scope:
        scope.cancel()  # a checkpoint would raise: passing must not be one
        for _ in range(4):
            await turnstile.turn()
    assert turnstile.waiting == 0


async def test_one_caller_with_many_events_waits_every_per_tick() -> None:
    log = await _passes(Turnstile(2), 1, turns=7)
    groups = _per_iteration(log)
    assert [item for group in groups for item in group] == [f"a{turn}" for turn in range(7)]
    assert max(len(group) for group in groups) == 2


async def test_a_cancelled_waiter_gives_its_place_up() -> None:
    turnstile = Turnstile(1)
    passed: list[str] = []
    scope = anyio.CancelScope()

    async def caller(name: str, within: anyio.CancelScope | None = None) -> None:
        with within or anyio.CancelScope():
            await turnstile.turn()
            passed.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller, "first")  # the iteration's one place
        tg.start_soon(caller, "cancelled", scope)  # waits
        tg.start_soon(caller, "later")  # waits behind it
        await anyio.lowlevel.checkpoint()  # they have all run up to their turn
        assert (passed, turnstile.waiting) == (["first"], 2)
        scope.cancel()
    assert passed == ["first", "later"]
    await anyio.lowlevel.checkpoint()
    await anyio.lowlevel.checkpoint()
    assert turnstile.waiting == 0
    assert not turnstile._ticking  # noqa: SLF001 — nothing left scheduled: an idle daemon pays nothing


def test_per_tick_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Turnstile(0)
    assert PER_TICK >= 1
