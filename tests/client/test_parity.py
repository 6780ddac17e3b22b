"""The same API remote and local (PROTOCOL §18.4): ``RemoteAgent`` offers every method of
``Agent`` that has a wire method, with the same name and the same result.

Both classes are enumerated, so a method added to ``Agent`` fails here until
it is given a wire method (and a ``RemoteAgent`` twin) or is listed as local.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable
from typing import Any

from oma_bridge.agent import Agent, RunStream
from oma_bridge.client import RemoteAgent, RemoteStream
from oma_bridge.messages import LLMMessage
from oma_bridge.wire.schema import METHODS

#: Each public method of ``Agent`` and its wire method; ``None``: local only, and why.
WIRE: dict[str, str | None] = {
    "run": "agent/run",
    "stream": "agent/stream",
    "prompt": "agent/prompt",
    "get_history": "agent/history",
    "reset": "agent/reset",
    "close": "agent/close",
    "fork": "agent/fork",
    "cancel": "run/cancel",
    "prepare": None,  # validates input in the caller's process: the daemon validates its own
    "prepare_prompt": None,  # likewise
    # An ACP session's own requests (session/set_mode, ...): the daemon's protocol has no
    # method for them; the ACP facade serves them to its clients (docs/acp.md).
    "session_request": None,
    # What the agent said it can do (PROTOCOL §22.2): the daemon shows it per profile,
    # in agents/list and agents/probe (`Client.list_agents`, `Client.probe_agents`).
    "advertised": None,
    "probe": None,
}

#: A stream's face: what ``RunStream`` offers and ``RemoteStream`` offers too.
STREAM_MEMBERS = ("run_id", "result", "cancel", "aclose", "__aenter__", "__aexit__")


def public_methods(cls: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def result_of(method: Callable[..., Any]) -> Any:
    """The return annotation, resolved (the client's ``LLMMessage`` is a TYPE_CHECKING name)."""
    module = sys.modules[method.__module__]
    hints = typing.get_type_hints(method, globalns={**vars(module), "LLMMessage": LLMMessage})
    return hints["return"]


def test_every_agent_method_is_classified() -> None:
    assert public_methods(Agent) == set(WIRE)
    assert {wire for wire in WIRE.values() if wire is not None} <= set(METHODS)


def test_remote_agent_has_each_wire_method_with_the_same_name_and_result() -> None:
    for name, wire in WIRE.items():
        if wire is None:
            continue
        local, remote = getattr(Agent, name), getattr(RemoteAgent, name, None)
        assert remote is not None, f"RemoteAgent has no {name} ({wire})"
        if name == "stream":
            assert (result_of(local), result_of(remote)) == (RunStream, RemoteStream)
            continue
        if name == "fork":  # a fork is an agent of the same side
            assert (result_of(local), result_of(remote)) == (Agent, RemoteAgent)
            continue
        assert inspect.iscoroutinefunction(remote), f"RemoteAgent.{name} is a request: async"
        assert result_of(remote) == result_of(local), name


def test_a_remote_stream_has_a_run_streams_face() -> None:
    remote = RemoteStream(object(), "agt_x", "hi", "r-1")  # type: ignore[arg-type]
    assert [name for name in STREAM_MEMBERS if not hasattr(remote, name)] == []
    assert remote.result is None  # an AgentRunResult once it has ended, as RunStream's
    assert remote.__aiter__() is remote  # an iterator of its own, not an async generator
