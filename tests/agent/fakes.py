"""A scripted in-process backend that exists only in the tests.

It records what it was given and answers with the text of the last user
message, word by word; knobs make it slow, fail, overrun a budget or end as
cancelled.  With ``kind`` ``"process"`` or ``"acp"`` it stands in for a text-only backend, so
the boundary rules of the agent layer can be tested without processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from oma_bridge.backends import Backend, BackendKind, BackendOutcome, RunContext
from oma_bridge.errors import BackendError
from oma_bridge.messages import copy_messages, last_user_text
from oma_bridge.results import StreamEvent, TokenUsage


@dataclass
class Journal:
    """What the backend saw, shared between a config and its backends."""

    created: int = 0
    runs: list[dict[str, Any]] = field(default_factory=list)
    finished_cleanup: int = 0
    closed: int = 0


@dataclass(frozen=True, eq=False)
class ScriptedConfig:
    kind: BackendKind = "llm"
    journal: Journal = field(default_factory=Journal)
    delay_s: float = 0.0
    fail: str | None = None
    budget_exceeded: bool = False
    cancelled: bool = False
    usage: tuple[int, int] = (3, 2)
    #: Emit one tool_use / tool_result pair per word, as an LLM tool loop would.
    tool_events: bool = False

    def create(self, *, agent_name: str) -> Backend:
        self.journal.created += 1
        return ScriptedBackend(self)


class ScriptedBackend:
    def __init__(self, config: ScriptedConfig) -> None:
        self.config = config
        self.kind = config.kind

    async def run(self, ctx: RunContext) -> BackendOutcome:
        journal = self.config.journal
        journal.runs.append(
            {
                "messages": copy_messages(ctx.messages),
                "system_prompt": ctx.system_prompt,
                "run_id": ctx.run_id,
                "max_token_budget": ctx.max_token_budget,
            }
        )
        text = last_user_text(ctx.messages, "\n").strip()
        try:
            for index, word in enumerate(text.split()):
                if self.config.tool_events:
                    use = {"type": "tool_use", "id": f"t{index}", "name": "lookup", "input": {}}
                    await ctx.emit(StreamEvent("tool_use", use))
                    await ctx.emit(
                        StreamEvent(
                            "tool_result",
                            {"type": "tool_result", "tool_use_id": f"t{index}", "content": word},
                        )
                    )
                await ctx.emit(StreamEvent("text", word + " "))
                if self.config.delay_s:
                    await anyio.sleep(self.config.delay_s)
            if self.config.fail:
                raise BackendError(self.config.fail)
        finally:
            journal.finished_cleanup += 1
        output = " ".join(text.split()) + (" " if text else "")
        return BackendOutcome(
            output=output,
            messages=[{"role": "assistant", "content": [{"type": "text", "text": output}]}],
            token_usage=TokenUsage(*self.config.usage),
            budget_exceeded=self.config.budget_exceeded,
            cancelled=self.config.cancelled,
        )

    async def aclose(self) -> None:
        self.config.journal.closed += 1
