"""The official Python SDK's client side, through the shim, against every kind of profile.

Each test runs ``sdk_client.py`` (``spawn_agent_process`` on ``oma-bridge
acp <profile>``) against a real daemon; nothing is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import psutil

from oma_bridge.demo.acp_agent import reply_chunks

from .harness import SDK_CLIENT, Facade, agent_pids, kill_group, run_sdk_client, wait_until_idle

PNG = {"data": "aGVsbG8=", "mimeType": "image/png"}


def script(facade: Facade, profile: str, *steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "command": facade.shim(profile),
        "cwd": str(facade.work),
        "steps": [{"op": "initialize"}, *steps],
        **extra,
    }


def test_initialize_advertises_capabilities_per_kind(facade: Facade) -> None:
    expected = {
        "echo": {"image": True, "audio": False, "embeddedContext": True},
        "wordcount": {"image": False, "audio": False, "embeddedContext": False},
        "demo": {"image": False, "audio": False, "embeddedContext": False},
    }
    for profile, prompt in expected.items():
        run = run_sdk_client(script(facade, profile), facade.env)
        answer = run.result("initialize")
        assert answer["protocolVersion"] == 1
        assert answer["agentInfo"]["name"] == f"oma-bridge/{profile}"
        assert answer["authMethods"] == []
        capabilities = answer["agentCapabilities"]
        assert capabilities["loadSession"] is True
        assert capabilities["promptCapabilities"] == prompt, profile
        sessions = {"list": {}, "resume": {}, "close": {}}
        if profile != "demo":  # llm and process fork; an acp agent never heard from: not yet
            sessions["fork"] = {}
        assert capabilities["sessionCapabilities"] == sessions, profile


def test_a_prompt_to_each_kind(facade: Facade) -> None:
    echo = run_sdk_client(
        script(facade, "echo", {"op": "new"}, {"op": "prompt", "text": "hello world"}),
        facade.env,
    )
    assert echo.chunks() == ["hello ", "world"]
    assert echo.result("prompt") == {"stopReason": "end_turn"}

    words = run_sdk_client(
        script(facade, "wordcount", {"op": "new"}, {"op": "prompt", "text": "one two three"}),
        facade.env,
    )
    assert "".join(words.chunks()).strip() == "3"
    assert words.result("prompt") == {"stopReason": "end_turn"}

    demo = run_sdk_client(
        script(facade, "demo", {"op": "new"}, {"op": "prompt", "text": "hi there"}),
        facade.env,
    )
    assert demo.chunks() == reply_chunks("hi there", 1, "demo-1", 2)
    assert demo.updates("usage_update")  # a kind the daemon does not map: relayed as sent
    assert demo.result("prompt") == {"stopReason": "end_turn"}

    scenario = run_sdk_client(
        script(facade, "scenario", {"op": "new"}, {"op": "prompt", "text": "thought"}),
        facade.env,
    )
    kinds = [u["sessionUpdate"] for u in scenario.updates()]
    assert kinds == ["agent_thought_chunk", "plan", "agent_message_chunk"]
    assert scenario.updates("plan")[0]["entries"][0]["content"] == "step one"
    assert scenario.chunks() == ["answer"]


def test_an_image_reaches_the_llm_profile(facade: Facade) -> None:
    run = run_sdk_client(
        script(facade, "echo", {"op": "new"}, {"op": "prompt", "text": "look", "images": [PNG]}),
        facade.env,
    )
    assert "".join(run.chunks()) == "look [image:image/png]"
    assert run.result("prompt") == {"stopReason": "end_turn"}


def test_an_image_to_a_process_profile_is_refused_before_anything_starts(facade: Facade) -> None:
    refused = run_sdk_client(
        script(
            facade,
            "marker",
            {"op": "new"},
            {"op": "prompt", "text": "look", "images": [PNG]},
        ),
        facade.env,
    )
    error = refused.error("prompt")
    assert error["code"] == -32602
    assert error["data"]["name"] == "InvalidMessageError"
    assert "prompt[1] is an image block" in error["message"]
    assert 'profile "marker" carries text only' in error["message"]
    assert not refused.updates()
    time.sleep(0.3)
    assert not facade.marker.exists()  # no process was ever started
    # The same session takes text, and then the process does start.
    accepted = run_sdk_client(
        script(facade, "marker", {"op": "new"}, {"op": "prompt", "text": "plain words"}),
        facade.env,
    )
    assert "".join(accepted.chunks()).strip() == "plain words"
    assert facade.marker.exists()


def test_cancel_mid_turn(facade: Facade) -> None:
    started = time.monotonic()
    run = run_sdk_client(
        script(
            facade,
            "demo",
            {"op": "new"},
            {"op": "prompt", "text": "/wait 30", "cancelAfter": 1},
            {"op": "prompt", "text": "after"},
        ),
        facade.env,
    )
    assert time.monotonic() - started < 20
    first, second = run.responses("prompt")
    assert first["result"] == {"stopReason": "cancelled"}
    assert second["result"] == {"stopReason": "end_turn"}
    assert run.chunks()[:2] == ["Waiting 30 s (cancel me)...", " cancelled."]


def test_load_after_a_disconnect_replays_the_turn_that_ended_unattended(facade: Facade) -> None:
    """A client dies mid-turn; the turn goes on; a new client's session/load replays it all."""
    dying = subprocess.Popen(
        [sys.executable, str(SDK_CLIENT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=facade.env,
        start_new_session=True,  # "die" kills its own group: the client and its shim
    )
    steps = [
        {"op": "new"},
        {"op": "prompt", "text": "first words"},
        {"op": "prompt", "text": "/wait 2", "wait": False},
        {"op": "until", "chunks": 4},  # the three of the first turn, one of the second
        {"op": "die"},
    ]
    try:
        stdout, _ = dying.communicate(json.dumps(script(facade, "demo", *steps)).encode(), 30)
    finally:
        kill_group(dying.pid)
    assert dying.returncode == -9
    lines = [json.loads(line) for line in stdout.decode().splitlines()]
    session_id = next(line["result"]["sessionId"] for line in lines if line.get("op") == "new")
    answered = [line["op"] for line in lines if line["type"] == "response"]
    assert answered == ["initialize", "new", "prompt", "until"]  # the second turn: unanswered
    wait_until_idle(facade)  # the second turn finished with nobody attached

    loaded = run_sdk_client(
        script(
            facade,
            "demo",
            {"op": "load", "sessionId": session_id},
            {"op": "prompt", "text": "third"},
        ),
        facade.env,
    )
    assert loaded.result("load") == {}
    replay = [
        (u["sessionUpdate"], u["content"]["text"])
        for u in loaded.updates()
        if u["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")
    ]
    first = reply_chunks("first words", 1, "demo-1", 2)
    assert replay[:7] == [
        ("user_message_chunk", "first words"),
        *[("agent_message_chunk", chunk) for chunk in first],
        ("user_message_chunk", "/wait 2"),
        ("agent_message_chunk", "Waiting 2 s (cancel me)..."),
        ("agent_message_chunk", " done."),
    ]
    # The next turn sees the conversation: the downstream session lived on.
    assert replay[7:9] == [
        ("agent_message_chunk", chunk) for chunk in reply_chunks("third", 3, "demo-1", 0)[:2]
    ]
    assert replay[9][1].startswith("This is turn 3 of session demo-1 ")


def test_list_and_close(facade: Facade) -> None:
    run = run_sdk_client(
        script(
            facade,
            "demo",
            {"op": "new"},
            {"op": "prompt", "text": "the first session"},
            {"op": "new"},
            {"op": "prompt", "text": "the second session"},
            {"op": "list"},
            {"op": "list", "cwd": "/elsewhere"},
        ),
        facade.env,
    )
    first, second = (r["result"]["sessionId"] for r in run.responses("new"))
    listed = run.result("list", 0)["sessions"]
    assert [s["sessionId"] for s in listed] == [second, first]  # newest first
    assert [s["title"] for s in listed] == ["the second session", "the first session"]
    assert {s["cwd"] for s in listed} == {str(facade.work)}
    assert all(s["updatedAt"].endswith("Z") for s in listed)
    assert run.result("list", 1)["sessions"] == []

    processes = [psutil.Process(pid) for pid in agent_pids(facade, first)]
    assert processes  # the demo agent of the first session, still running
    assert agent_pids(facade, second)
    closing = run_sdk_client(
        script(facade, "demo", {"op": "close", "sessionId": first}, {"op": "list"}),
        facade.env,
    )
    assert closing.result("close") == {}
    assert [s["sessionId"] for s in closing.result("list")["sessions"]] == [second]
    assert psutil.wait_procs(processes, timeout=10)[1] == []  # every process of it gone
    assert agent_pids(facade, first) == []
    assert agent_pids(facade, second)  # the other session untouched
    gone = run_sdk_client(
        script(facade, "demo", {"op": "prompt", "sessionId": first, "text": "hello?"}),
        facade.env,
    )
    error = gone.error("prompt")
    assert error["code"] == -32602
    assert error["data"] == {"name": "NotFound", "details": f"Unknown session: {first}"}
