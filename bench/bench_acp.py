"""ACP streaming: chunks per second through ``Agent.stream`` against the official SDK's client.

One agent (``tests/agents/acp_chunk_agent.py``, hand-written so it costs
little) answers every prompt with 20,000 ``agent_message_chunk`` updates.  In
the same run, in alternating rounds so a noisy neighbour hits both alike:

* **baseline**: the official Python SDK (``agent-client-protocol``) as the
  client: ``spawn_agent_process`` + ``ClientSideConnection.prompt``, with a
  ``session_update`` callback that counts the chunks;
* **oma-bridge**: ``Agent.stream(prompt)`` with ``AcpConfig``, counting the
  chunks in the ``text`` events the consumer receives (each chunk's text is
  ``chunk <n> ``): with the default one event per chunk, and with
  ``coalesce_text=True`` (the texts of the chunks of one read in one event);
* **diagnostic**: ``AcpBackend.run`` (one event per chunk) with an ``emit``
  that only counts: the ACP layer alone, without the agent's relay.

Each side keeps its agent process and session across rounds (spawn is not
measured).  Reported: chunks per second (median and best round) and the ratio
of oma-bridge's median to the SDK's (target >= 1.2x).

Run: ``.venv/bin/python bench/bench_acp.py [--chunks 20000] [--rounds 7]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import acp
import anyio
from _util import machine, print_table

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.backends import RunContext
from oma_bridge.backends.acp import AcpBackend, AcpConfig
from oma_bridge.messages import text_message
from oma_bridge.results import StreamEvent

AGENT = Path(__file__).resolve().parent.parent / "tests" / "agents" / "acp_chunk_agent.py"


class CountingClient:
    """The least an SDK client can do: count the text chunks."""

    def __init__(self) -> None:
        self.chunks = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.chunks += 1

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise acp.RequestError.method_not_found("session/request_permission")

    def on_connect(self, conn: Any) -> None:
        pass


async def main(chunks: int, rounds: int) -> None:
    prompt = f"go {chunks}"
    client = CountingClient()
    config = AcpConfig(command=sys.executable, args=(str(AGENT),), fs="none")
    coalescing = config.model_copy(update={"coalesce_text": True})
    agent = Agent(AgentConfig(name="bench", backend=config))
    coalescing_agent = Agent(AgentConfig(name="bench", backend=coalescing))
    backend = AcpBackend(config, agent_name="bench")
    async with acp.spawn_agent_process(client, sys.executable, str(AGENT)) as (conn, _process):
        await conn.initialize(protocol_version=1)
        session = await conn.new_session(cwd=str(Path.cwd()), mcp_servers=[])

        async def sdk_turn() -> None:
            client.chunks = 0
            await conn.prompt(session_id=session.session_id, prompt=[acp.text_block(prompt)])
            assert client.chunks == chunks, client.chunks

        def bridge_turn(agent: Agent) -> Callable[[], Awaitable[None]]:
            async def turn() -> None:
                received = 0
                async for event in agent.stream(prompt):
                    if event.type == "text":
                        received += event.data.count("chunk ")
                    elif event.type == "done":
                        assert event.data.success, event.data.output
                assert received == chunks, received

            return turn

        async def backend_turn() -> None:
            received = 0

            async def count(event: StreamEvent) -> None:
                nonlocal received
                if event.type == "text":
                    received += event.data.count("chunk ")

            await backend.run(RunContext("bench", "bench", [text_message(prompt)], None, count))
            assert received == chunks, received

        contenders: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("baseline: official Python SDK client (agent-client-protocol)", sdk_turn),
            ("oma-bridge: Agent.stream (one event per chunk)", bridge_turn(agent)),
            ("oma-bridge: Agent.stream, coalesce_text=True", bridge_turn(coalescing_agent)),
            ("diagnostic: AcpBackend.run, counting emit", backend_turn),
        ]
        try:
            for _, turn in contenders:
                await turn()  # warm-up: spawn, imports, first allocations
            samples: list[list[float]] = [[] for _ in contenders]
            for _ in range(rounds):
                for (_, turn), out in zip(contenders, samples, strict=True):
                    start = time.perf_counter()
                    await turn()
                    out.append(chunks / (time.perf_counter() - start))
        finally:
            await agent.close()
            await coalescing_agent.close()
            await backend.aclose()
    baseline = statistics.median(samples[0])
    rows = []
    for (name, _), out in zip(contenders, samples, strict=True):
        median = statistics.median(out)
        rows.append([name, f"{median:,.0f}", f"{max(out):,.0f}", f"{median / baseline:.2f}x"])
    print(f"{machine()}; {rounds} rounds of one turn with {chunks:,} agent_message_chunk updates")
    print()
    print_table(["contender", "median chunks/s", "best chunks/s", "ratio"], rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    arguments = parser.parse_args()
    anyio.run(main, arguments.chunks, arguments.rounds)
