"""What the downstream agent of an acp profile does, as the facade's clients see it.

The agent is the scenario agent (``tests/agents/acp_scenario_agent.py``, the
official Python SDK's agent side, the behaviour picked by the prompt's first
word) run by a real daemon; the clients are the official Python SDK's client
through the shim and :class:`RawClient` on ``/acp/scenario``, which answers the
daemon's requests by hand.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import anyio
import pytest

from oma_bridge import ElicitationRequest
from oma_bridge.client import connect

from .harness import AGENTS, Facade, RawClient, run_sdk_client, text

#: The updates the scenario agent's ``rich`` sends, as it writes them.
RICH = json.loads((AGENTS / "acp_rich_updates.json").read_text())

pytestmark = pytest.mark.anyio


def sdk_script(facade: Facade, *steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": facade.shim("scenario"),
        "cwd": str(facade.work),
        "steps": [{"op": "initialize"}, {"op": "new"}, *steps],
    }


def test_a_refusal_is_the_stop_reason_refusal(facade: Facade) -> None:
    run = run_sdk_client(
        sdk_script(facade, {"op": "prompt", "text": "refuse not doing that"}), facade.env
    )
    assert run.result("prompt") == {"stopReason": "refusal"}
    assert run.chunks() == ["not doing that"]


async def test_a_refusal_is_a_failed_run_on_the_daemons_own_protocol(facade: Facade) -> None:
    with anyio.fail_after(30):
        async with connect(discovery_dir=facade.runtime / "oma-bridge") as client:
            agent = await client.open("scenario")
            result = await agent.prompt("refuse not doing that")
    assert not result.success
    assert result.status.code == "error"
    assert result.status.message == 'ACP agent "scenario" refused the task: not doing that'
    assert result.error_info is not None
    assert (result.error_info.kind, result.error_info.code) == ("backend", "REFUSED")


# -- elicitation/create ----------------------------------------------------------------

FORMS = {"elicitation": {"form": {}}}


def said(client: RawClient) -> str:
    return "".join(
        u["content"]["text"]
        for u in client.updates()
        if u["sessionUpdate"] == "agent_message_chunk"
    )


def elicitations(facade: Facade) -> list[dict[str, Any]]:
    return [r for r in facade.audit() if r["event"] == "elicitation"]


async def answered(
    facade: Facade,
    prompt: str,
    method: str,
    reply: dict[str, Any],
    *,
    name: str = "raw-client",
    capabilities: dict[str, Any] | None = None,
    profile: str = "scenario",
) -> tuple[RawClient, str, dict[str, Any], dict[str, Any]]:
    """A turn of a new session (the scenario agent) whose agent asks one ``method`` request,
    answered ``reply``: the client (closed), the session, the request and the prompt's answer."""
    client = await facade.raw(profile)
    try:
        with anyio.fail_after(30):
            await client.initialize(name, capabilities)
            session_id = await client.new(facade.work)
            turn = await client.start_prompt(session_id, text(prompt))
            asked = await client.next_request(method)
            await client.answer(asked, reply)
            answer = await client.until_answer(turn)
    finally:
        await client.close()
    return client, session_id, asked, answer


async def test_an_elicitation_reaches_a_client_that_advertised_forms(facade: Facade) -> None:
    accept = {"result": {"action": "accept", "content": {"name": "Ada"}}}
    client, session_id, asked, answer = await answered(
        facade, "elicit", "elicitation/create", accept, name="editor", capabilities=FORMS
    )
    assert answer["result"] == {"stopReason": "end_turn"}
    params = asked["params"]
    assert params["sessionId"] == session_id  # the facade's, not the downstream agent's
    assert (params["message"], params["mode"], params["toolCallId"]) == ("Your name?", "form", "t9")
    assert params["requestedSchema"]["required"] == ["name"]
    assert said(client) == 'elicitation:accept:{"name": "Ada"}'
    [record] = elicitations(facade)
    assert record["agentId"] == session_id
    assert (record["mode"], record["action"], record["message"]) == ("form", "accept", "Your name?")
    assert record["decidedBy"]["client"] == {"name": "editor", "version": "1"}
    assert "Ada" not in json.dumps(record)  # what the user typed is not audited


