"""Sessions on the facade: resume, the ``/acp`` door, mcpServers, and a daemon restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from oma_bridge.demo.acp_agent import reply_chunks

from .harness import Facade, facade_daemon, text

pytestmark = pytest.mark.anyio


def texts(updates: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [
        (u["sessionUpdate"], u["content"]["text"])  # type: ignore[index]
        for u in updates
        if u["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")
    ]


async def test_resume_attaches_without_replay(facade: Facade) -> None:
    first = await facade.raw("demo")
    await first.initialize()
    session_id = await first.new(facade.work)
    await first.prompt(session_id, text("one"))
    await first.close()
    later = await facade.raw("demo")
    try:
        await later.initialize()
        params = {"sessionId": session_id, "cwd": str(facade.work)}
        assert (await later.call("session/resume", params))["result"] == {}
        assert later.updates() == []  # nothing replayed
        await later.prompt(session_id, text("two"))
        assert texts(later.updates())[-1][1].startswith("This is turn 2 of session demo-1")  # type: ignore[union-attr]
    finally:
        await later.close()


async def test_the_acp_door_takes_the_profile_from_meta_or_the_default(tmp_path: Path) -> None:
    with facade_daemon(tmp_path, server='acp_default_profile = "echo"') as facade:
        door = await facade.raw()
        try:
            init = (await door.initialize())["result"]
            assert init["agentInfo"]["name"] == "oma-bridge"
            assert init["agentCapabilities"]["promptCapabilities"]["image"] is False
            default = await door.new(facade.work)
            assert (await door.prompt(default, text("hi")))["result"] == {"stopReason": "end_turn"}
            assert [u["content"]["text"] for u in door.updates()] == ["hi"]  # echo
            meta = {"oma-bridge/profile": "demo"}
            named = await door.call(
                "session/new", {"cwd": str(facade.work), "mcpServers": [], "_meta": meta}
            )
            demo = named["result"]["sessionId"]
            await door.prompt(demo, text("yo"))
            assert door.updates()[-4]["content"]["text"] == "You said: yo\n"  # type: ignore[index]
            unknown = await door.call(
                "session/new",
                {"cwd": str(facade.work), "mcpServers": [], "_meta": {"oma-bridge/profile": "x"}},
            )
            assert unknown["error"]["code"] == -32602
            assert 'no agent profile named "x"' in unknown["error"]["message"]
            listed = await door.call("session/list", {})
            assert {s["sessionId"] for s in listed["result"]["sessions"]} == {default, demo}
        finally:
            await door.close()


async def test_client_mcp_servers_are_not_forwarded_silently(facade: Facade) -> None:
    client = await facade.raw("demo")
    try:
        await client.initialize()
        server = {"name": "files", "command": "/bin/true", "args": [], "env": []}
        answer = await client.call("session/new", {"cwd": str(facade.work), "mcpServers": [server]})
        assert answer["result"]["_meta"] == {"oma-bridge/ignoredMcpServers": ["files"]}
        assert "mcpServers not forwarded (files)" in facade.log()
    finally:
        await client.close()


async def test_load_after_a_daemon_restart_replays_from_disk(facade: Facade) -> None:
    client = await facade.raw("demo")
    await client.initialize()
    session_id = await client.new(facade.work)
    newer = await client.new(facade.work)  # made later, used earlier
    await client.prompt(newer, text("the other one"))
    await client.prompt(session_id, text("before the restart"))
    await client.close()
    facade.restart()
    back = await facade.raw("demo")
    try:
        await back.initialize()
        listed = await back.call("session/list", {})
        row, other = listed["result"]["sessions"]  # newest activity first, as before
        assert row["sessionId"] == session_id and row["title"] == "before the restart"
        assert other["sessionId"] == newer
        params = {"sessionId": session_id, "cwd": str(facade.work), "mcpServers": []}
        assert (await back.call("session/load", params))["result"] == {}
        assert texts(back.updates()) == [
            ("user_message_chunk", "before the restart"),
            *[
                ("agent_message_chunk", chunk)
                for chunk in reply_chunks("before the restart", 1, "demo-1", 3)
            ],
        ]
        answer = await back.prompt(session_id, text("after"))
        assert answer["result"] == {"stopReason": "end_turn"}
    finally:
        await back.close()


async def test_list_by_cwd_resolves_symlinks(facade: Facade) -> None:
    project = facade.work / "project"
    project.mkdir()
    link = facade.work / "link"
    link.symlink_to(project)
    client = await facade.raw("demo")
    try:
        await client.initialize()
        session_id = await client.new(link)  # runs in the resolved folder
        for cwd in (link, project):
            listed = await client.call("session/list", {"cwd": str(cwd)})
            assert [s["sessionId"] for s in listed["result"]["sessions"]] == [session_id]
            assert listed["result"]["sessions"][0]["cwd"] == str(project)
        elsewhere = await client.call("session/list", {"cwd": str(facade.work)})
        assert elsewhere["result"]["sessions"] == []
    finally:
        await client.close()
