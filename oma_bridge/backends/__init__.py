"""The one protocol every backend (LLM, process, ACP) implements.

A backend runs one turn of work for an :class:`~oma_bridge.agent.Agent`.  It
receives a :class:`RunContext` (the prepared, already validated and copied
input, the system prompt, an ``emit`` callback for stream events) and returns
a :class:`BackendOutcome`.

Why a push model (``await ctx.emit(event)``) rather than an async generator:
backends need task groups (a process backend drains stdout and stderr at
once; an ACP backend serves agent requests while a prompt runs), and a task
group must not stay open across a ``yield``.  ``Agent.run`` passes an emit
that only records; ``Agent.stream`` relays events to its consumer.

Cancellation is a cancel scope around ``run``: a backend cleans up in
``finally`` (shielded where it must await) and lets the cancellation
propagate; the agent turns it into a ``cancelled`` or ``timeout`` result and
keeps the text already emitted as the partial output.

Errors: raise an :class:`~oma_bridge.errors.OMAError` subclass (a
``BackendError`` for a process or agent failure, a ``ProviderError`` for an
LLM provider) or return an outcome with ``error`` set when partial results
are worth keeping.  Both become a failed result; neither escapes the agent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

from oma_bridge.errors import OMAError
from oma_bridge.messages import LLMMessage
from oma_bridge.results import StreamEvent, TokenUsage, ToolCallRecord

__all__ = [
    "RUN_ID_LABEL",
    "Advertising",
    "Backend",
    "BackendConfig",
    "BackendFactory",
    "BackendKind",
    "BackendOutcome",
    "ClientAnswer",
    "ClientCall",
    "ClientForwarder",
    "ElicitationCompleteHandler",
    "ElicitationHandler",
    "ElicitationRequest",
    "Emit",
    "PermissionHandler",
    "PermissionOption",
    "PermissionRequest",
    "RunContext",
    "SessionEnding",
    "SessionRequests",
    "text_only",
]

BackendKind: TypeAlias = Literal["llm", "process", "acp"]
Emit: TypeAlias = Callable[[StreamEvent], Awaitable[None]]
#: The supervisor label (``Supervisor.spawn(labels=...)``) naming the run a
#: process serves: the process backend adds it to each run's process.
RUN_ID_LABEL = "runId"


@dataclass(frozen=True)
class PermissionOption:
    option_id: str
    name: str
    kind: str  # allow_once | allow_always | reject_once | reject_always | other


@dataclass(frozen=True)
class PermissionRequest:
    """An external agent asks to run a tool (ACP ``session/request_permission``)."""

    agent_name: str
    run_id: str
    tool_call: Mapping[str, Any]  # {"toolCallId", "title"?, "kind"?, "rawInput"?}
    options: tuple[PermissionOption, ...]
    #: The agent's params as it sent them, but its ``sessionId`` (its ``_meta``, the tool
    #: call's and each option's own ``_meta``, ``content``, ``locations`` included): what
    #: an ACP client is asked (PROTOCOL §12.7).  ``None``: built from the fields above.
    acp_params: Mapping[str, Any] | None = None


#: Answers a permission request with the chosen ``optionId``, or ``None`` for
#: ``cancelled``.  Used when a profile says ``permission = "client"``.
PermissionHandler: TypeAlias = Callable[[PermissionRequest], Awaitable[str | None]]


@dataclass(frozen=True)
class ElicitationRequest:
    """An external agent asks the user for input (ACP ``elicitation/create``).

    ``params`` are the agent's, without its own ``sessionId`` / ``requestId``
    (they name the backend's session and requests, nobody else's):
    ``message``, ``mode`` (``"form"`` with ``requestedSchema``, or ``"url"``
    with ``url`` and ``elicitationId``), ``toolCallId``?, ``_meta``?.
    """

    agent_name: str
    #: The run the request came during (``None``: between runs).
    run_id: str | None
    params: Mapping[str, Any]

    @property
    def mode(self) -> str:
        mode = self.params.get("mode")
        return mode if isinstance(mode, str) else "form"


#: Answers an elicitation with the ACP answer: ``{"action": "accept",
#: "content"?}``, ``{"action": "decline"}`` or ``{"action": "cancel"}``.  An
#: answer of another shape is taken as ``cancel`` (docs/acp.md, "Elicitations").
ElicitationHandler: TypeAlias = Callable[[ElicitationRequest], Awaitable[Mapping[str, Any]]]
#: Told of an ACP agent's ``elicitation/complete`` notification (a URL-mode elicitation
#: finished out of band): its params as the agent sent them (``elicitationId``, ``_meta``?).
ElicitationCompleteHandler: TypeAlias = Callable[[Mapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class ClientCall:
    """A request of an external agent that a client may serve instead of the host.

    ACP's ``fs/read_text_file``, ``fs/write_text_file`` and ``terminal/*`` of
    an agent whose profile says ``fs = "client"`` / ``terminal = "client"``;
    ``params`` are the agent's without its ``sessionId``, paths already
    confined to the agent's cwd (docs/acp.md, "fs and terminals served by a
    client").
    """

    agent_name: str
    #: The run the request came during (``None``: between runs).
    run_id: str | None
    method: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class ClientAnswer:
    """A client's answer to a :class:`ClientCall`, and who gave it (for the audit log)."""

    answer: Any
    #: ``{"client": {"name", "version"}, "connection": id}``, as ``decidedBy`` is.
    served_by: Mapping[str, Any]