async def test_with_nobody_able_to_answer_the_agent_gets_cancel(facade: Facade) -> None:
    client = await facade.raw("scenario")
    try:
        with anyio.fail_after(30):
            await client.initialize("no-forms", {"elicitation": {"url": {}}})  # not forms
            session_id = await client.new(facade.work)
            answer = await client.prompt(session_id, text("elicit"))
    finally:
        await client.close()
    assert answer["result"] == {"stopReason": "end_turn"}
    assert not [m for m in client.seen if m.get("method") == "elicitation/create"]
    assert said(client) == "elicitation:cancel:null"
    [record] = elicitations(facade)
    assert (record["action"], record["decidedBy"]) == ("cancel", "no-client")


async def test_a_malformed_answer_is_no_answer(facade: Facade) -> None:
    # Content with a decline is not an answer ACP knows: nothing of it goes on.
    bad = {"result": {"action": "decline", "content": {"name": "Eve"}}}
    client, _, _, answer = await answered(
        facade, "elicit", "elicitation/create", bad, capabilities=FORMS
    )
    assert answer["result"] == {"stopReason": "end_turn"}
    assert said(client) == "elicitation:cancel:null"
    [record] = elicitations(facade)
    assert (record["action"], record["decidedBy"]) == ("cancel", "no-client")


async def test_the_first_answer_wins_and_the_others_copy_is_withdrawn(facade: Facade) -> None:
    first = await facade.raw("scenario")
    second = await facade.raw("scenario")
    try:
        with anyio.fail_after(30):
            await first.initialize("first", FORMS)
            await second.initialize("second", FORMS)
            session_id = await first.new(facade.work)
            assert (await second.call("session/resume", {"sessionId": session_id}))["result"] == {}
            turn = await first.start_prompt(session_id, text("elicit"))
            held = await first.next_request("elicitation/create")
            asked = await second.next_request("elicitation/create")
            await second.answer(asked, {"result": {"action": "decline"}})
            withdrawn = await first.next_notification("$/cancel_request")
            # A late answer from the loser changes nothing.
            await first.answer(held, {"result": {"action": "accept", "content": {"name": "X"}}})
            answer = await first.until_answer(turn)
    finally:
        await first.close()
        await second.close()
    assert answer["result"] == {"stopReason": "end_turn"}
    assert withdrawn["params"] == {"requestId": held["id"]}
    assert said(first) == "elicitation:decline:null"
    [record] = elicitations(facade)
    assert record["action"] == "decline"
    assert record["decidedBy"]["client"] == {"name": "second", "version": "1"}


URLS = {"elicitation": {"url": {}}}


def completions(client: RawClient) -> list[dict[str, Any]]:
    return [m for m in client.seen if m.get("method") == "elicitation/complete"]


async def test_elicitation_complete_reaches_the_clients_that_were_asked(facade: Facade) -> None:
    """A URL-mode elicitation, then the agent's ``elicitation/complete``: relayed as sent,
    to the client that was asked it, not to one that could not have been."""
    asked_client = await facade.raw("scenario")
    forms_only = await facade.raw("scenario")
    try:
        with anyio.fail_after(30):
            await asked_client.initialize("browser-editor", URLS)
            await forms_only.initialize("forms-only", FORMS)
            session_id = await asked_client.new(facade.work)
            resumed = await forms_only.call("session/resume", {"sessionId": session_id})
            assert resumed["result"] == {}
            turn = await asked_client.start_prompt(session_id, text("elicitdone"))
            asked = await asked_client.next_request("elicitation/create")
            await asked_client.answer(asked, {"result": {"action": "accept"}})
            completed = await asked_client.next_notification("elicitation/complete")
            answer = await asked_client.until_answer(turn)
            while "completed" not in said(forms_only):
                await forms_only.receive()
    finally:
        await asked_client.close()
        await forms_only.close()
    assert asked["params"]["mode"] == "url" and asked["params"]["elicitationId"] == "e1"
    assert completed["params"] == {
        "elicitationId": "e1",
        "_meta": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    }
    assert answer["result"] == {"stopReason": "end_turn"}
    assert said(asked_client) == "elicitation:accept:completed"
    assert completions(forms_only) == []
    assert not [m for m in forms_only.seen if m.get("method") == "elicitation/create"]


