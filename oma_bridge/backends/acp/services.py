"""``ClientServices``: what an ACP agent's client serves it besides permission answers."""

from __future__ import annotations

from dataclasses import dataclass

from oma_bridge.backends import (
    ClientForwarder,
    ElicitationCompleteHandler,
    ElicitationHandler,
    RunContext,
)

__all__ = ["ClientServices"]


@dataclass(frozen=True)
class ClientServices:
    """Who answers an ACP agent's elicitations, hears of their completion, serves its fs
    and terminals for a client.

    Only the ACP backend reads these, so they travel in the run's
    :attr:`~oma_bridge.backends.RunContext.backend_options` rather than as
    fields every backend gets (the agent puts them there, from its own
    handlers).  ``None``: an elicitation is answered ``cancel``, a completion
    dropped, fs and terminals served by the host (docs/acp.md).
    """

    elicitation_handler: ElicitationHandler | None = None
    elicitation_complete_handler: ElicitationCompleteHandler | None = None
    client_forwarder: ClientForwarder | None = None

    @classmethod
    def of(cls, ctx: RunContext) -> ClientServices:
        """The run's services; none when it carries no options of this type."""
        options = ctx.backend_options
        return options if isinstance(options, cls) else cls()
