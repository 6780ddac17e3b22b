"""The agent layer: :class:`Agent` (run / stream / prompt / history), its config and hooks."""

from oma_bridge.agent.agent import (
    Agent,
    AgentConfig,
    AgentState,
    RunStream,
    closing_events,
    prepare_run_input,
)

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentState",
    "RunStream",
    "closing_events",
    "prepare_run_input",
]
