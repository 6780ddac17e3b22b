"""A client's mcpServers at the facade, checked against mcpCapabilities (PROTOCOL §22.3).

The agents are ``tests/agents/acp_ts_agent.mjs`` on the official TypeScript
SDK, one advertising ``mcpCapabilities.http`` (``OMA_TS_AGENT_MCP``) and one
advertising none; each says what its session was opened with ("mcp").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.npm_peers import require_node

from .harness import AGENTS, facade_daemon, text

pytestmark = pytest.mark.anyio

TS_AGENT = AGENTS / "acp_ts_agent.mjs"

PROFILE = """
[agents.{name}]
kind = "acp"
command = {node!r}
args = [{agent!r}]
env = {{ OMA_ACP_TS_SDK_DIR = {sdk!r}, OMA_TS_AGENT_MCP = {mcp!r} }}
cwd = "client"
client_mcp_servers = true
"""

HTTP = {"type": "http", "name": "docs", "url": "http://127.0.0.1:9/mcp", "headers": []}
STDIO = {"name": "files", "command": "/bin/true", "args": [], "env": []}


def profiles(sdk: Path) -> str:
    node = require_node()
    return "".join(
        PROFILE.format(name=name, node=node, agent=str(TS_AGENT), sdk=str(sdk), mcp=mcp)
        for name, mcp in (("plain", ""), ("withhttp", "http"))
    )


def said(updates: list[dict[str, Any]]) -> str:
    return "".join(
        u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"
    )


async def test_an_http_server_is_refused_by_an_agent_without_it_and_forwarded_to_one_with_it(
    tmp_path: Path, acp_ts_sdk: Path
) -> None:
    with facade_daemon(tmp_path, agents=profiles(acp_ts_sdk)) as facade:
        plain = await facade.raw("plain")
        try:
            await plain.initialize()
            # Nothing is known of the agent yet: it is asked (its initialize) first.
            new = {"cwd": str(facade.work), "mcpServers": [STDIO, HTTP]}
            refused = (await plain.call("session/new", new))["error"]
            assert refused["code"] == -32602
            message = refused["message"]
            assert 'mcpServers[1] "docs" uses the http transport' in message
            assert 'agent "plain" does not take' in message
            assert "mcpCapabilities for: stdio)" in message
            assert "give that server as a stdio command" in message
            assert refused["data"]["name"] == "UnsupportedMcpServer"
            # No session was opened, here or downstream; the daemon serves on.
            assert (await plain.call("session/list", {}))["result"]["sessions"] == []
            # stdio goes to every agent.
            answer = await plain.call("session/new", {**new, "mcpServers": [STDIO]})
            session = answer["result"]["sessionId"]
            assert "_meta" not in answer["result"]
            await plain.prompt(session, text("mcp"))
            assert json.loads(said(plain.updates()).removeprefix("mcp:")) == [STDIO]
            # Now known from that agent's initialize: refused again, no probe needed.
            again = (await plain.call("session/new", new))["error"]
            assert again["code"] == -32602 and '"docs"' in again["message"]
        finally:
            await plain.close()

        http = await facade.raw("withhttp")
        try:
            await http.initialize()
            answer = await http.call(
                "session/new", {"cwd": str(facade.work), "mcpServers": [HTTP, STDIO]}
            )
            session = answer["result"]["sessionId"]
            await http.prompt(session, text("mcp"))
            assert json.loads(said(http.updates()).removeprefix("mcp:")) == [HTTP, STDIO]
        finally:
            await http.close()


async def test_a_server_that_is_not_an_object_is_refused_not_dropped(
    tmp_path: Path, acp_ts_sdk: Path
) -> None:
    with facade_daemon(tmp_path, agents=profiles(acp_ts_sdk)) as facade:
        client = await facade.raw("withhttp")
        try:
            await client.initialize()
            new = {"cwd": str(facade.work), "mcpServers": [STDIO, "docs"]}
            refused = (await client.call("session/new", new))["error"]
            assert refused["code"] == -32602
            assert refused["message"].startswith("mcpServers[1] is not an object")
        finally:
            await client.close()
