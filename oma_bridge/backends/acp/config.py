"""``AcpConfig``: the ``backend`` of an agent that speaks the Agent Client Protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

from oma_bridge.backends import Backend, BackendFactory
from oma_bridge.backends.command import CommandSettings

__all__ = ["ACP_BACKENDS", "AcpConfig", "AcpSettings"]


def _terminal(value: Any) -> Any:
    # One line naming the key, not a union's two errors.
    if isinstance(value, bool) or value == "client":
        return value
    raise ValueError("must be true, false or 'client'")


TerminalSetting = Annotated[StrictBool | Literal["client"], BeforeValidator(_terminal)]


class AcpSettings(CommandSettings):
    """The keys of an ACP agent that its user chooses (a daemon profile's too)."""

    kind: Literal["acp"] = "acp"
    permission: Literal["client", "auto-approve", "reject"] = "client"
    #: ``"client"``: an attached ACP client that advertised fs serves it (docs/acp.md).
    fs: Literal["cwd", "none", "client"] = "cwd"
    #: ``true``: served here; ``"client"``: an attached ACP client does.
    terminal: TerminalSetting = False
    model: StrictStr | None = Field(default=None, min_length=1)
    auth_method: StrictStr | None = Field(default=None, min_length=1)
    #: ACP ``McpServer`` objects passed to ``session/new`` as they are (the
    #: ACP layer validates their shape).
    mcp_servers: tuple[dict[StrictStr, Any], ...] = ()
    cancel_grace_s: StrictFloat = Field(default=10.0, ge=0)
    #: Join the texts of the ``agent_message_chunk`` updates that arrive in
    #: one read into one ``text`` event (joined, events still equal the
    #: output).  Off: one event per chunk, as OMA streams them.  On: far
    #: fewer events to relay when an agent bursts (see docs/benchmarks.md).
    coalesce_text: StrictBool = False
    #: Ceiling of one stdout line (one JSON-RPC message).
    max_line_bytes: StrictInt = Field(default=32 * 1024 * 1024, ge=1024)
    #: The SHA-256 (hex) the file ``command`` names must have: checked before
    #: every spawn, and a file that differs (or cannot be read) is not started.
    #: A daemon profile from the ACP registry takes the entry's (PROTOCOL §22.1).
    command_sha256: StrictStr | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")

    @model_validator(mode="after")
    def _checked_command_is_a_path(self) -> AcpSettings:
        # A bare name is looked up on PATH at the spawn: the file checked
        # could be another than the one started.
        if self.command_sha256 is not None and self.command and "/" not in self.command:
            raise ValueError("command_sha256 needs command to be a file's path, not a name")
        return self


class AcpConfig(AcpSettings):
    """How to start and drive one ACP agent (docs/contract.md §9, §11.14).

    ``permission``: ``"client"`` asks whoever started the run (the
    ``permission_handler`` of the :class:`~oma_bridge.agent.Agent`, or the
    daemon's client) and picks the least-privilege reject option when nobody
    can answer; ``"auto-approve"`` and ``"reject"`` are fixed policies.
    ``fs = "cwd"`` serves ``fs/*`` inside ``cwd``; ``terminal`` enables
    ``terminal/*``.  ``"client"`` for either forwards those requests to a
    client that can serve them (the daemon's ACP facade clients, through
    the run's ``client_forwarder``); with none, as ``"cwd"`` / ``true``
    (so in library use without a forwarder, ``"client"`` is served here).
    ``model`` is applied to every new session.
    ``labels`` say whose the agent's processes are, its terminals' too (the
    daemon sets ``agentId``); they are listed by
    :meth:`~oma_bridge.supervision.supervisor.Supervisor.processes`, never
    put in a child's environment.
    """

    #: Working directory of the agent and of its session; default: the current one.
    cwd: Path | None = None
    #: A ``permission = "client"`` request unanswered this long gets the
    #: least-privilege reject option (docs/contract.md §11.12); ``None``: no limit.
    permission_timeout_s: StrictFloat | None = Field(default=None, gt=0)
    #: A session of this agent to continue (``session/resume`` or ``session/load``,
    #: when the agent advertises them) instead of a new one: the daemon sets it
    #: when it brings a persisted session back after a restart.
    resume_session: StrictStr | None = None
    #: Whose the processes are, for ``daemon/status`` (set by the daemon, not a profile).
    labels: dict[str, str] = Field(default_factory=dict)

    def create(self, *, agent_name: str) -> Backend:
        """The live backend, an ``AcpBackend`` (``backend.py`` fills :data:`ACP_BACKENDS`)."""
        return ACP_BACKENDS.create(self, agent_name)

    def resolved_cwd(self) -> Path:
        """The absolute, symlink-free working directory (ACP wants absolute paths)."""
        return (self.cwd or Path.cwd()).resolve()


#: Builds an ``AcpBackend`` from an :class:`AcpConfig`; filled by ``backend.py``.
ACP_BACKENDS: BackendFactory[AcpConfig] = BackendFactory("acp")