async def test_elicitation_complete_of_an_elicitation_nobody_here_was_asked(
    facade: Facade,
) -> None:
    """A completion for an id the daemon never relayed: to every attached client that
    advertised URL mode (and to no other)."""
    prompter = await facade.raw("scenario")
    browser = await facade.raw("scenario")
    try:
        with anyio.fail_after(30):
            await prompter.initialize("forms-only", FORMS)
            await browser.initialize("browser-editor", URLS)
            session_id = await prompter.new(facade.work)
            assert (await browser.call("session/resume", {"sessionId": session_id}))["result"] == {}
            answer = await prompter.prompt(session_id, text("elicitdone bare"))
            completed = await browser.next_notification("elicitation/complete")
    finally:
        await prompter.close()
        await browser.close()
    assert answer["result"] == {"stopReason": "end_turn"}
    assert said(prompter) == "elicitation:none:completed"
    assert completed["params"]["elicitationId"] == "e2"
    assert completions(prompter) == []


async def test_a_client_of_the_daemons_protocol_answers_elicitation_request(
    facade: Facade,
) -> None:
    asked: list[ElicitationRequest] = []

    async def fill(request: ElicitationRequest) -> dict[str, Any]:
        asked.append(request)
        return {"action": "accept", "content": {"name": "Grace"}}

    with anyio.fail_after(30):
        async with connect(
            discovery_dir=facade.runtime / "oma-bridge", elicitation_handler=fill
        ) as client:
            agent = await client.open("scenario")
            result = await agent.prompt("elicit", run_id="run-e")
    assert result.output == 'elicitation:accept:{"name": "Grace"}'
    [request] = asked
    assert (request.agent_name, request.run_id, request.mode) == (agent.agent_id, "run-e", "form")
    assert request.params["message"] == "Your name?"
    assert "sessionId" not in request.params
    [record] = elicitations(facade)
    assert record["runId"] == "run-e"
    assert record["decidedBy"]["client"]["name"] == "oma-bridge-client"


# -- session/set_mode and session/set_config_option --------------------------------------


async def test_settings_reach_the_agents_live_session(facade: Facade) -> None:
    client = await facade.raw("scenario")
    try:
        with anyio.fail_after(30):
            await client.initialize()
            session_id = await client.new(facade.work)
            # Nothing runs yet: the agent is started and its session opened for the request.
            plan = {"sessionId": session_id, "modeId": "plan"}
            mode = await client.call("session/set_mode", plan)
            option = await client.call(
                "session/set_config_option",
                {"sessionId": session_id, "configId": "model-choice", "value": "large"},
            )
            bad = await client.call("session/set_mode", {"sessionId": session_id, "modeId": "bad"})
            turn = await client.prompt(session_id, text("settings"))
    finally:
        await client.close()
    assert mode["result"] == {"_meta": {"scenario/mode": "plan"}}  # the agent's answer, as it is
    assert option["result"] == {"configOptions": []}
    assert bad["error"]["code"] == -32602  # the agent's own error, relayed
    # The agent's data, and its message as details (PROTOCOL §18.3).
    assert bad["error"]["data"] == {"modeId": "no such mode", "details": bad["error"]["message"]}
    assert turn["result"] == {"stopReason": "end_turn"}
    # One agent process served the settings and the turn, in the same session.
    async with connect(discovery_dir=facade.runtime / "oma-bridge") as ours:
        status = await ours.status()
    [pid] = [p["pid"] for p in status["processes"] if p["agentId"] == session_id]
    assert said(client) == f"mode=plan model=model-choice=large pid={pid}"
    # The mode update the agent sent while answering reached the client.
    assert {"sessionUpdate": "current_mode_update", "currentModeId": "plan"} in client.updates()


