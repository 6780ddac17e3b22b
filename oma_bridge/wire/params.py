"""Every params model of the wire methods, and :func:`parse_params`, the one way in."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from oma_bridge.wire.codes import invalid_params

__all__ = [
    "RESERVED_META",
    "AgentIdParams",
    "AgentOverrides",
    "AuditParams",
    "Capabilities",
    "ClientInfo",
    "HookFlags",
    "InitializeParams",
    "NoParams",
    "OpenParams",
    "ProbeParams",
    "RunAgentConfig",
    "RunAgentParams",
    "RunIdParams",
    "RunParams",
    "RunTasksParams",
    "RunTeamParams",
    "TaskParams",
    "TeamParams",
    "WatchParams",
    "WireParams",
    "parse_params",
]

ModelT = TypeVar("ModelT", bound=BaseModel)


class WireParams(BaseModel):
    """Base of params models: frozen, and an unknown key is -32602 (docs/contract.md §11.6)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ClientInfo(WireParams):
    name: StrictStr
    version: StrictStr


class Capabilities(WireParams):
    """What the client can serve; each capability defaults to absent/false."""

    hooks: tuple[Literal["beforeRun", "afterRun"], ...] = ()
    permissions: StrictBool = False
    #: Extension: this client answers ``elicitation/request`` (docs/protocol.md).
    elicitation: StrictBool = False


class InitializeParams(WireParams):
    protocolVersion: StrictInt
    clientInfo: ClientInfo
    capabilities: Capabilities = Capabilities()


class NoParams(WireParams):
    """For methods without params: absent or ``{}``."""


class HookFlags(WireParams):
    beforeRun: StrictBool = False
    afterRun: StrictBool = False


class AgentOverrides(WireParams):
    name: StrictStr | None = Field(default=None, min_length=1)
    systemPrompt: StrictStr | None = None
    history: list[Any] | None = None
    maxTurns: StrictInt | None = Field(default=None, ge=1)
    maxTokenBudget: StrictInt | None = Field(default=None, ge=0)
    timeoutMs: StrictInt | None = Field(default=None, gt=0)
    hooks: HookFlags | None = None


class OpenParams(WireParams):
    profile: StrictStr
    config: AgentOverrides | None = None
    #: Reattach to this agent (after a restart, its persisted session).
    resume: StrictStr | None = Field(default=None, min_length=1)
    #: The client's folder, for a ``cwd = "client"`` or ``"worktree"`` profile
    #: (PROTOCOL §19.2): an absolute path inside the workspace roots.
    cwd: StrictStr | None = Field(default=None, min_length=1)


#: What a run does when its connection closes (``docs/sessions.md``).
OnDisconnect = Literal["cancel", "continue"]


class RunAgentConfig(AgentOverrides):
    profile: StrictStr


#: The prefix of the ``_meta`` keys only this daemon sets (docs/decisions.md, D22).
RESERVED_META = "oma-bridge/"


def _client_keys(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """A client's ``_meta`` as the run keeps it: every key but the daemon's reserved ones."""
    if meta is None:
        return None
    return {key: value for key, value in meta.items() if not key.startswith(RESERVED_META)}


#: A request's ``_meta`` (PROTOCOL §20.2): ``traceparent``, ``tracestate`` and
#: ``baggage`` (W3C trace context) are read; the other keys are kept for the run (an
#: ACP agent gets them on its ``session/prompt``, as on the facade), but the reserved ones.
Meta = Annotated[dict[str, Any] | None, AfterValidator(_client_keys)]
META = Field(
    default=None,
    alias="_meta",
    description="Request metadata: traceparent, tracestate, baggage (W3C trace context) "
    "make the run's span their child; other keys are kept for the run (an ACP agent gets "
    "them on its session/prompt), but oma-bridge/ ones, which are dropped.",
)


class RunParams(WireParams):
    agentId: StrictStr
    input: StrictStr | list[Any]
    runId: StrictStr | None = Field(default=None, min_length=1)
    onDisconnect: OnDisconnect = "cancel"
    meta: Meta = META


class RunAgentParams(WireParams):
    config: RunAgentConfig
    input: StrictStr | list[Any]
    runId: StrictStr | None = Field(default=None, min_length=1)
    metadata: dict[str, Any] | None = None
    onDisconnect: OnDisconnect = "cancel"
    meta: Meta = META


class TaskParams(WireParams):
    """One task of ``oma/runTasks`` (docs/contract.md §15); ``assignee`` is a profile name.

    ``retryDelayMs`` / ``retryBackoff`` are the library's own task keys
    (docs/teams.md, "Tasks"), accepted as an extension.  A ``description``
    that is not a string is -32010, checked before this model (text only).
    """

    id: StrictStr | None = Field(default=None, min_length=1)
    title: StrictStr = Field(min_length=1)
    description: StrictStr
    assignee: StrictStr = Field(min_length=1)
    dependsOn: tuple[StrictStr, ...] | None = None
    maxRetries: StrictInt | None = Field(default=None, ge=0)
    retryDelayMs: StrictFloat | None = Field(default=None, ge=0)
    retryBackoff: StrictFloat | None = Field(default=None, gt=0)
    #: The client's folder for a ``cwd = "worktree"`` assignee: the task gets a
    #: worktree of its repository (PROTOCOL §19.2); the daemon's, not the library's.
    cwd: StrictStr | None = Field(default=None, min_length=1)

    def task(self) -> dict[str, Any]:
        """The task as the library's wire mapping (unset keys left out: its defaults apply)."""
        return self.model_dump(exclude_none=True, exclude={"cwd"})


class RunTasksParams(WireParams):
    tasks: list[TaskParams]
    #: At most this many tasks at once (the library's default, 4, when absent).
    maxConcurrency: StrictInt | None = Field(default=None, ge=1)
    runId: StrictStr | None = Field(default=None, min_length=1)
    metadata: dict[str, Any] | None = None
    onDisconnect: OnDisconnect = "cancel"
    meta: Meta = META


class TeamParams(WireParams):
    """A team of profiles: the members and the coordinator (an llm profile)."""

    agents: tuple[StrictStr, ...] = Field(min_length=1)
    coordinator: StrictStr


class RunTeamParams(WireParams):
    team: TeamParams
    goal: StrictStr
    runId: StrictStr | None = Field(default=None, min_length=1)
    onDisconnect: OnDisconnect = "cancel"
    meta: Meta = META


class AgentIdParams(WireParams):
    agentId: StrictStr


class RunIdParams(WireParams):
    runId: StrictStr


class WatchParams(WireParams):
    agentId: StrictStr
    afterSeq: StrictInt | None = Field(default=None, ge=0)


class AuditParams(WireParams):
    """``daemon/audit`` (extension): how many of the newest records (at most 1000 are sent)."""

    limit: StrictInt = Field(default=100, ge=1)


class ProbeParams(WireParams):
    """``agents/probe`` (extension, PROTOCOL §22.2): the acp profiles to start; default all."""

    profiles: tuple[StrictStr, ...] | None = None


def parse_params(model: type[ModelT], params: Any) -> ModelT:
    """Validate ``params`` (absent means ``{}``) into ``model``, or raise -32602.

    The errors list carries locations and messages, never the input values.
    """
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise invalid_params([{"loc": [], "msg": "params must be an object", "type": "type"}])
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        errors = [
            {"loc": list(error["loc"]), "msg": error["msg"], "type": error["type"]}
            for error in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
        raise invalid_params(errors) from None
