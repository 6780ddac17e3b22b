"""``session/fork`` on the facade (PROTOCOL §22.4): llm sessions forked by the daemon itself,
acp sessions by an agent that advertises it, and where fork is advertised.

The llm fork is driven by the official Python SDK's client (its
``fork_session``) through the shim; the acp agents are
``tests/agents/acp_ts_agent.mjs`` on the official TypeScript SDK, one with
fork (``OMA_TS_AGENT_FORK``: it keeps its sessions in a folder, so another
process of it resumes the fork, as real agents do) and one without.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.npm_peers import require_node

from .harness import AGENTS, Facade, RawClient, facade_daemon, run_sdk_client, text

pytestmark = pytest.mark.anyio

TS_AGENT = AGENTS / "acp_ts_agent.mjs"

PROFILE = """
[agents.{name}]
kind = "acp"
command = {node!r}
args = [{agent!r}]
cwd = "client"

[agents.{name}.env]
OMA_ACP_TS_SDK_DIR = {sdk!r}
OMA_TS_AGENT_STATE = {state!r}
OMA_TS_AGENT_FORK = {fork!r}
"""


#: The parent's turns as a session/load replays them: "one", then "parent" after the fork.
PARENT = ["user_:one", "agent:one", "user_:parent", "agent:parent"]


def ts_profiles(tmp_path: Path, sdk: Path) -> str:
    node = require_node()
    state = tmp_path / "ts-sessions"
    state.mkdir()
    return "".join(
        PROFILE.format(
            name=name, node=node, agent=str(TS_AGENT), sdk=str(sdk), state=str(state), fork=fork
        )
        for name, fork in (("forking", "1"), ("plain", "0"))
    )


def by_session(run: Any, session_id: str) -> list[str]:
    """The text of each user and agent chunk one session's updates carried, in order."""
    return [
        f"{line['update']['sessionUpdate'][:5]}:{line['update']['content']['text']}"
        for line in run.of("update")
        if line["sessionId"] == session_id
        and line["update"]["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")
    ]


def sdk_script(facade: Facade, profile: str, *steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": facade.shim(profile),
        "cwd": str(facade.work),
        "steps": [{"op": "initialize"}, *steps],
    }


def test_an_llm_session_forks_with_the_python_sdk_and_each_replays_its_own(
    tmp_path: Path,
) -> None:
    with facade_daemon(tmp_path) as facade:
        run = run_sdk_client(
            sdk_script(
                facade,
                "echo",
                {"op": "new"},
                {"op": "prompt", "text": "one"},
                {"op": "fork"},  # the session is now the fork
                {"op": "prompt", "text": "fork"},
            ),
            facade.env,
        )
        caps = run.result("initialize")["agentCapabilities"]["sessionCapabilities"]
        assert caps == {"list": {}, "resume": {}, "close": {}, "fork": {}}
        parent = run.result("new")["sessionId"]
        fork = run.result("fork")["sessionId"]
        assert fork != parent and fork.startswith("agt_")
        assert run.result("prompt") == {"stopReason": "end_turn"}
        # The parent goes on, unchanged by the fork's turn.
        later = run_sdk_client(
            sdk_script(
                facade,
                "echo",
                {"op": "resume", "sessionId": parent},
                {"op": "prompt", "text": "parent"},
                {"op": "load", "sessionId": parent},
                {"op": "load", "sessionId": fork},
            ),
            facade.env,
        )
        assert later.result("prompt") == {"stopReason": "end_turn"}
        replays = later.lines[later.lines.index(later.responses("prompt")[0]) :]
        replay = type(later)(later.returncode, replays, later.stderr)
        assert by_session(replay, parent) == PARENT
        assert by_session(replay, fork) == ["user_:one", "agent:one", "user_:fork", "agent:fork"]

        facade.restart()
        back = run_sdk_client(
            sdk_script(
                facade,
                "echo",
                {"op": "load", "sessionId": parent},
                {"op": "load", "sessionId": fork},
                {"op": "prompt", "text": "after"},  # the fork, brought back from disk
            ),
            facade.env,
        )
        assert [r.get("result") for r in back.responses("load")] == [{}, {}]
        assert by_session(back, parent) == [
            "user_:one",
            "agent:one",
            "user_:parent",
            "agent:parent",
        ]
        assert by_session(back, fork)[:4] == ["user_:one", "agent:one", "user_:fork", "agent:fork"]
        assert by_session(back, fork)[4:] == ["agent:after"]  # live: the client sent it itself


async def test_an_acp_session_forks_through_an_agent_that_advertises_it(
    tmp_path: Path, acp_ts_sdk: Path
) -> None:
    with facade_daemon(tmp_path, agents=ts_profiles(tmp_path, acp_ts_sdk)) as facade:
        client = await facade.raw("forking")
        try:
            init = (await client.initialize())["result"]
            # Nothing heard of the agent yet: fork is not promised.
            assert "fork" not in init["agentCapabilities"]["sessionCapabilities"]
            parent = await client.new(facade.work)
            await client.prompt(parent, text("echo alpha"))
            forked = await client.call(
                "session/fork", {"sessionId": parent, "cwd": str(facade.work), "mcpServers": []}
            )
            fork = forked["result"]["sessionId"]
            await client.prompt(parent, text("echo beta"))
            client.seen.clear()
            await client.prompt(fork, text("history"))
            # The agent's own fork (resumed by another process of it) has the parent's turns
            # up to the fork, not what the parent did after.
            assert said(client) == "history:echo alpha"
            client.seen.clear()
            await client.prompt(parent, text("history"))
            assert said(client) == "history:echo alpha|echo beta"
            elsewhere = await client.call(
                "session/fork", {"sessionId": parent, "cwd": str(tmp_path), "mcpServers": []}
            )
            assert elsewhere["error"]["code"] == -32602
            assert "a fork runs in its parent's folder" in elsewhere["error"]["message"]
        finally:
            await client.close()
        later = await facade.raw("forking")
        try:
            caps = (await later.initialize())["result"]["agentCapabilities"]
            assert caps["sessionCapabilities"]["fork"] == {}  # heard: it forks
        finally:
            await later.close()


async def test_an_acp_agent_without_fork_is_not_advertised_and_refused(
    tmp_path: Path, acp_ts_sdk: Path
) -> None:
    with facade_daemon(tmp_path, agents=ts_profiles(tmp_path, acp_ts_sdk)) as facade:
        client = await facade.raw("plain")
        try:
            await client.initialize()
            session = await client.new(facade.work)
            await client.prompt(session, text("echo one"))
            refused = await client.call(
                "session/fork", {"sessionId": session, "cwd": str(facade.work), "mcpServers": []}
            )
            assert refused["error"]["code"] == -32601
            message = refused["error"]["message"]
            assert f'agent {session} (profile "plain") cannot be forked' in message
            assert "does not advertise session/fork" in message
            again = await facade.raw("plain")
            try:
                caps = (await again.initialize())["result"]["agentCapabilities"]
                assert "fork" not in caps["sessionCapabilities"]
            finally:
                await again.close()
            # The session is untouched: it answers on.
            client.seen.clear()
            await client.prompt(session, text("history"))
            assert said(client) == "history:echo one"
        finally:
            await client.close()


def said(client: RawClient) -> str:
    return "".join(
        u["content"]["text"]
        for u in client.updates()
        if u["sessionUpdate"] == "agent_message_chunk"
    )