#: Forwards a :class:`ClientCall` to a client that can serve it: its answer,
#: or ``None`` when no such client is there (the backend then serves the
#: request itself).  A client's error answer is raised as a ``WireError``
#: and reaches the agent unchanged.
ClientForwarder: TypeAlias = Callable[[ClientCall], Awaitable[ClientAnswer | None]]


@dataclass
class RunContext:
    """Everything a backend needs for one run."""

    run_id: str
    agent_name: str
    #: The run's input after hooks; for an LLM agent history comes first.
    messages: list[LLMMessage]
    system_prompt: str | None
    emit: Emit
    #: Smallest token ceiling that applies (run, agent, orchestrator), if any.
    max_token_budget: int | None = None
    max_turns: int = 10
    permission_handler: PermissionHandler | None = None
    #: The caller's request ``_meta`` (W3C trace context, say): an ACP backend sends it as
    #: its ``session/prompt``'s ``_meta``; the other kinds have nowhere to put it.
    meta: Mapping[str, Any] | None = None
    #: What one kind of backend alone reads, as a value of that kind's own type (an
    #: ACP agent's ``ClientServices``: who answers its elicitations, serves its fs and
    #: terminals for a client); a backend ignores options of another type.
    backend_options: object | None = None
    #: Free-form per-run data for observers (trace spans, metadata).
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class BackendOutcome:
    """What a backend returns when its turn ends without raising."""

    output: str = ""
    messages: list[LLMMessage] = field(default_factory=list)
    token_usage: TokenUsage = field(default_factory=TokenUsage)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    budget_exceeded: bool = False
    #: The turn ended because it was cancelled (e.g. an ACP ``cancelled`` stop).
    cancelled: bool = False
    #: A failure that still carries partial results (an ACP refusal, say).
    error: OMAError | None = None


class Backend(Protocol):
    """A live backend, created lazily by its config and cached on the agent."""

    @property
    def kind(self) -> BackendKind: ...

    async def run(self, ctx: RunContext) -> BackendOutcome: ...

    async def aclose(self) -> None:
        """Dispose of every resource (an ACP agent's process tree included)."""


@runtime_checkable
class SessionRequests(Protocol):
    """A backend that holds a protocol session takes requests of it besides runs.

    An ACP agent's ``session/set_mode`` and ``session/set_config_option``
    (docs/acp.md, "Modes and config options"): ``params`` go with the
    session's own id added, the agent's answer (or its error, a
    ``WireError``) comes back as it is, and the updates it sends meanwhile,
    between runs, go to ``emit``.  ``Agent.session_request`` is how the
    daemon reaches it, never the backend's class.
    """

    async def session_request(
        self, method: str, params: dict[str, Any], *, emit: Emit | None = None
    ) -> Any: ...


@runtime_checkable
class Advertising(Protocol):
    """A backend whose agent says what it can do when it starts (an ACP agent's ``initialize``).

    What it said is JSON (PROTOCOL §22.2: an ACP agent's ``loadSession``,
    ``sessionCapabilities``, ``promptCapabilities``, ``mcpCapabilities``,
    ``authMethods``); ``Agent.advertised()`` and ``Agent.probe()`` are how
    the daemon reaches it, never the backend's class.
    """

    def advertised(self) -> dict[str, Any] | None:
        """What the agent said at its last start; ``None`` before the first."""
        ...

    async def probe(self) -> dict[str, Any]:
        """Start the agent once, only to hear what it says, and end it (between runs)."""
        ...


@runtime_checkable
class SessionEnding(Protocol):
    """A backend whose protocol session can outlive it: its agent's side keeps the session
    (for a later ``session/resume``) unless told to end it.

    An ACP agent that advertises ``session/close``, a remote one above all (an
    oma-bridge keeps a detached session until its idle limit, and on disk).
    ``Agent.close`` ends it before the backend is disposed, unless the caller
    keeps it to continue later (the daemon when it stops: PROTOCOL §13.4).
    """

    async def end_session(self) -> None: ...


@runtime_checkable
class BackendConfig(Protocol):
    """The ``backend`` of an ``AgentConfig``: ``LlmConfig``, ``ProcessConfig`` or ``AcpConfig``.

    A frozen pydantic model per kind that builds the live backend.  Every kind
    but ``"llm"`` carries text only (``docs/protocol.md``, "The text-only
    boundary"): :func:`text_only` is the one test of it.
    """

    @property
    def kind(self) -> BackendKind: ...

    def create(self, *, agent_name: str) -> Backend: ...


ConfigT = TypeVar("ConfigT")


class BackendFactory(Generic[ConfigT]):
    """Builds the live backend of one kind's config, once the backend's module filled it in.

    A config module cannot import its backend module, which imports the
    config (an import cycle, deferred or not).  So the config's ``create``
    asks this factory, and the backend module fills it in when it is
    imported; the kind's package imports its backend module first, so the
    factory is filled before a config of the kind can exist.
    """

    __slots__ = ("_kind", "_make")

    def __init__(self, kind: BackendKind) -> None:
        self._kind = kind
        self._make: Callable[[ConfigT, str], Backend] | None = None

    def fill(self, make: Callable[[ConfigT, str], Backend]) -> None:
        """``make(config, agent_name)`` builds the backend (the backend module's call)."""
        self._make = make

    def create(self, config: ConfigT, agent_name: str) -> Backend:
        if self._make is None:
            raise RuntimeError(f"no {self._kind} backend: its module was never imported")
        return self._make(config, agent_name)


def text_only(kind: BackendKind) -> bool:
    """Whether a kind's transport carries text only, so structured input is refused."""
    return kind != "llm"
