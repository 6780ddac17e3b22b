"""beforeRun / afterRun: the reference's rules and worked examples."""

from __future__ import annotations

from typing import Any

import pytest

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.agent.hooks import ensure_outcome, rewrite_last_user_prompt
from oma_bridge.results import AgentRunResult, ErrorInfo, RunStatus

from .fakes import Journal, ScriptedConfig

pytestmark = pytest.mark.anyio

PNG = "iVBORw0KGgo="


def img(tag: str) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": f"image/{tag}", "data": PNG},
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def agent_with(**config: Any) -> tuple[Agent, Journal]:
    journal = Journal()
    backend = config.pop("backend_options", {})
    return Agent(AgentConfig(backend=ScriptedConfig(journal=journal, **backend), **config)), journal


def test_rewrite_replaces_first_text_block_and_drops_others() -> None:
    messages = [user(img("before"), text("text1"), img("after"), text("text2"))]
    assert rewrite_last_user_prompt(messages, "new") == [
        user(img("before"), text("new"), img("after"))
    ]


def test_rewrite_image_only_turn_prepends_text() -> None:
    assert rewrite_last_user_prompt([user(img("png"))], "describe") == [
        user(text("describe"), img("png"))
    ]


def test_rewrite_without_user_message_changes_nothing() -> None:
    messages = [{"role": "assistant", "content": [text("hi")]}]
    assert rewrite_last_user_prompt(messages, "x") == messages


async def test_context_prompt_joins_text_blocks_without_separator() -> None:
    seen: list[dict[str, Any]] = []

    def hook(ctx: dict[str, Any]) -> dict[str, Any]:
        seen.append(ctx)
        return ctx

    agent, _ = agent_with(before_run=hook)
    await agent.run([user(text("first"), img("png"), text("second"))])
    assert seen[0]["prompt"] == "firstsecond"


async def test_image_only_turn_has_empty_context_prompt_and_rewrite_prepends() -> None:
    seen: list[str] = []

    def hook(ctx: dict[str, Any]) -> dict[str, Any]:
        seen.append(ctx["prompt"])
        return {**ctx, "prompt": "describe"}

    agent, journal = agent_with(before_run=hook)
    await agent.run([user(img("png"))])
    assert seen == [""]
    assert journal.runs[0]["messages"] == [user(text("describe"), img("png"))]


async def test_async_hook_rewrites_prompt() -> None:
    async def hook(ctx: dict[str, Any]) -> dict[str, Any]:
        return {"prompt": "rewritten", "agent": ctx["agent"]}

    agent, journal = agent_with(before_run=hook)
    result = await agent.run("original")
    assert journal.runs[0]["messages"] == [user(text("rewritten"))]
    assert result.output == "rewritten "


async def test_unchanged_hook_result_is_a_no_op() -> None:
    agent, journal = agent_with(before_run=lambda ctx: ctx)
    messages = [user(img("a"), text("x"), text("y"))]
    await agent.run(messages)
    assert journal.runs[0]["messages"] == messages


async def test_messages_apply_before_prompt_rewrite() -> None:
    replacement = [
        user(text("earlier")),
        {"role": "assistant", "content": [text("reply")]},
        user(text("replaced"), img("png")),
    ]

    def hook(ctx: dict[str, Any]) -> dict[str, Any]:
        return {"prompt": "P", "messages": replacement, "agent": ctx["agent"]}

    agent, journal = agent_with(before_run=hook)
    await agent.run("original")
    assert journal.runs[0]["messages"] == [*replacement[:2], user(text("P"), img("png"))]


async def test_returned_messages_used_exactly_when_prompt_equals_original() -> None:
    replacement = [user(text("completely"), text("different"))]

    def hook(ctx: dict[str, Any]) -> dict[str, Any]:
        return {"prompt": ctx["prompt"], "messages": replacement}

    agent, journal = agent_with(before_run=hook)
    await agent.run("original")
    assert journal.runs[0]["messages"] == replacement


async def test_prompt_compared_with_original_context_prompt() -> None:
    # The hook returns new messages and the *original* prompt: no rewrite,
    # although the prompt differs from the new messages' text.
    def hook(ctx: dict[str, Any]) -> dict[str, Any]:
        return {"prompt": "orig", "messages": [user(text("new text"))]}

    agent, journal = agent_with(before_run=hook)
    await agent.run("orig")
    assert journal.runs[0]["messages"] == [user(text("new text"))]


async def test_history_keeps_original_turn_while_model_sees_rewrite() -> None:
    agent, journal = agent_with(before_run=lambda ctx: {**ctx, "prompt": "hook-modified"})
    await agent.prompt("original message")
    assert journal.runs[0]["messages"][-1] == user(text("hook-modified"))
    assert agent.get_history()[0] == user(text("original message"))


async def test_prompt_blocks_with_history_and_rewrite() -> None:
    seed = [user(text("seed")), {"role": "assistant", "content": [text("ok")]}]
    agent, journal = agent_with(before_run=lambda ctx: {**ctx, "prompt": "NEW"}, history=seed)
    await agent.prompt([img("a"), text("t1"), img("b"), text("t2")])
    assert journal.runs[0]["messages"] == [*seed, user(img("a"), text("NEW"), img("b"))]
    assert agent.get_history()[2] == user(img("a"), text("t1"), img("b"), text("t2"))


