"""``TurnState``: one run's turn of an ACP session, made for the run and never reused.

What the session's callbacks need to answer the agent during a run lives
here, not in slots of the backend reset after each run: the run's id, its
permission handler and its client's services, the turn's phase, and the
mapping of its updates (:class:`~oma_bridge.backends.acp.turn.Turn`).  A
request of the agent is answered from the turn it came in, so a late one
never reaches the next run's handlers, and a cancelled turn refuses what
its agent still asks (docs/acp.md, "Cancel").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

import anyio

from oma_bridge.backends import PermissionHandler
from oma_bridge.backends.acp.services import ClientServices
from oma_bridge.backends.acp.turn import Turn

__all__ = ["TurnPhase", "TurnState"]

#: ``starting``: the agent is being started or its session opened for the run;
#: ``prompting``: ``session/prompt`` was sent; ``cancelling``: ``session/cancel``
#: was, the turn waits for its end; ``finished``: the answer came (or the turn
#: was given up).
TurnPhase: TypeAlias = Literal["starting", "prompting", "cancelling", "finished"]


@dataclass(eq=False)
class TurnState:
    """One run's turn (see the module docstring)."""

    run_id: str
    #: The turn's updates mapped to stream events, its output and tool calls.
    updates: Turn
    permission_handler: PermissionHandler | None = None
    services: ClientServices = field(default_factory=ClientServices)
    phase: TurnPhase = "starting"
    #: Set once the run is over, its reader stopped (see ``AcpBackend.session_request``).
    over: anyio.Event = field(default_factory=anyio.Event)

    @property
    def finished(self) -> bool:
        return self.phase == "finished"

    @property
    def asks_user(self) -> bool:
        """Whether the agent's questions to its user (permission, elicitation) go to the run's
        handlers: not once the turn is cancelled or over."""
        return self.phase in ("starting", "prompting")

    def prompt_sent(self) -> None:
        self.phase = "prompting"
        self.updates.prompting = True

    def cancelling(self) -> None:
        if not self.finished:
            self.phase = "cancelling"

    def answered(self) -> None:
        self.phase = "finished"

    def close(self) -> None:
        """The run is over: nothing of the agent reaches it any more."""
        self.phase = "finished"
        self.over.set()
