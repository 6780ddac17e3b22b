"""``fs = "client"`` and ``terminal = "client"``: an agent's requests served by the editor.

A real daemon runs the scenario agent (``tests/agents/acp_scenario_agent.py``)
under a profile that forwards ``fs/*`` and ``terminal/*`` to an attached ACP
client (PROTOCOL §12.7); the clients are :class:`RawClient`s on
``/acp/clientside`` that answer the daemon's requests by hand, as an editor
with unsaved buffers and its own terminals would.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from .harness import SCENARIO_AGENT, Facade, RawClient, SdkRun, facade_daemon, run_sdk_client, text
from .test_downstream import answered, said
from .test_python_sdk import script

pytestmark = pytest.mark.anyio

CLIENT_SIDE = f"""
[agents.clientside]
kind = "acp"
command = {sys.executable!r}
args = [{str(SCENARIO_AGENT)!r}]
cwd = "client"
fs = "client"
terminal = "client"
"""

EDITOR = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}


@pytest.fixture
def facade(tmp_path: Path) -> Iterator[Facade]:
    with facade_daemon(tmp_path, agents=CLIENT_SIDE) as daemon:
        yield daemon


async def opened(
    facade: Facade, name: str = "editor", capabilities: dict[str, Any] | None = None
) -> tuple[RawClient, str]:
    client = await facade.raw("clientside")
    await client.initialize(name, capabilities)
    return client, await client.new(facade.work)


async def forwarded(
    facade: Facade, prompt: str, reply: dict[str, Any], method: str = "fs/read_text_file"
) -> tuple[RawClient, str, dict[str, Any], dict[str, Any]]:
    """A turn whose agent's one ``method`` request the editor answers ``reply``."""
    return await answered(
        facade, prompt, method, reply, name="editor", capabilities=EDITOR, profile="clientside"
    )


def audited(facade: Facade, event: str) -> list[dict[str, Any]]:
    return [record for record in facade.audit() if record["event"] == event]


def requests(client: RawClient, prefix: str) -> list[dict[str, Any]]:
    return [m for m in client.seen if "id" in m and str(m.get("method", "")).startswith(prefix)]


# -- fs -------------------------------------------------------------------------------


async def test_a_read_is_answered_from_the_editors_unsaved_buffer(facade: Facade) -> None:
    path = facade.work / "notes.txt"
    path.write_text("saved on disk")
    buffer = {"result": {"content": "unsaved buffer"}}
    client, session_id, asked, answer = await forwarded(facade, f"fs {path}", buffer)
    assert answer["result"] == {"stopReason": "end_turn"}
    assert asked["params"] == {"sessionId": session_id, "path": str(path)}
    assert said(client) == "read:unsaved buffer"


async def test_a_write_goes_to_the_editor_and_the_file_on_disk_is_untouched(
    facade: Facade,
) -> None:
    path = facade.work / "notes.txt"
    path.write_text("saved on disk")
    client, session_id, asked, answer = await forwarded(
        facade, f"fswrite {path} edited", {"result": {}}, "fs/write_text_file"
    )
    assert answer["result"] == {"stopReason": "end_turn"}
    assert asked["params"] == {"sessionId": session_id, "path": str(path), "content": "edited"}
    assert said(client) == "written"
    assert path.read_text() == "saved on disk"
    [record] = audited(facade, "fs_write")
    assert (record["agentId"], record["path"], record["bytes"]) == (session_id, str(path), 6)
    assert record["servedBy"]["client"] == {"name": "editor", "version": "1"}


async def test_the_editors_error_reaches_the_agent_unchanged(facade: Facade) -> None:
    error = {"code": -32002, "message": "no buffer for gone.txt"}
    client, _, _, answer = await forwarded(
        facade, f"fs {facade.work / 'gone.txt'}", {"error": error}
    )
    assert answer["result"] == {"stopReason": "end_turn"}
    assert said(client).startswith("error:-32002:")
    assert "no buffer for gone.txt" in said(client)