async def test_settings_of_llm_and_process_profiles_are_method_not_found(facade: Facade) -> None:
    for profile in ("echo", "wordcount"):
        client = await facade.raw(profile)
        try:
            with anyio.fail_after(15):
                await client.initialize()
                session_id = await client.new(facade.work)
                for method, extra in (
                    ("session/set_mode", {"modeId": "plan"}),
                    ("session/set_config_option", {"configId": "x", "value": "y"}),
                ):
                    answer = await client.call(method, {"sessionId": session_id, **extra})
                    assert answer["error"]["code"] == -32601, (profile, answer)
                    assert "only acp profiles" in answer["error"]["message"]
                nobody = {"sessionId": "agt_0", "modeId": "x"}
                unknown = await client.call("session/set_mode", nobody)
                assert unknown["error"]["data"] == {
                    "name": "NotFound",
                    "details": "Unknown session: agt_0",
                }
        finally:
            await client.close()
    assert not facade.marker.exists()


async def test_a_setting_during_a_turn_is_answered_during_the_turn(facade: Facade) -> None:
    client = await facade.raw("scenario")
    try:
        with anyio.fail_after(30):
            await client.initialize()
            session_id = await client.new(facade.work)
            turn = await client.start_prompt(session_id, text("slow"))  # waits for a cancel
            while not said(client):
                await client.receive()
            mode = await client.call("session/set_mode", {"sessionId": session_id, "modeId": "ask"})
            await client.send(
                {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}
            )
            answer = await client.until_answer(turn)
    finally:
        await client.close()
    assert mode["result"] == {"_meta": {"scenario/mode": "ask"}}
    assert answer["result"] == {"stopReason": "cancelled"}


# -- every downstream update relayed as sent; typed events on the daemon's protocol ----------


async def test_every_update_reaches_the_client_as_the_agent_sent_it(facade: Facade) -> None:
    client = await facade.raw("scenario")
    again = await facade.raw("scenario")
    try:
        with anyio.fail_after(30):
            await client.initialize()
            session_id = await client.new(facade.work)
            answer = await client.prompt(session_id, text("rich"))
            await again.initialize()
            loaded = await again.call(
                "session/load", {"sessionId": session_id, "cwd": str(facade.work), "mcpServers": []}
            )
    finally:
        await client.close()
        await again.close()
    assert answer["result"] == {"stopReason": "end_turn"}
    # One out per one in, in order, unchanged: messageId, _meta (trace context), annotations.
    assert client.updates() == RICH
    assert loaded["result"] == {}
    user, *replayed = again.updates()
    assert user == {"sessionUpdate": "user_message_chunk", "content": text("rich")}
    assert replayed == RICH


