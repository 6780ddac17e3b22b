"""Agent: run / stream / prompt / history, copies, state, cancel and timeout."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.errors import InvalidMessageError
from oma_bridge.results import StreamEvent

from .fakes import Journal, ScriptedConfig

pytestmark = pytest.mark.anyio

PNG = "iVBORw0KGgo="


def make_agent(**backend: Any) -> tuple[Agent, Journal]:
    journal = Journal()
    config = AgentConfig(name="tester", backend=ScriptedConfig(journal=journal, **backend))
    return Agent(config), journal


def conversation() -> list[Any]:
    return [
        {"role": "user", "content": [{"type": "text", "text": "first question"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "first answer"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is shown"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
            ],
        },
    ]


async def test_run_string_gives_ok_result_in_wire_shape() -> None:
    agent, journal = make_agent()
    result = await agent.run("hello there", run_id="r1")
    wire = result.to_wire()
    assert set(wire) == {
        "runId",
        "success",
        "output",
        "messages",
        "tokenUsage",
        "toolCalls",
        "status",
    }
    assert wire["runId"] == "r1"
    assert wire["success"] is True
    assert wire["status"] == {"code": "ok"}
    assert wire["output"] == "hello there "
    assert wire["tokenUsage"] == {"input_tokens": 3, "output_tokens": 2}
    assert journal.runs[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hello there"}]}
    ]
    assert agent.state.status == "completed"


async def test_run_reads_and_writes_no_history() -> None:
    journal = Journal()
    seeded = [{"role": "user", "content": [{"type": "text", "text": "seed"}]}]
    agent = Agent(AgentConfig(history=seeded, backend=ScriptedConfig(journal=journal)))
    await agent.run("fresh")
    assert journal.runs[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "fresh"}]}
    ]
    assert agent.get_history() == seeded


async def test_structured_run_input_is_copied_at_call_time() -> None:
    agent, journal = make_agent(delay_s=0.05)
    messages = conversation()
    original = conversation()
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run, messages)
        await anyio.sleep(0.01)
        messages[2]["content"][0]["text"] = "MUTATED"
        messages.append({"role": "user", "content": []})
    assert journal.runs[0]["messages"] == original


async def test_stream_copies_at_call_time_and_validates_before_iteration() -> None:
    agent, journal = make_agent()
    messages = conversation()
    stream = agent.stream(messages)
    messages[2]["content"][0]["text"] = "MUTATED"
    events = [event async for event in stream]
    assert [e.type for e in events] == ["text", "text", "text", "done"]
    assert "".join(e.data for e in events if e.type == "text") == "what is shown "
    assert journal.runs[0]["messages"] == conversation()
    with pytest.raises(InvalidMessageError, match=r"^messages\[0\] must be an object, got null$"):
        agent.stream([None])  # type: ignore[list-item]


async def test_stream_done_equals_result() -> None:
    agent, _ = make_agent()
    stream = agent.stream("a b")
    events = [event async for event in stream]
    done = events[-1]
    assert done.type == "done"
    assert stream.result is done.data
    assert done.to_wire()["data"]["output"] == "a b "


@pytest.mark.parametrize(
    ("method", "bad", "message"),
    [
        ("run", None, "messages must be an array, got null"),
        (
            "run",
            [{"role": "user", "content": "hi"}],
            "messages[0].content must be a ContentBlock[], got string",
        ),
        ("prompt", None, "messages[0].content must be a ContentBlock[], got null"),
        ("prompt", [None], 'messages[0].content[0] must be a content block with a string "type"'),
        (
            "run",
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_use", "id": "1", "name": "f", "input": {"f": print}}
                    ],
                }
            ],
            None,
        ),
    ],
)
async def test_invalid_input_rejected_before_hooks_and_state(
    method: str, bad: Any, message: str | None
) -> None:
    calls: list[Any] = []
    journal = Journal()
    agent = Agent(
        AgentConfig(
            before_run=lambda ctx: calls.append(ctx) or ctx, backend=ScriptedConfig(journal=journal)
        )
    )
    with pytest.raises(InvalidMessageError) as caught:
        await getattr(agent, method)(bad)
    if message is not None:
        assert str(caught.value) == message
    else:
        assert str(caught.value).startswith("messages must contain cloneable structured data")
    assert calls == []
    assert journal.created == 0
    assert agent.state.status == "idle"
    assert agent.get_history() == []


def test_invalid_history_fails_at_construction() -> None:
    with pytest.raises(
        InvalidMessageError, match=r"^messages\[0\]\.content must be a ContentBlock\[\], got null$"
    ):
        AgentConfig(history=[{"role": "user", "content": None}])


async def test_prompt_appends_user_turn_and_run_messages() -> None:
    seeded = [{"role": "user", "content": [{"type": "text", "text": "seed"}]}]
    journal = Journal()
    agent = Agent(AgentConfig(history=seeded, backend=ScriptedConfig(journal=journal)))
    blocks = [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]
    result = await agent.prompt(blocks)
    blocks[0]["text"] = "MUTATED"
    history = agent.get_history()
    assert history[0] == seeded[0]
    assert history[1]["content"][0] == {"type": "text", "text": "look"}
    assert history[2] == result.messages[0]
    # The model saw the history and the turn.
    assert [m["content"][0]["text"] for m in journal.runs[0]["messages"]] == ["seed", "look"]
    # get_history returns copies.
    history[1]["content"].clear()
    assert agent.get_history()[1]["content"][0]["text"] == "look"


async def test_failed_prompt_keeps_user_turn_and_invalid_is_not_appended() -> None:
    agent, _ = make_agent(fail="boom")
    result = await agent.prompt("try this")
    assert result.success is False
    assert result.status.code == "error"
    assert result.error_info is not None and result.error_info.kind == "backend"
    assert agent.get_history() == [
        {"role": "user", "content": [{"type": "text", "text": "try this"}]}
    ]
    with pytest.raises(InvalidMessageError):
        await agent.prompt([{"type": 3}])  # type: ignore[list-item]
    assert len(agent.get_history()) == 1


async def test_reset_clears_history_and_keeps_backend() -> None:
    agent, journal = make_agent()
    await agent.prompt("one")
    agent.reset()
    assert agent.get_history() == []
    assert agent.state.status == "idle"
    await agent.run("two")
    assert journal.created == 1


async def test_cancel_mid_run_gives_cancelled_with_partial_output() -> None:
    agent, journal = make_agent(delay_s=0.2)
    result_box: list[Any] = []

    async def runner() -> None:
        result_box.append(await agent.run("one two three four", run_id="c1"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(runner)
        await anyio.sleep(0.05)
        assert agent.cancel("c1") is True
    result = result_box[0]
    assert result.status.code == "cancelled"
    assert result.success is False
    assert result.output == "one "
    assert result.error_info.name == "AbortError"
    assert journal.finished_cleanup == 1
    assert agent.cancel("c1") is False


async def test_cancel_during_before_run_never_calls_backend() -> None:
    journal = Journal()
    agent: Agent

    async def slow_hook(ctx: dict[str, Any]) -> dict[str, Any]:
        agent.cancel("h1")
        await anyio.sleep(0.01)
        return ctx

    agent = Agent(AgentConfig(before_run=slow_hook, backend=ScriptedConfig(journal=journal)))
    result = await agent.run("x", run_id="h1")
    assert result.status.code == "cancelled"
    assert journal.created == 0


async def test_whole_run_timeout() -> None:
    journal = Journal()
    agent = Agent(
        AgentConfig(
            name="slowpoke", timeout_ms=100, backend=ScriptedConfig(journal=journal, delay_s=1)
        )
    )
    result = await agent.run("a b c")
    assert result.status.code == "timeout"
    assert result.status.message == 'Agent "slowpoke" exceeded whole-run timeout of 100ms'
    assert result.error_info is not None
    assert (result.error_info.kind, result.error_info.name) == ("timeout", "TimeoutError")
    assert journal.finished_cleanup == 1


async def test_breaking_out_of_stream_cancels_the_run() -> None:
    agent, journal = make_agent(delay_s=0.05)
    async for event in agent.stream("a b c d e f g h"):
        assert event.type == "text"
        break
    with anyio.fail_after(5):
        while journal.finished_cleanup == 0:  # noqa: ASYNC110 - polling a plain counter
            await anyio.sleep(0.01)
    assert agent.active_run_ids == []


async def test_stream_aclose_and_context_manager_cancel_the_run() -> None:
    agent, journal = make_agent(delay_s=0.05)
    async with agent.stream("a b c d e") as stream:
        first = await stream.__anext__()
        assert first == StreamEvent("text", "a ")
    assert journal.finished_cleanup == 1
    assert agent.active_run_ids == []


async def test_stream_cancel_handle_ends_with_cancelled_done() -> None:
    agent, _ = make_agent(delay_s=0.05)
    stream = agent.stream("a b c d e")
    events = []
    async for event in stream:
        events.append(event)
        if len(events) == 1:
            assert stream.cancel() is True
    assert events[-1].type == "done"
    assert events[-1].data.status.code == "cancelled"


async def test_backend_failure_in_stream_yields_error_then_done() -> None:
    agent, _ = make_agent(fail="exploded")
    events = [e async for e in agent.stream("x")]
    assert [e.type for e in events] == ["text", "error", "done"]
    assert events[1].to_wire()["data"] == {
        "name": "BackendError",
        "code": "BACKEND_ERROR",
        "message": "exploded",
    }
    assert events[2].data.success is False


async def test_budget_exceeded_outcome_is_budget_exhausted() -> None:
    journal = Journal()
    agent = Agent(
        AgentConfig(
            name="b",
            max_token_budget=4,
            backend=ScriptedConfig(journal=journal, budget_exceeded=True),
        )
    )
    result = await agent.run("x")
    assert result.status.code == "budget_exhausted"
    assert result.budget_exceeded is True
    assert result.status.message == 'Agent "b" exceeded token budget: 5 tokens used (budget: 4)'
    assert result.to_wire()["budgetExceeded"] is True
    assert journal.runs[0]["max_token_budget"] == 4


async def test_backend_cancelled_outcome_is_cancelled() -> None:
    agent, _ = make_agent(cancelled=True)
    result = await agent.run("x")
    assert (result.status.code, result.success) == ("cancelled", False)


async def test_close_disposes_backend_once_created() -> None:
    agent, journal = make_agent()
    await agent.run("x")
    await agent.close()
    assert journal.closed == 1
    with pytest.raises(RuntimeError, match="closed"):
        await agent.run("y")


async def test_prompt_copy_refusal_names_the_block_path() -> None:
    agent, _ = make_agent()
    blocks = [
        {"type": "text", "text": "x"},
        {"type": "tool_use", "id": "1", "name": "f", "input": {"bad": {1, 2}}},
    ]
    with pytest.raises(InvalidMessageError) as caught:
        await agent.prompt(blocks)
    assert caught.value.path == "messages[0].content[1].input.bad"
    assert agent.get_history() == []


async def test_close_waits_for_runs_awaited_elsewhere() -> None:
    agent, journal = make_agent(delay_s=0.2)
    box: list[Any] = []

    async def runner() -> None:
        box.append(await agent.run("a b c d"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(runner)
        await anyio.sleep(0.05)
        await agent.close()
        # The run's own clean-up finished before close() returned.
        assert journal.finished_cleanup == 1
    assert box[0].status.code == "cancelled"


def _children_of_this_task() -> list[anyio.TaskInfo]:
    me = anyio.get_current_task().id
    return [task for task in anyio.get_running_tasks() if task.parent_id == me]


async def test_an_entered_stream_runs_its_producer_in_the_blocks_task_group() -> None:
    agent, journal = make_agent(delay_s=0.05)
    async with agent.stream("a b c d e") as stream:
        assert await stream.__anext__() == StreamEvent("text", "a ")
        assert [task.name for task in _children_of_this_task()] != []
    assert _children_of_this_task() == []
    assert journal.finished_cleanup == 1 and agent.active_run_ids == []


async def test_an_exception_in_the_block_stops_the_run_and_leaves_as_itself() -> None:
    agent, journal = make_agent(delay_s=0.05)
    with pytest.raises(KeyError, match="the consumer's own"):
        async with agent.stream("a b c d e") as stream:
            async for _event in stream:
                raise KeyError("the consumer's own")
    assert journal.finished_cleanup == 1 and agent.active_run_ids == []


async def test_close_stops_an_entered_stream_iterated_in_another_task() -> None:
    agent, journal = make_agent(delay_s=0.05)
    seen: list[StreamEvent] = []

    async def consume() -> None:
        async with agent.stream("a b c d e f g h i j") as stream:
            async for event in stream:
                seen.append(event)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        with anyio.fail_after(5):
            while not seen:  # noqa: ASYNC110 - polling a plain list
                await anyio.sleep(0.01)
        await agent.close()
        # The stream's run and its clean-up ended before close() returned.
        assert journal.finished_cleanup == 1 and not agent._streams  # noqa: SLF001 — no public view of the agent's live streams
    assert len(seen) < 10


async def test_close_stops_a_bare_stream_its_consumer_dropped() -> None:
    agent, journal = make_agent(delay_s=0.05)
    stream = agent.stream("a b c d e f g h i j")
    assert await stream.__anext__() == StreamEvent("text", "a ")
    await agent.close()
    assert journal.finished_cleanup == 1 and not agent._streams  # noqa: SLF001 — no public view of the agent's live streams
    await stream.aclose()


async def test_prepared_input_is_taken_in_once_and_serves_one_run() -> None:
    agent, journal = make_agent()
    prepared = agent.prepare(conversation())
    assert prepared.prompt is None and prepared.value == conversation()
    result = await agent.run(prepared, run_id="r1")
    assert result.success and journal.runs[0]["messages"] == conversation()
    with pytest.raises(RuntimeError, match="serves one run"):
        await agent.run(prepared)
    with pytest.raises(RuntimeError, match="serves one run"):
        agent.stream(prepared)
    turn = agent.prepare_prompt("hello")
    assert turn.prompt == "hello"
    assert (await agent.prompt(turn)).success
    assert agent.get_history()[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "hello"}],
    }
    with pytest.raises(InvalidMessageError):
        agent.prepare([{"role": "robot", "content": []}])


async def test_structured_input_prepared_for_an_llm_agent_meets_a_text_only_ones_boundary() -> None:
    llm, _ = make_agent()
    text_only, journal = make_agent(kind="process")
    prepared = llm.prepare(conversation())
    with pytest.raises(InvalidMessageError, match="accepts string prompts only"):
        await text_only.run(prepared)
    assert journal.runs == []
    assert (await text_only.run(llm.prepare("plain text"))).success


async def test_run_takes_a_permission_handler_and_an_event_listener() -> None:
    agent, journal = make_agent()
    events: list[StreamEvent] = []

    async def listen(event: StreamEvent) -> None:
        events.append(event)

    result = await agent.run("a b", on_event=listen, max_token_budget=7)
    assert [event.data for event in events] == ["a ", "b "]
    assert result.output == "a b " and journal.runs[0]["max_token_budget"] == 7
