"""A run of a sandboxed agent whose sandbox cannot be applied never starts (PROTOCOL §19.1).

:func:`require_sandbox` is the check every run request makes before it is
queued, so that the client gets ``-32015 SandboxUnavailable`` (the reason,
and how to fix it) rather than a failed run.  The spawn checks again (the
supervisor never starts a sandboxed command without its sandbox): a machine
that changed in between fails that run with the same error.
"""

from __future__ import annotations

from oma_bridge.agent import AgentConfig
from oma_bridge.backends.command import CommandSettings
from oma_bridge.errors import SandboxUnavailableError
from oma_bridge.supervision.supervisor import default_supervisor
from oma_bridge.wire.codes import sandbox_unavailable

__all__ = ["require_sandbox"]


async def require_sandbox(config: AgentConfig) -> None:
    """-32015 when ``config`` runs in a sandbox that cannot be applied now.

    Costs nothing for an unsandboxed agent and a ``stat`` of the binary once
    the first probe passed (``supervision/sandbox.py``).
    """
    backend = config.backend
    if not isinstance(backend, CommandSettings) or backend.sandbox == "none":
        return
    try:
        await default_supervisor().bubblewrap.check(backend.network)
    except SandboxUnavailableError as error:
        raise sandbox_unavailable(error) from None
