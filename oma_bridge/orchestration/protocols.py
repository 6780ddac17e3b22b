"""What a team run needs of the orchestrator that starts it: :class:`TeamOrchestrator`.

:mod:`.teams` runs task graphs and coordinated teams for
:class:`~oma_bridge.orchestration.orchestrator.OpenMultiAgent`, which imports
it; the team run sees its orchestrator only through this protocol, so the
import points one way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeAlias

from oma_bridge.agent import Agent, AgentConfig, PreparedInput
from oma_bridge.orchestration.scheduler import RunControl
from oma_bridge.results import AgentRunResult, RunIdentity

__all__ = ["ProgressCallback", "TeamOrchestrator"]

#: ``on_progress({"type", "agent", "data"})``; sync or async.
ProgressCallback: TypeAlias = Callable[[dict[str, Any]], Any]


class TeamOrchestrator(Protocol):
    """The orchestrator's budgets, defaults, progress and run path, as a team run uses them."""

    max_token_budget: int | None
    max_cost_budget: float | None

    def effective_config(self, config: AgentConfig) -> AgentConfig:
        """``config`` with the orchestrator's default model and provider filled in."""

    def progress_sender(
        self, on_progress: ProgressCallback | None
    ) -> Callable[[dict[str, Any]], Awaitable[None]]:
        """Send an event to the orchestrator's listener and to a per-call one, quietly."""

    def is_live(self, run_id: str) -> bool:
        """Whether a run with this id is running."""

    def tracking_team(
        self, run_id: str, control: RunControl
    ) -> contextlib.AbstractContextManager[None]:
        """``run_id`` is live (and ``cancel(run_id)`` reaches ``control``) inside the block."""

    async def run_observed(
        self,
        agent: Agent,
        run_input: PreparedInput,
        *,
        identity: RunIdentity,
        run_id: str,
        start_data: Any,
        progress: Callable[[str, Any], Awaitable[None]],
        max_token_budget: int | None,
        phase: str = "agent",
        task_id: str | None = None,
        stopped: Callable[[], bool] | None = None,
        close: bool = False,
    ) -> tuple[AgentRunResult, float | None]:
        """One run of prepared input with its progress, trace and budgets."""