async def test_a_path_outside_the_cwd_is_refused_by_the_daemon_and_never_forwarded(
    facade: Facade,
) -> None:
    outside = facade.root / "secret.txt"
    outside.write_text("not for the agent")
    client, session_id = await opened(facade, capabilities=EDITOR)
    try:
        with anyio.fail_after(30):
            read = await client.prompt(session_id, text(f"fs {outside}"))
            write = await client.prompt(session_id, text(f"fswrite {outside} x"))
    finally:
        await client.close()
    assert read["result"] == write["result"] == {"stopReason": "end_turn"}
    assert not requests(client, "fs/")
    assert said(client).count("error:-32002:") == 2
    assert "outside the agent's working directory" in said(client)
    assert outside.read_text() == "not for the agent"
    assert {r["path"] for r in audited(facade, "fs_denied")} == {str(outside)}
    assert not audited(facade, "fs_write")


async def test_with_no_capable_client_the_daemon_serves_fs_from_disk(facade: Facade) -> None:
    path = facade.work / "notes.txt"
    path.write_text("saved on disk")
    written = facade.work / "new.txt"
    # Terminals only: no fs capability, so the daemon reads and writes the files itself.
    client, session_id = await opened(facade, capabilities={"terminal": True})
    try:
        with anyio.fail_after(30):
            await client.prompt(session_id, text(f"fs {path}"))
            await client.prompt(session_id, text(f"fswrite {written} hello"))
    finally:
        await client.close()
    assert not requests(client, "fs/")
    assert said(client) == "read:saved on diskwritten"
    assert written.read_text() == "hello"
    [record] = audited(facade, "fs_write")
    assert (record["path"], record["servedBy"]) == (str(written), "daemon")


# -- terminals ---------------------------------------------------------------------------


async def test_a_terminal_lives_in_the_editor(facade: Facade) -> None:
    watcher, _ = await opened(facade, "watcher", {"terminal": True})
    client, session_id = await opened(facade, capabilities=EDITOR)
    try:
        with anyio.fail_after(30):
            # Both can serve terminals; the one that sent the prompt is asked.
            resumed = await watcher.call("session/resume", {"sessionId": session_id})
            assert resumed["result"] == {}
            turn = await client.start_prompt(session_id, text("terminal 1000"))
            create = await client.next_request("terminal/create")
            await client.answer(create, {"result": {"terminalId": "editor-term-7"}})
            wait = await client.next_request("terminal/wait_for_exit")
            await client.answer(wait, {"result": {"exitCode": 4, "signal": None}})
            output = await client.next_request("terminal/output")
            shown = {"output": "from the editor", "truncated": False}
            await client.answer(output, {"result": shown})
            release = await client.next_request("terminal/release")
            await client.answer(release, {"result": {}})
            answer = await client.until_answer(turn)
    finally:
        await client.close()
        await watcher.close()
    assert answer["result"] == {"stopReason": "end_turn"}
    assert create["params"]["sessionId"] == session_id
    assert create["params"]["command"] == sys.executable
    assert create["params"]["outputByteLimit"] == 1000
    for request in (wait, output, release):
        assert request["params"] == {"sessionId": session_id, "terminalId": "editor-term-7"}
    assert said(client) == "exit=4 output=from the editor truncated=False"
    assert not requests(watcher, "terminal/")
    [record] = audited(facade, "terminal")
    assert record["command"] == sys.executable and "pid" not in record
    assert record["servedBy"]["client"] == {"name": "editor", "version": "1"}


async def test_a_terminal_of_a_client_that_detached_fails_clearly(facade: Facade) -> None:
    editor, session_id = await opened(facade, capabilities=EDITOR)
    other, _ = await opened(facade, "other")  # no terminal capability
    try:
        with anyio.fail_after(30):
            assert (await other.call("session/resume", {"sessionId": session_id}))["result"] == {}
            await editor.start_prompt(session_id, text("terminalgone"))
            create = await editor.next_request("terminal/create")
            await editor.answer(create, {"result": {"terminalId": "t-1"}})
            output = await editor.next_request("terminal/output")
            await editor.answer(output, {"result": {"output": "hi\n", "truncated": False}})
            await editor.next_request("terminal/wait_for_exit")
            await editor.close()  # the editor goes away mid-terminal, that call unanswered
            while "error" not in said(other) or said(other).count("error") < 2:
                await other.receive()
    finally:
        await editor.close()
        await other.close()
    first, second = said(other).split(" error:")[1:]
    assert "disconnected before answering" in first
    assert "t-1 belongs to the client editor" in second and "detached" in second
    assert not requests(other, "terminal/")