async def test_session_state_is_typed_on_the_daemons_protocol(facade: Facade) -> None:
    with anyio.fail_after(30):
        async with connect(discovery_dir=facade.runtime / "oma-bridge") as client:
            agent = await client.open("scenario")
            stream = agent.stream("rich")
            events = [event async for event in stream]
            entries = []
            async with contextlib.aclosing(agent.watch(after_seq=0)) as journal:
                async for entry in journal:
                    entries.append(entry)
                    if len(entries) == len(RICH) + 1:  # the run's start and its updates
                        break
    assert [e.type for e in events] == [
        "reasoning",
        "text",
        "text",
        "text",
        "usage_update",
        "available_commands_update",
        "current_mode_update",
        "plan",
        "done",
    ]
    typed = {e.type: e.data for e in events[4:8]}
    assert typed["usage_update"] == {"used": 120, "size": 1000, "_meta": {"x": 1}}
    assert typed["current_mode_update"] == {"currentModeId": "code"}
    assert typed["plan"]["entries"][0]["content"] == "one"
    assert stream.result is not None and stream.result.output == "Hello, world"
    # The journal keeps what the agent sent: the rich chunks beside their events, the
    # session state as update entries (PROTOCOL §13.3), each once.
    kinds = [(e.entry["type"], e.entry.get("update", {}).get("sessionUpdate")) for e in entries]
    assert kinds == [
        ("run_start", None),
        ("event", "agent_thought_chunk"),
        ("event", "agent_message_chunk"),
        ("event", None),  # a plain chunk: its text event says it all
        ("event", "agent_message_chunk"),
        ("update", "usage_update"),
        ("update", "available_commands_update"),
        ("update", "current_mode_update"),
        ("update", "plan"),
    ]
    assert entries[2].entry["update"] == RICH[1]


async def test_a_permission_request_keeps_its_meta(facade: Facade) -> None:
    selected = {"result": {"outcome": {"outcome": "selected", "optionId": "ao"}}}
    client, _, asked, answer = await answered(
        facade, "tools", "session/request_permission", selected
    )
    assert answer["result"] == {"stopReason": "end_turn"}
    assert asked["params"]["_meta"] == {"traceparent": RICH[0]["_meta"]["traceparent"]}
    assert said(client) == "permission:ao"


# -- session/prompt's _meta -------------------------------------------------------------

TRACE = {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
}


def test_the_prompts_meta_reaches_the_agents_session_prompt(facade: Facade) -> None:
    meta = {**TRACE, "vendor/x": {"nested": [1, 2]}, "oma-bridge/profile": "echo"}
    run = run_sdk_client(
        sdk_script(facade, {"op": "prompt", "text": "meta", "meta": meta}), facade.env
    )
    assert run.result("prompt") == {"stopReason": "end_turn"}
    # Every key as the client sent it, but the daemon's own (docs/decisions.md, D22).
    assert json.loads("".join(run.chunks())) == {**TRACE, "vendor/x": {"nested": [1, 2]}}


async def test_a_prompt_whose_meta_is_no_object_is_refused(facade: Facade) -> None:
    client = await facade.raw("scenario")
    try:
        with anyio.fail_after(30):
            await client.initialize()
            session_id = await client.new(facade.work)
            bad = await client.call(
                "session/prompt",
                {"sessionId": session_id, "prompt": [text("meta")], "_meta": "traceparent"},
            )
            good = await client.call(
                "session/prompt", {"sessionId": session_id, "prompt": [text("meta")]}
            )
    finally:
        await client.close()
    assert bad["error"]["code"] == -32602
    assert bad["error"]["message"] == "_meta must be an object"
    assert good["result"] == {"stopReason": "end_turn"}
    assert said(client) == "{}"  # the refused prompt never reached the agent


async def test_a_permission_request_reaches_acp_clients_as_the_agent_sent_it(
    facade: Facade,
) -> None:
    """The tool call's and each option's own ``_meta`` (and content, locations) unchanged."""
    selected = {"result": {"outcome": {"outcome": "selected", "optionId": "ro"}}}
    client, session_id, asked, answer = await answered(
        facade, "permmeta", "session/request_permission", selected
    )
    assert answer["result"] == {"stopReason": "end_turn"}
    sent = json.loads((AGENTS / "acp_permission_with_meta.json").read_text())
    assert asked["params"] == {"sessionId": session_id, **sent}
    assert said(client) == "permission:ro"
    [record] = [r for r in facade.audit() if r["event"] == "permission"]
    assert record["toolCall"] == {"toolCallId": "m1", "title": "Edit notes.txt", "kind": "edit"}
    assert record["outcome"] == {"outcome": "selected", "optionId": "ro"}
