"""The agent layer: :class:`Agent` (run / stream / prompt / history), its config and hooks."""

from oma_bridge.agent.agent import Agent, AgentState
from oma_bridge.agent.config import AgentConfig
from oma_bridge.agent.fork import advertises_fork, fork_config
from oma_bridge.agent.input import (
    PreparedInput,
    PreparedPrompt,
    prepare,
    prepare_prompt,
    prepare_prompt_input,
    prepare_run_input,
)
from oma_bridge.agent.stream import RunStream

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentState",
    "PreparedInput",
    "PreparedPrompt",
    "RunStream",
    "advertises_fork",
    "fork_config",
    "prepare",
    "prepare_prompt",
    "prepare_prompt_input",
    "prepare_run_input",
]
