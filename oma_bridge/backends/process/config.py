"""``ProcessConfig``: the ``backend`` of an agent that runs a command per turn."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, StrictStr

from oma_bridge.backends import Backend, BackendFactory
from oma_bridge.backends.command import CommandSettings

__all__ = ["PROCESS_BACKENDS", "ProcessConfig", "ProcessInput", "ProcessSettings"]

ProcessInput = Literal["stdin", "argument", "none"]


class ProcessSettings(CommandSettings):
    """The keys of a process agent that its user chooses (a daemon profile's too).

    ``input`` says how the prompt is delivered: written to ``stdin`` then
    closed, as the last ``argument``, or not at all (``none``, stdin closed
    at once).
    """

    kind: Literal["process"] = "process"
    input: ProcessInput = "stdin"
    #: stdout past this many bytes fails the run and ends the process tree.
    max_output_bytes: StrictInt = Field(default=64 * 1024 * 1024, gt=0)
    #: How much of stderr's end is kept for the failure message.
    stderr_tail_bytes: StrictInt = Field(default=64 * 1024, gt=0)


class ProcessConfig(ProcessSettings):
    """A command run once per turn: the prompt goes in, stdout comes out.

    ``command`` is exec'd directly (no shell) with ``args``; ``env`` is laid
    over the daemon's environment (minus its secrets and service
    variables); ``cwd`` is resolved against the current folder.  ``input``
    says how the prompt is delivered: written to ``stdin`` then closed, as
    the last ``argument``, or not at all (``none``, stdin closed at once).
    ``labels`` say whose the processes are (the daemon sets ``agentId``);
    each run adds :data:`~oma_bridge.backends.RUN_ID_LABEL`.  They are listed by
    :meth:`~oma_bridge.supervision.supervisor.Supervisor.processes`, never
    put in the child's environment.
    """

    #: The folder it runs in; default: the current one.
    cwd: StrictStr | None = None
    #: Whose the processes are, for ``daemon/status`` (set by the daemon, not a profile).
    labels: dict[str, str] = Field(default_factory=dict)

    def create(self, *, agent_name: str) -> Backend:
        """The live backend, a ``ProcessBackend`` (filled in by ``backend.py``)."""
        return PROCESS_BACKENDS.create(self, agent_name)


#: Builds a ``ProcessBackend`` from a :class:`ProcessConfig`; filled by ``backend.py``.
PROCESS_BACKENDS: BackendFactory[ProcessConfig] = BackendFactory("process")
