"""In-process tools for LLM-backed agents."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ToolDefinition", "ToolExecutor"]

#: Called with the tool's ``input`` object; returns the output text (or any
#: JSON data, sent as its JSON text).  Sync or async.  A tool that raises
#: becomes an error ``tool_result``, not a failed run.
ToolExecutor: TypeAlias = Callable[[dict[str, Any]], Any | Awaitable[Any]]


class ToolDefinition(BaseModel):
    """A tool the model may call: name, description, JSON Schema input, executor."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = ""
    input_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    execute: ToolExecutor
