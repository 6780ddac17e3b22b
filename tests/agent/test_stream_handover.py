"""The stream's hand-over buffer: order, backpressure, end, and cancellation.

``Agent.stream`` hands events from its producer to its consumer without a
scheduling point while the buffer has room (docs/benchmarks.md, "ACP relay,
one message per write"); these tests pin what that must not cost: the bound
still holds, nothing is lost or reordered, and a waiting side can still be
cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import pytest

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.backends import Backend, BackendKind, BackendOutcome, RunContext
from oma_bridge.results import StreamEvent, TokenUsage
from oma_bridge.waiting import Handover as EventHandover

pytestmark = pytest.mark.anyio


def text(n: int) -> StreamEvent:
    return StreamEvent("text", f"{n} ")


async def test_events_come_out_in_order_then_the_end() -> None:
    handover = EventHandover(64)
    for n in range(10):
        await handover.put(text(n))
    handover.close()
    got = [(await handover.get()).data for _ in range(10)]
    assert got == [f"{n} " for n in range(10)]
    with pytest.raises(anyio.EndOfStream):
        await handover.get()


async def test_a_producer_waits_once_the_buffer_is_full() -> None:
    handover = EventHandover(3)
    put = 0

    async def produce() -> None:
        nonlocal put
        for n in range(10):
            await handover.put(text(n))
            put += 1
        handover.close()

    async with anyio.create_task_group() as group:
        group.start_soon(produce)
        await anyio.sleep(0.05)
        # Three buffered and the fourth appended, its put waiting for room.
        assert put == 3
        assert (await handover.get()).data == "0 "
        await anyio.sleep(0.05)
        assert put == 4
        got = ["0 "] + [(await handover.get()).data for _ in range(9)]
    assert got == [f"{n} " for n in range(10)]
    assert put == 10


async def test_buffer_zero_hands_over_one_at_a_time() -> None:
    handover = EventHandover(0)
    put = 0

    async def produce() -> None:
        nonlocal put
        for n in range(3):
            await handover.put(text(n))
            put += 1

    async with anyio.create_task_group() as group:
        group.start_soon(produce)
        await anyio.sleep(0.05)
        assert put == 0  # the first put waits until it is taken
        await handover.get()
        await anyio.sleep(0.05)
        assert put == 1
        await handover.get()
        await handover.get()


async def test_a_waiting_consumer_can_be_cancelled_and_come_back() -> None:
    handover = EventHandover(4)
    with anyio.move_on_after(0.05) as scope:
        await handover.get()
    assert scope.cancelled_caught
    await handover.put(text(1))
    assert (await handover.get()).data == "1 "


async def test_a_waiting_producer_can_be_cancelled() -> None:
    handover = EventHandover(1)
    await handover.put(text(1))
    with anyio.move_on_after(0.05) as scope:
        await handover.put(text(2))  # over the bound: waits
    assert scope.cancelled_caught
    # Its event was appended before it waited: nothing of the run is lost.
    assert [(await handover.get()).data, (await handover.get()).data] == ["1 ", "2 "]


async def test_discard_ends_a_consumer_at_once() -> None:
    handover = EventHandover(8)
    await handover.put(text(1))
    handover.close(discard=True)
    with pytest.raises(anyio.EndOfStream):
        await handover.get()


def test_a_negative_buffer_is_refused() -> None:
    with pytest.raises(ValueError, match="buffer must be >= 0, got -1"):
        EventHandover(-1)


@dataclass(frozen=True, eq=False)
class CountingConfig:
    """A backend that emits ``events`` text events as fast as it can, counting them."""

    events: int
    emitted: list[int] = field(default_factory=lambda: [0])
    kind: BackendKind = "llm"

    def create(self, *, agent_name: str) -> Backend:
        return CountingBackend(self)


class CountingBackend:
    def __init__(self, config: CountingConfig) -> None:
        self.config = config
        self.kind = config.kind

    async def run(self, ctx: RunContext) -> BackendOutcome:
        for n in range(self.config.events):
            await ctx.emit(text(n))
            self.config.emitted[0] += 1
        return BackendOutcome(
            output="".join(f"{n} " for n in range(self.config.events)),
            token_usage=TokenUsage(0, 0),
        )

    async def aclose(self) -> None:
        return None


async def test_agent_stream_keeps_its_bound_and_every_event() -> None:
    config = CountingConfig(events=500)
    agent = Agent(AgentConfig(name="counter", backend=config))
    async with agent, agent.stream("go", buffer=8) as stream:
        first = await stream.__anext__()
        await anyio.sleep(0.05)
        # The consumer holds one; the producer is at most 8 (+1 waiting) ahead.
        assert config.emitted[0] <= 1 + 8
        rest = [event async for event in stream]
    texts = [first.data] + [event.data for event in rest if event.type == "text"]
    assert texts == [f"{n} " for n in range(500)]
    assert rest[-1].type == "done"
    assert stream.result is not None and stream.result.output == "".join(texts)


async def test_leaving_a_stream_early_stops_its_producer() -> None:
    config = CountingConfig(events=10_000)
    async with Agent(AgentConfig(name="counter", backend=config)) as agent:
        async with agent.stream("go", buffer=4) as stream:
            async for _event in stream:
                break
        emitted = config.emitted[0]
        await anyio.sleep(0.05)
        assert config.emitted[0] == emitted < 10_000
        # Left from outside, the run has no result, but the agent is not running it.
        state = agent.state
        assert (state.status, state.error) == ("error", "Run cancelled by caller.")
