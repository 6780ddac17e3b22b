"""Executing a model's tool calls in-process.

A tool's executor may be sync or async.  A sync one runs in a worker thread,
so a slow tool cannot freeze the daemon's event loop (nor hold up the
cancellation of its run); an async one runs on the loop.  Whatever a tool
raises becomes an error ``tool_result`` that the model sees (OMA's rule),
never a failed run; a cancelled run still cancels an async tool.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import orjson

from oma_bridge.messages import ToolResultBlock
from oma_bridge.redaction import redact
from oma_bridge.results import ToolCallRecord
from oma_bridge.tools import ToolDefinition

__all__ = ["ToolOutcome", "run_tool_calls"]


@dataclass(frozen=True)
class ToolOutcome:
    block: ToolResultBlock
    record: ToolCallRecord


def _as_text(value: Any) -> str:
    """A tool's return value as the text the model reads (JSON for data)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


async def _call(tool: ToolDefinition, arguments: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(tool.execute):
        return await tool.execute(arguments)
    # abandon_on_cancel: a cancelled or timed-out run ends now; a thread
    # cannot be interrupted, so a blocking tool finishes on its own.
    result = await anyio.to_thread.run_sync(tool.execute, arguments, abandon_on_cancel=True)
    if inspect.isawaitable(result):
        result = await result
    return result


async def run_tool(tools: Mapping[str, ToolDefinition], call: Mapping[str, Any]) -> ToolOutcome:
    """Run one ``tool_use`` block; failures become ``is_error`` results."""
    name = str(call["name"])
    arguments = call.get("input") or {}
    started = time.perf_counter()
    error = False
    tool = tools.get(name)
    if tool is None:
        output, error = f'Tool "{name}" is not available', True
    else:
        try:
            output = _as_text(await _call(tool, dict(arguments)))
        except Exception as exc:  # a tool's failure is the model's information
            output, error = redact(f"Tool {name!r} failed: {type(exc).__name__}: {exc}"), True
    duration = round((time.perf_counter() - started) * 1000)
    block: ToolResultBlock = {"type": "tool_result", "tool_use_id": call["id"], "content": output}
    if error:
        block["is_error"] = True
    return ToolOutcome(block, ToolCallRecord(name, arguments, output, duration))


async def run_tool_calls(
    tools: Sequence[ToolDefinition], calls: Sequence[Mapping[str, Any]]
) -> list[ToolOutcome]:
    """Run a turn's tool calls concurrently (as OMA does); results keep the calls' order."""
    by_name = {tool.name: tool for tool in tools}
    outcomes: list[ToolOutcome | None] = [None] * len(calls)

    async def one(i: int) -> None:
        outcomes[i] = await run_tool(by_name, calls[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(calls)):
            tg.start_soon(one, i)
    return [o for o in outcomes if o is not None]