async def test_with_no_capable_client_the_daemon_runs_the_terminal(facade: Facade) -> None:
    client, session_id = await opened(facade, capabilities={"fs": {"readTextFile": True}})
    try:
        with anyio.fail_after(30):
            answer = await client.prompt(session_id, text("terminalrun print('from the daemon')"))
    finally:
        await client.close()
    assert answer["result"] == {"stopReason": "end_turn"}
    assert not requests(client, "terminal/")
    assert said(client) == "exit=0 signal=None output=from the daemon\n"
    [record] = audited(facade, "terminal")
    assert isinstance(record["pid"], int) and record["servedBy"] == "daemon"


# -- the official Python SDK's client as the editor, through the shim -------------------


def editor_script(facade: Facade, buffers: dict[str, str], *prompts: str) -> dict[str, Any]:
    steps = [{"op": "new"}, *({"op": "prompt", "text": prompt} for prompt in prompts)]
    return script(facade, "clientside", *steps, editor={"buffers": buffers})


def served(run: SdkRun, prefix: str = "") -> list[dict[str, Any]]:
    return [line for line in run.of("client") if line["method"].startswith(prefix)]


def test_sdk_editor_read_comes_from_its_unsaved_buffer(facade: Facade) -> None:
    path = facade.work / "notes.txt"
    path.write_text("saved on disk")
    run = run_sdk_client(
        editor_script(facade, {str(path): "unsaved buffer"}, f"fs {path}"), facade.env
    )
    assert run.result("prompt") == {"stopReason": "end_turn"}
    assert "".join(run.chunks()) == "read:unsaved buffer"
    session_id = run.result("new")["sessionId"]
    [read] = served(run)
    assert read == {
        "type": "client",
        "method": "fs/read_text_file",
        "params": {"sessionId": session_id, "path": str(path)},
    }


def test_sdk_editor_write_lands_in_the_editor_not_on_disk(facade: Facade) -> None:
    path = facade.work / "notes.txt"
    path.write_text("saved on disk")
    run = run_sdk_client(
        editor_script(facade, {}, f"fswrite {path} edited", f"fs {path}"), facade.env
    )
    assert [r["result"] for r in run.responses("prompt")] == [{"stopReason": "end_turn"}] * 2
    assert "".join(run.chunks()) == "writtenread:edited"  # read back from the editor
    assert path.read_text() == "saved on disk"
    assert run.of("buffers")[0]["buffers"] == {str(path): "edited"}
    [record] = audited(facade, "fs_write")
    assert record["servedBy"]["client"]["name"] == "python-sdk-editor"


def test_sdk_editor_is_never_asked_for_a_path_outside_the_cwd(facade: Facade) -> None:
    outside = facade.root / "secret.txt"
    outside.write_text("not for the agent")
    run = run_sdk_client(
        editor_script(facade, {str(outside): "a buffer"}, f"fs {outside}", f"fswrite {outside} x"),
        facade.env,
    )
    assert [r["result"] for r in run.responses("prompt")] == [{"stopReason": "end_turn"}] * 2
    assert served(run) == []
    said_ = "".join(run.chunks())
    assert said_.count("error:-32002:") == 2 and "outside the agent's working directory" in said_
    assert run.of("buffers")[0]["buffers"] == {str(outside): "a buffer"}
    assert outside.read_text() == "not for the agent"


def test_sdk_editor_runs_the_terminal(facade: Facade) -> None:
    code = "print('from the editor')"
    run = run_sdk_client(editor_script(facade, {}, f"terminalrun {code}"), facade.env)
    assert run.result("prompt") == {"stopReason": "end_turn"}
    assert "".join(run.chunks()) == "exit=0 signal=None output=from the editor\n"
    methods = [line["method"] for line in served(run, "terminal/")]
    assert methods == [
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
    ]
    create = served(run, "terminal/create")[0]["params"]
    assert create["command"] == sys.executable
    assert create["sessionId"] == run.result("new")["sessionId"]
    [record] = audited(facade, "terminal")
    assert "pid" not in record and record["servedBy"]["client"]["name"] == "python-sdk-editor"
