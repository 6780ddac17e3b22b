"""The LLM backend: the model/tool loop of one run over an adapter.

Each turn streams one model answer (token deltas are relayed as ``text``
events as they arrive (docs/decisions.md, D10); deltas that arrived in one network read travel as
one event), then runs the tools it asked for and feeds their
results back, until the model answers without a tool call or ``max_turns``
model turns were made.  Token usage accumulates over the turns; after each
model turn the budget is checked (exceeded only when ``input + output >
budget``): the run then emits ``budget_exceeded`` and stops.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Literal

from oma_bridge.backends import BackendOutcome, RunContext
from oma_bridge.backends.llm.tool_runner import run_tool_calls
from oma_bridge.backends.llm.types import (
    ChatRequest,
    ChatResponse,
    LLMAdapter,
    ReasoningDelta,
    TextDelta,
    ToolSpec,
    ToolUseDelta,
    TurnEnd,
)
from oma_bridge.errors import TokenBudgetExceededError
from oma_bridge.messages import LLMMessage
from oma_bridge.results import StreamEvent
from oma_bridge.telemetry import chat as chat_span
from oma_bridge.tools import ToolDefinition

__all__ = ["LLMBackend"]


class LLMBackend:
    """A :class:`~oma_bridge.backends.Backend` for LLM agents; one per agent, reused."""

    kind: Literal["llm"] = "llm"

    def __init__(
        self,
        adapter: LLMAdapter,
        *,
        model: str,
        tools: tuple[ToolDefinition, ...] = (),
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> None:
        self.adapter = adapter
        self.model = model
        self.tools = tools
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._specs = tuple(ToolSpec.of(tool) for tool in tools)

    async def run(self, ctx: RunContext) -> BackendOutcome:
        conversation: list[LLMMessage] = list(ctx.messages)
        outcome = BackendOutcome()
        for _ in range(ctx.max_turns):
            response = await self._turn(ctx, conversation)
            assistant: LLMMessage = {"role": "assistant", "content": response.content}
            conversation.append(assistant)
            outcome.messages.append(assistant)
            outcome.output = response.text
            outcome.token_usage.add(response.usage)
            used, budget = outcome.token_usage.total, ctx.max_token_budget
            if budget is not None and used > budget:
                outcome.budget_exceeded = True
                error = TokenBudgetExceededError(ctx.agent_name, used, budget)
                await ctx.emit(StreamEvent("budget_exceeded", error))
                return outcome
            calls = response.tool_uses
            if not calls:
                break
            results = await run_tool_calls(self.tools, calls)
            for result in results:
                outcome.tool_calls.append(result.record)
                await ctx.emit(StreamEvent("tool_result", result.block))
            tool_turn: LLMMessage = {"role": "user", "content": [r.block for r in results]}
            conversation.append(tool_turn)
            outcome.messages.append(tool_turn)
        return outcome

    async def _turn(self, ctx: RunContext, conversation: list[LLMMessage]) -> ChatResponse:
        span = chat_span(self.adapter.provider, self.model)  # None when tracing is off
        if span is None:
            return await self._stream_turn(ctx, conversation)
        try:
            response = await self._stream_turn(ctx, conversation)
        except BaseException as error:
            span.end(error=error)
            raise
        usage = response.usage
        span.end(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            finish_reason=response.stop_reason,
        )
        return response

    async def _stream_turn(self, ctx: RunContext, conversation: list[LLMMessage]) -> ChatResponse:
        request = ChatRequest(
            model=self.model,
            messages=conversation,
            system_prompt=ctx.system_prompt,
            tools=self._specs,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
        )
        emit = ctx.emit
        # aclosing: a run cancelled while it emits must close the HTTP stream
        # now, not whenever the suspended generator is collected.
        async with aclosing(self.adapter.stream(request)) as deltas:
            async for delta in deltas:
                # Ordered by frequency: this loop runs once per network read.
                if type(delta) is TextDelta:
                    await emit(StreamEvent("text", delta.text))
                elif isinstance(delta, ReasoningDelta):
                    await emit(StreamEvent("reasoning", delta.text))
                elif isinstance(delta, ToolUseDelta):
                    await emit(StreamEvent("tool_use", delta.block))
                elif isinstance(delta, TurnEnd):
                    return delta.response
        raise RuntimeError(f"{self.adapter.provider} adapter stream ended without TurnEnd")

    async def aclose(self) -> None:
        await self.adapter.aclose()