async def test_hook_mutating_context_messages_does_not_touch_caller_data() -> None:
    messages = [user(text("keep me"))]

    def hook(ctx: dict[str, Any]) -> dict[str, Any]:
        ctx["messages"][0]["content"][0]["text"] = "changed"
        return ctx

    agent, journal = agent_with(before_run=hook)
    await agent.run(messages)
    assert messages == [user(text("keep me"))]
    assert journal.runs[0]["messages"] == [user(text("changed"))]


async def test_context_agent_has_no_hooks() -> None:
    seen: list[Any] = []

    def hook(ctx: dict[str, Any]) -> dict[str, Any]:
        seen.append(ctx["agent"])
        return ctx

    agent, _ = agent_with(before_run=hook, after_run=lambda r: r, name="named")
    await agent.run("x")
    assert seen[0].name == "named"
    assert seen[0].before_run is None and seen[0].after_run is None


@pytest.mark.parametrize(
    ("hook", "message"),
    [
        (lambda ctx: (_ for _ in ()).throw(RuntimeError("hook blew up")), "hook blew up"),
        (lambda ctx: {"prompt": 5}, "beforeRun.prompt must be a string"),
        (
            lambda ctx: {"prompt": "x", "messages": [{"content": None}]},
            "messages[0].content must be a ContentBlock[], got null",
        ),
        (lambda ctx: None, "beforeRun must return an object with a string prompt, got NoneType"),
    ],
)
async def test_failing_before_run_fails_with_callback_kind_and_no_backend_call(
    hook: Any, message: str
) -> None:
    agent, journal = agent_with(before_run=hook)
    result = await agent.run("x")
    assert result.success is False
    assert result.status.code == "error"
    assert result.output == message
    assert result.error_info is not None and result.error_info.kind == "callback"
    assert journal.created == 0
    assert result.messages == [] and result.token_usage.total == 0


async def test_failing_before_run_in_stream_yields_error_and_no_done() -> None:
    def hook(ctx: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("nope")

    agent, journal = agent_with(before_run=hook)
    stream = agent.stream("x")
    events = [e async for e in stream]
    assert [e.type for e in events] == ["error"]
    assert events[0].data == {"name": "ValueError", "message": "nope"}
    assert stream.result is not None and stream.result.error_info is not None
    assert stream.result.error_info.kind == "callback"
    assert journal.created == 0


async def test_after_run_can_change_and_fail_the_result() -> None:
    def flip(result: AgentRunResult) -> AgentRunResult:
        result.output = "edited"
        result.success = False
        return result

    agent, _ = agent_with(after_run=flip)
    result = await agent.run("x")
    assert (result.output, result.success, result.status.code) == ("edited", False, "error")
    assert result.status.message == "edited"


async def test_after_run_can_turn_a_failure_into_success() -> None:
    def rescue(result: AgentRunResult) -> AgentRunResult:
        result.success = True
        return result

    agent, _ = agent_with(after_run=rescue, backend_options={"cancelled": True})
    result = await agent.run("x")
    assert (result.success, result.status.code, result.error_info) == (True, "ok", None)


async def test_after_run_cannot_escape_a_budget_overrun() -> None:
    def rescue(result: AgentRunResult) -> AgentRunResult:
        result.success = True
        return result

    agent, _ = agent_with(
        after_run=rescue, max_token_budget=1, backend_options={"budget_exceeded": True}
    )
    result = await agent.run("x")
    assert (result.success, result.status.code) == (False, "budget_exhausted")


async def test_after_run_raising_fails_with_callback_and_stream_has_no_done() -> None:
    def boom(result: AgentRunResult) -> AgentRunResult:
        raise RuntimeError("after failed")

    agent, _ = agent_with(after_run=boom)
    result = await agent.run("x")
    assert (result.success, result.error_info and result.error_info.kind) == (False, "callback")
    events = [e async for e in agent.stream("y")]
    assert events[-1].type == "error"
    assert "done" not in [e.type for e in events]


async def test_hook_order_on_every_prompt() -> None:
    order: list[str] = []

    def before(ctx: dict[str, Any]) -> dict[str, Any]:
        order.append("before")
        return ctx

    async def after(result: AgentRunResult) -> AgentRunResult:
        order.append("after")
        return result

    agent, journal = agent_with(before_run=before, after_run=after)
    await agent.prompt("one")
    order.append(f"runs={len(journal.runs)}")
    await agent.prompt("two")
    assert order == ["before", "after", "runs=1", "before", "after"]


def test_ensure_outcome_invariant() -> None:
    ok_with_error_status = AgentRunResult(
        run_id="r",
        success=True,
        output="o",
        status=RunStatus("error", "x"),
        error_info=ErrorInfo("backend"),
    )
    fixed = ensure_outcome(ok_with_error_status)
    assert (fixed.success, fixed.status.code, fixed.error_info) == (True, "ok", None)
    failed_with_ok = ensure_outcome(AgentRunResult(run_id="r", success=False, output="why"))
    assert (failed_with_ok.status.code, failed_with_ok.status.message) == ("error", "why")
    budget = ensure_outcome(
        AgentRunResult(run_id="r", success=True, output="", budget_exceeded=True)
    )
    assert (budget.success, budget.status.code) == (False, "budget_exhausted")
