"""What the remote agent asks reaches A's clients (PROTOCOL §12.7 through §21).

B's ``scenario_fs`` profile forwards its agent's ``fs/*`` to its client, which is
A; A's ``remote_scenario`` profile (``fs = "client"``) forwards them on to
the editor attached to A, after its own confinement check.  An
``elicitation/create`` goes the same way; each hop audits who answered.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from acp_facade.harness import Facade, RawClient, text

from .harness import Pair

pytestmark = pytest.mark.anyio

EDITOR = {"fs": {"readTextFile": True, "writeTextFile": True}, "elicitation": {"form": {}}}


def said(client: RawClient) -> str:
    return "".join(
        u["content"]["text"]
        for u in client.updates()
        if u["sessionUpdate"] == "agent_message_chunk"
    )


def elicitations(facade: Facade) -> list[dict[str, Any]]:
    return [r for r in facade.audit() if r["event"] == "elicitation"]


async def test_fs_and_elicitation_of_the_remote_agent_reach_the_editor_on_a(pair: Pair) -> None:
    a = pair.a
    notes = a.work / "notes.txt"
    notes.write_text("on disk")
    editor = await a.raw("remote_scenario")
    try:
        with anyio.fail_after(30):
            await editor.initialize("editor", EDITOR)
            session_id = await editor.new(a.work)

            turn = await editor.start_prompt(session_id, text(f"fs {notes}"))
            read = await editor.next_request("fs/read_text_file")
            assert read["params"] == {"sessionId": session_id, "path": str(notes)}
            await editor.answer(read, {"result": {"content": "the editor's unsaved buffer"}})
            assert (await editor.until_answer(turn))["result"] == {"stopReason": "end_turn"}
            assert said(editor) == "read:the editor's unsaved buffer"

            # A path outside the session's folder is refused before any editor sees it.
            outside = a.root / "outside.txt"
            outside.write_text("secret")
            before = len(editor.seen)
            answer = await editor.prompt(session_id, text(f"fs {outside}"))
            assert answer["result"] == {"stopReason": "end_turn"}
            asked = [m for m in editor.seen[before:] if m.get("method") == "fs/read_text_file"]
            assert asked == []
            assert "error:" in said(editor) and "secret" not in said(editor)

            turn = await editor.start_prompt(session_id, text("elicit"))
            question = await editor.next_request("elicitation/create")
            assert question["params"]["sessionId"] == session_id
            assert question["params"]["message"] == "Your name?"
            accept = {"action": "accept", "content": {"name": "Ada"}}
            await editor.answer(question, {"result": accept})
            assert (await editor.until_answer(turn))["result"] == {"stopReason": "end_turn"}
            assert said(editor).endswith('elicitation:accept:{"name": "Ada"}')
    finally:
        await editor.close()
    [mine] = elicitations(a)
    assert (mine["agentId"], mine["action"]) == (session_id, "accept")
    assert mine["decidedBy"]["client"]["name"] == "editor"
    [theirs] = elicitations(pair.b)
    assert theirs["action"] == "accept"
    assert theirs["decidedBy"]["client"]["name"] == "oma-bridge"
