"""Sessions on the facade: resume, the ``/acp`` door, mcpServers, and a daemon restart."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from oma_bridge.demo.acp_agent import reply_chunks

from .harness import SCENARIO_AGENT, Facade, facade_daemon, text

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


FORGETFUL = f"""
[agents.forgetful]
kind = "acp"
command = {sys.executable!r}
args = [{str(SCENARIO_AGENT)!r}]
cwd = "client"
env = {{ ACP_TEST_NO_LOAD = "1" }}
"""


async def test_a_lost_downstream_session_is_told_to_the_editor_live_and_on_load(
    tmp_path: Path,
) -> None:
    with facade_daemon(tmp_path, agents=FORGETFUL) as facade:
        client = await facade.raw("forgetful")
        await client.initialize()
        session_id = await client.new(facade.work)
        await client.prompt(session_id, text("echo before"))
        await client.close()
        facade.restart()
        params = {"sessionId": session_id, "cwd": str(facade.work), "mcpServers": []}
        live = await facade.raw("forgetful")
        later = await facade.raw("forgetful")
        try:
            with anyio.fail_after(30):
                await live.initialize()
                assert (await live.call("session/load", params))["result"] == {}
                replayed = len(live.updates())
                answer = await live.prompt(session_id, text("echo after"))
                await later.initialize()
                assert (await later.call("session/load", params))["result"] == {}
        finally:
            await live.close()
            await later.close()
    assert answer["result"] == {"stopReason": "end_turn"}
    # Live: the note comes before the agent's first answer of the new session.
    note, chunk = live.updates()[replayed:][:2]
    assert note["sessionUpdate"] == "agent_message_chunk"
    assert note["_meta"] == {"oma-bridge/note": True}
    assert note["content"]["text"].startswith(
        '[oma-bridge] ACP agent "forgetful": its earlier session '
    )
    assert "a new session" in note["content"]["text"]
    assert note["content"]["text"].endswith("earlier turns\n\n")
    assert chunk["content"]["text"] == "echo after"
    # On session/load: the same note, in its place in the conversation.
    assert [u for u in later.updates() if u.get("_meta")] == [note]
    assert texts(later.updates())[2:4] == [("user_message_chunk", "echo after"), texts([note])[0]]
