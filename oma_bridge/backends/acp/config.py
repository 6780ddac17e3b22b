"""``AcpConfig``: the ``backend`` of an agent that speaks the Agent Client Protocol.

An ACP agent is started (``command``, over its stdio) or reached (``url``, a
remote agent over a WebSocket, PROTOCOL §21; docs/acp.md, "Remote agents"):
one of the two, never both.  A remote agent's URL is ``wss://`` unless it
stays on this machine: plain ``ws://`` to another host would hand the token
and every message to whoever is on the path, so it is refused unless
``allow_insecure_remote`` says the user knows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from oma_bridge.addresses import is_loopback_host
from oma_bridge.backends import Backend, BackendFactory
from oma_bridge.backends.command import CommandSettings

__all__ = ["ACP_BACKENDS", "AcpConfig", "AcpSettings"]


def _terminal(value: Any) -> Any:
    # One line naming the key, not a union's two errors.
    if isinstance(value, bool) or value == "client":
        return value
    raise ValueError("must be true, false or 'client'")


TerminalSetting = Annotated[StrictBool | Literal["client"], BeforeValidator(_terminal)]


def _remote_url(url: str, info: ValidationInfo) -> str:
    """A ``wss://`` URL (``ws://`` on loopback); the reason in one line otherwise."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (a port that is no number raises here)
    except ValueError:
        raise ValueError("must be a URL such as wss://HOST:PORT/acp/PROFILE") from None
    scheme = parts.scheme.lower()
    if scheme not in ("ws", "wss") or not host:
        raise ValueError("must be a wss:// (or ws://) URL such as wss://HOST:PORT/acp/PROFILE")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials: put the token in token_file")
    if any(name == "token" for name, _ in parse_qsl(parts.query, keep_blank_values=True)):
        raise ValueError("must not carry a token: a URL ends up in logs; use token_file")
    insecure = scheme == "ws" and not is_loopback_host(host)
    if insecure and not info.data.get("allow_insecure_remote", False):
        raise ValueError(
            "ws:// to a host beyond this machine sends the token and every message in "
            "clear: use wss:// (or set allow_insecure_remote = true)"
        )
    return url


class AcpSettings(CommandSettings):
    """The keys of an ACP agent that its user chooses (a daemon profile's too)."""

    kind: Literal["acp"] = "acp"
    #: Unset when the agent is remote (``url``).
    command: StrictStr | None = Field(default=None, min_length=1)  # type: ignore[assignment]
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
    #: Ceiling of one message: a stdout line, or a remote agent's WebSocket message.
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

    #: ``ws://`` to a host beyond this machine: the token and the messages in clear.
    allow_insecure_remote: StrictBool = False
    #: A remote agent instead of ``command``: ``wss://HOST:PORT/acp/<profile>``
    #: (another oma-bridge) or any server of ACP's WebSocket transport.
    url: StrictStr | None = None
    #: The remote's token (sent as ``Authorization: Bearer``), read at each
    #: connection from a file of this user's, mode 0600.
    token_file: Path | None = None
    #: The CA (PEM) that signed the remote's certificate; unset: the system's CAs.
    ca_file: Path | None = None
    #: The folder the remote session runs in (a path on the remote host, sent
    #: as ``session/new``'s ``cwd``); unset: this agent's own ``cwd``.
    remote_cwd: StrictStr | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if info.data.get("command") is not None:
            raise ValueError("url and command do not go together: a remote agent is not started")
        if info.data.get("args") or info.data.get("env") or info.data.get("command_sha256"):
            raise ValueError(
                "a remote agent takes no args, env or command_sha256: they are a command's"
            )
        return _remote_url(value, info)

    @field_validator("token_file", "ca_file", "remote_cwd")
    @classmethod
    def _remote_only(cls, value: Any, info: ValidationInfo) -> Any:
        url = info.data.get("url")
        if value is not None and url is None:
            raise ValueError("is for a remote agent: set url (or remove it)")
        if info.field_name == "remote_cwd" and value is not None and not value.startswith("/"):
            raise ValueError("must be an absolute path (a folder on the remote host)")
        if (
            info.field_name == "ca_file"
            and value is not None
            and not str(url).lower().startswith("wss:")
        ):
            raise ValueError("is for a wss:// url: a ws:// connection has no certificate")
        return value


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

    #: A remote agent that answers no WebSocket ping for this long is gone, and
    #: a lost connection is retried for this long (the daemon's ``send_timeout_s``).
    send_timeout_s: StrictFloat = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _started_or_reached(self) -> AcpConfig:
        if self.command is None and self.url is None:
            raise ValueError("an ACP agent needs a command (or a url, for a remote agent)")
        return self

    def create(self, *, agent_name: str) -> Backend:
        """The live backend, an ``AcpBackend`` (``backend.py`` fills :data:`ACP_BACKENDS`)."""
        return ACP_BACKENDS.create(self, agent_name)

    def resolved_cwd(self) -> Path:
        """The absolute, symlink-free working directory (ACP wants absolute paths)."""
        return (self.cwd or Path.cwd()).resolve()


#: Builds an ``AcpBackend`` from an :class:`AcpConfig`; filled by ``backend.py``.
ACP_BACKENDS: BackendFactory[AcpConfig] = BackendFactory("acp")
