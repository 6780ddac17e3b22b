"""The text-only boundary of external backends, in the agent layer."""

from __future__ import annotations

from typing import Any

import pytest

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.errors import InvalidMessageError

from .fakes import Journal, ScriptedConfig

pytestmark = pytest.mark.anyio

STRUCTURED = (
    "The {kind} external backend accepts string prompts only; structured messages or "
    "content blocks cannot be forwarded without loss."
)
CHANGED = (
    "The {kind} external backend accepts beforeRun.prompt rewrites only; "
    "beforeRun.messages cannot be forwarded without loss."
)


def external(kind: str = "process", **config: Any) -> tuple[Agent, Journal, list[Any]]:
    journal = Journal()
    hook_calls: list[Any] = []
    before = config.pop("before_run", None)

    def spy(ctx: dict[str, Any]) -> Any:
        hook_calls.append(ctx)
        return before(ctx) if before else ctx

    agent = Agent(
        AgentConfig(
            name="ext",
            before_run=spy,
            backend=ScriptedConfig(journal=journal, kind=kind),
            **config,
        )  # type: ignore[arg-type]
    )
    return agent, journal, hook_calls


@pytest.mark.parametrize("kind", ["process", "acp"])
@pytest.mark.parametrize(
    ("method", "value"),
    [
        ("run", [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
        ("run", []),
        ("prompt", [{"type": "text", "text": "hi"}]),
        ("prompt", []),
    ],
)
async def test_structured_input_refused_before_hooks_and_backend(
    kind: str, method: str, value: Any
) -> None:
    agent, journal, hooks = external(kind)
    with pytest.raises(InvalidMessageError) as caught:
        await getattr(agent, method)(value)
    assert str(caught.value) == STRUCTURED.format(kind=kind)
    assert caught.value.code == "INVALID_MESSAGE"
    assert hooks == [] and journal.created == 0
    assert agent.get_history() == [] and agent.state.status == "idle"


async def test_stream_refuses_structured_input_at_call_time() -> None:
    agent, journal, hooks = external("acp")
    with pytest.raises(InvalidMessageError, match="accepts string prompts only"):
        agent.stream([{"role": "user", "content": []}])
    assert hooks == [] and journal.created == 0


async def test_malformed_input_gets_the_shape_error_first() -> None:
    agent, _, _ = external()
    with pytest.raises(InvalidMessageError, match=r"^messages\[0\] must be an object, got number$"):
        await agent.run([1])  # type: ignore[list-item]


async def test_before_run_changing_messages_fails_the_run() -> None:
    def change(ctx: dict[str, Any]) -> dict[str, Any]:
        return {
            **ctx,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "other"}]}],
        }

    agent, journal, _ = external("acp", before_run=change)
    result = await agent.run("original")
    assert result.success is False
    assert result.status.code == "error"
    assert result.output == CHANGED.format(kind="acp")
    assert result.error_info is not None and result.error_info.kind == "callback"
    assert journal.created == 0


async def test_in_place_mutation_of_context_messages_counts_as_a_change() -> None:
    def mutate(ctx: dict[str, Any]) -> dict[str, Any]:
        ctx["messages"][0]["content"][0]["text"] = "sneaky"
        return ctx

    agent, journal, _ = external(before_run=mutate)
    result = await agent.run("original")
    assert result.output == CHANGED.format(kind="process")
    assert journal.created == 0


async def test_unchanged_messages_and_rewritten_prompt_go_through() -> None:
    agent, journal, _ = external(before_run=lambda ctx: {**ctx, "prompt": "rewritten"})
    result = await agent.run("original")
    assert result.success is True
    assert result.output == "rewritten "
    assert journal.runs[0]["messages"][-1]["content"] == [{"type": "text", "text": "rewritten"}]


async def test_history_is_kept_for_external_agents_too() -> None:
    seed = [{"role": "user", "content": [{"type": "text", "text": "seed"}]}]
    agent, _, _ = external(history=seed)
    await agent.prompt("turn")
    assert [m["content"][0]["text"] for m in agent.get_history()] == ["seed", "turn", "turn "]
