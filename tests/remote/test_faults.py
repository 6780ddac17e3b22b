"""Faults between A and B (PROTOCOL §21): a cut, a remote that stops answering, B restarted,
and connections that cannot work.  Driven through A's own protocol (the Python client):
what A's run says, how soon, and that the session goes on afterwards."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from oma_bridge.client import Client, connect

from .conftest import A_SEND_TIMEOUT_S
from .harness import Pair

pytestmark = pytest.mark.anyio


def _turn(output: str) -> int:
    """The demo agent's turn number in its answer (``This is turn N of session ...``)."""
    return int(output.rsplit("This is turn ", 1)[1].split()[0])


async def _b_agents(pair: Pair) -> list[dict[str, Any]]:
    async with connect(socket=pair.b.discovery()["socket"]) as client:
        return list((await client.status())["agents"])


async def _idle(client: Client) -> None:
    """A has no run left in flight (no task of a failed run outlives it)."""
    assert (await client.status())["runs"] == []


async def test_a_cut_and_a_silent_remote_fail_the_turn_and_the_session_goes_on(
    pair: Pair,
) -> None:
    async with connect(socket=pair.a.discovery()["socket"]) as client:
        agent = await client.open("remote")
        first = await agent.run("hello there")
        assert first.success, first
        assert _turn(first.output) == 1

        # The TCP connection is cut mid-turn (B stays up): the run fails at once, saying why.
        async with anyio.create_task_group() as tg:

            async def cut_soon() -> None:
                await anyio.sleep(0.5)
                assert pair.proxy.cut() == 1

            tg.start_soon(cut_soon)
            started = time.monotonic()
            cut = await agent.run("/wait 3")
        assert time.monotonic() - started < 3
        assert cut.status.code == "error"
        assert cut.status.message is not None
        assert cut.status.message.startswith('ACP agent "remote" lost its connection to wss://')
        assert "the connection was cut" in cut.status.message
        await _idle(client)

        # The next run connects again and continues B's session: the same downstream agent,
        # whose cut-off turn was cancelled first (its last words are not this turn's).
        again = await agent.run("again")
        assert again.success, again
        assert again.output.startswith("You said: again\n"), again.output
        assert _turn(again.output) == 3
        [b_agent] = await _b_agents(pair)  # one session on B, continued, not a second one

        # B stops answering (every byte held): found within A's send_timeout_s, never a hang.
        pair.proxy.freeze()
        started = time.monotonic()
        silent = await agent.run("anyone there?")
        waited = time.monotonic() - started
        pair.proxy.thaw()
        assert waited < A_SEND_TIMEOUT_S + 1, waited
        assert silent.status.code == "error"
        assert "no answer to a ping" in str(silent.status.message)
        await _idle(client)
        back = await agent.run("back")
        assert back.success, back
        assert [a["agentId"] for a in await _b_agents(pair)] == [b_agent["agentId"]]

        # agent/close ends the session on B too (session/close), not only the connection.
        await agent.close()
        assert await _b_agents(pair) == []


async def test_b_restarted_idle_and_mid_turn(pair: Pair) -> None:
    async with connect(socket=pair.a.discovery()["socket"]) as client:
        agent = await client.open("remote")
        assert (await agent.run("hello there")).success
        [before] = await _b_agents(pair)

        # Between runs: B's session file brings the session back (§13.4); B's own demo
        # agent cannot continue its session, so B starts a new one and says so: a note,
        # relayed as an update, never part of A's output.
        await anyio.to_thread.run_sync(pair.b.restart)
        events = []
        async with agent.stream("after the restart") as stream:
            async for event in stream:
                events.append(event)
        result = stream.result
        assert result is not None and result.success, result
        assert result.output.startswith("You said: after the restart\n")
        notes = [e for e in events if e.type == "update"]
        assert any("could not be continued" in str(e.data) for e in notes), events
        assert [a["agentId"] for a in await _b_agents(pair)] == [before["agentId"]]

        # Mid-turn: B's SIGTERM closes the connection (1001); the run fails, the next goes on.
        async with anyio.create_task_group() as tg:

            async def restart_soon() -> None:
                await anyio.sleep(0.5)
                await anyio.to_thread.run_sync(pair.b.restart)

            tg.start_soon(restart_soon)
            lost = await agent.run("/wait 20")
        assert lost.status.code == "error"
        assert "closed by the remote: 1001" in str(lost.status.message), lost.status
        await _idle(client)
        later = await agent.run("later")
        assert later.success, later
        assert [a["agentId"] for a in await _b_agents(pair)] == [before["agentId"]]


async def test_connections_that_cannot_work_fail_the_first_run_in_one_line(pair: Pair) -> None:
    expected = {
        "wrong_token": "the remote refused the token: check token_file (HTTP 401 Unauthorized)",
        "no_ca": "cannot verify the remote's TLS certificate by the system's CAs",
        "other_name": "the remote's TLS certificate does not name 127.0.0.2",
        "no_agent": "the remote has no agent at /acp/nope (HTTP 404 Not Found)",
    }
    async with connect(socket=pair.a.discovery()["socket"]) as client:
        for profile, cause in expected.items():
            agent = await client.open(profile)
            started = time.monotonic()
            result = await agent.run("hello")
            assert time.monotonic() - started < 2, profile  # no retry of what cannot pass
            message = str(result.status.message)
            assert result.status.code == "error"
            assert "\n" not in message
            assert message.startswith(f'ACP agent "{profile}" cannot connect to wss://'), message
            assert cause in message, message
            assert pair.token.read_text().strip() not in message
        await _idle(client)
