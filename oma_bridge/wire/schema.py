"""The JSON Schema of every wire message: :func:`protocol_schema`.

The params models that validate what clients send already exist
(:mod:`oma_bridge.wire.params`) and are reused as they are.  This module
models what the daemon *sends* (results, notifications, its own requests,
error data) and the answers it accepts to its requests, then assembles one
JSON Schema 2020-12 document:

* ``$defs``: one definition per shape;
* ``x-methods``: every method, grouped by method, with its direction and the
  ``$ref`` of its ``params`` and ``result`` (a notification has ``params``
  only), plus the error codes it can answer;
* ``x-errors``: every error code with its message and the ``$ref`` of its
  ``data`` (or none);
* the document itself validates one frame's JSON-RPC envelope.

Shapes the daemon sends are TypedDicts (``typing_extensions``, as pydantic
needs on Python 3.11) because they tell "key absent" from "key null" exactly
as the wire does: ``NotRequired`` keys are omitted when unset, ``X | None``
keys are present and may be null.  Messages and content blocks allow extra
keys, because the daemon hands back client-sent messages unchanged (the
shape guard keeps unknown keys and unknown block types).

``scripts/gen_schema.py`` writes the document to
``docs/schema/protocol.schema.json``; ``tests/test_wire_schema.py`` checks
that the file is current and that real frames of a daemon session validate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypeAlias

from pydantic import BaseModel, ConfigDict, TypeAdapter, with_config
from typing_extensions import TypedDict

from oma_bridge.errors import ErrorKind
from oma_bridge.messages.types import (
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from oma_bridge.results import StatusCode
from oma_bridge.wire.codes import PROTOCOL_VERSION
from oma_bridge.wire.params import (
    AgentIdParams,
    AuditParams,
    InitializeParams,
    NoParams,
    OpenParams,
    ProbeParams,
    RunAgentParams,
    RunIdParams,
    RunParams,
    RunTasksParams,
    RunTeamParams,
    WatchParams,
)

__all__ = [
    "ERRORS",
    "METHODS",
    "SCHEMA_DIALECT",
    "AgentRunResult",
    "ErrorSpec",
    "MethodSpec",
    "StreamEvent",
    "protocol_schema",
]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_CLOSED = ConfigDict(extra="forbid")
_OPEN = ConfigDict(extra="allow")

# ---------------------------------------------------------------------------
# Messages: the TypedDicts of oma_bridge.messages themselves, plus the one shape
# the wire adds: a block of a type the daemon does not know.

KNOWN_BLOCK_TYPES = ("text", "image", "tool_use", "tool_result", "reasoning")


def _other_block_schema(schema: dict[str, Any]) -> None:
    # An unknown block type passes the shape guard unchanged, so it can come
    # back in results and history; it must not stand in for a malformed known one.
    schema["properties"]["type"] = {"type": "string", "not": {"enum": list(KNOWN_BLOCK_TYPES)}}


@with_config(ConfigDict(extra="allow", json_schema_extra=_other_block_schema))
class OtherBlock(TypedDict):
    """A block of a type the daemon does not know, passed through as sent."""

    type: str


ContentBlock: TypeAlias = (
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ReasoningBlock | OtherBlock
)


@with_config(_OPEN)
class LLMMessage(TypedDict):
    """:class:`oma_bridge.messages.LLMMessage` as the wire carries it: unknown blocks too."""

    role: Literal["user", "assistant"]
    content: list[ContentBlock]


# ---------------------------------------------------------------------------
# Results and events (docs/contract.md §6; oma_bridge.results.*.to_wire)


@with_config(_CLOSED)
class TokenUsage(TypedDict):
    input_tokens: int
    output_tokens: int


@with_config(_CLOSED)
class ToolCallRecord(TypedDict):
    toolName: str
    input: Any
    output: str
    duration: int


@with_config(_CLOSED)
class RunStatus(TypedDict):
    code: StatusCode
    message: NotRequired[str]


@with_config(_CLOSED)
class ErrorInfo(TypedDict):
    kind: ErrorKind
    code: NotRequired[str]
    name: NotRequired[str]
    message: NotRequired[str]


@with_config(_CLOSED)
class RunIdentity(TypedDict):
    """Extension: who an ``oma/runAgent`` run is in traces."""

    runId: str
    attempt: int
    traceId: str
    rootSpanId: str


def _success_means_ok(schema: dict[str, Any]) -> None:
    # docs/contract.md §6: success is true exactly when status.code is "ok".
    ok = {"properties": {"status": {"properties": {"code": {"const": "ok"}}}}}
    schema["if"] = {"properties": {"success": {"const": True}}}
    schema["then"] = ok
    schema["else"] = {"not": ok}


@with_config(ConfigDict(extra="forbid", json_schema_extra=_success_means_ok))
class AgentRunResult(TypedDict):
    runId: str
    success: bool
    output: str
    messages: list[LLMMessage]
    tokenUsage: TokenUsage
    toolCalls: list[ToolCallRecord]
    status: RunStatus
    errorInfo: NotRequired[ErrorInfo]
    budgetExceeded: NotRequired[Literal[True]]
    identity: NotRequired[RunIdentity]


@with_config(_CLOSED)
class ErrorEventData(TypedDict):
    name: str
    message: str
    code: NotRequired[str]


@with_config(_CLOSED)
class BudgetExceededData(TypedDict):
    name: str
    code: str
    message: str


def _acp_update_schema(schema: dict[str, Any]) -> None:
    schema["description"] = (
        "A raw ACP session update as the agent sent it (plan, modes, config options, "
        "commands, session info, tool calls, usage, unknown kinds)."
    )


@with_config(ConfigDict(extra="allow", json_schema_extra=_acp_update_schema))
class AcpSessionUpdate(TypedDict):
    sessionUpdate: str


@with_config(_CLOSED)
class TextEvent(TypedDict):
    type: Literal["text"]
    data: str


@with_config(_CLOSED)
class ReasoningEvent(TypedDict):
    type: Literal["reasoning"]
    data: str


@with_config(_CLOSED)
class ToolUseEvent(TypedDict):
    type: Literal["tool_use"]
    data: ToolUseBlock


@with_config(_CLOSED)
class ToolResultEvent(TypedDict):
    type: Literal["tool_result"]
    data: ToolResultBlock


@with_config(_CLOSED)
class BudgetExceededEvent(TypedDict):
    type: Literal["budget_exceeded"]
    data: BudgetExceededData


@with_config(_CLOSED)
class DoneEvent(TypedDict):
    type: Literal["done"]
    data: AgentRunResult


@with_config(_CLOSED)
class ErrorEvent(TypedDict):
    type: Literal["error"]
    data: ErrorEventData


@with_config(_CLOSED)
class UpdateEvent(TypedDict):
    """Extension: a raw ACP session update (ACP agents only)."""

    type: Literal["update"]
    data: AcpSessionUpdate


def _acp_state_schema(schema: dict[str, Any]) -> None:
    schema["description"] = (
        "The ACP update without its sessionUpdate, as the agent sent it (ACP schema 1.x)."
    )


@with_config(ConfigDict(extra="allow", json_schema_extra=_acp_state_schema))
class AcpStateData(TypedDict):
    pass


@with_config(_CLOSED)
class PlanEvent(TypedDict):
    """Extension (D15): an ACP agent's ``plan`` (``data.entries``)."""

    type: Literal["plan"]
    data: AcpStateData


@with_config(_CLOSED)
class UsageUpdateEvent(TypedDict):
    """Extension (D15): an ACP agent's ``usage_update`` (``data.used``, ``size``, ``cost``?)."""

    type: Literal["usage_update"]
    data: AcpStateData


@with_config(_CLOSED)
class AvailableCommandsUpdateEvent(TypedDict):
    """Extension (D15): an ACP agent's commands (``data.availableCommands``)."""

    type: Literal["available_commands_update"]
    data: AcpStateData


@with_config(_CLOSED)
class CurrentModeUpdateEvent(TypedDict):
    """Extension (D15): an ACP agent's ``current_mode_update`` (``data.currentModeId``)."""

    type: Literal["current_mode_update"]
    data: AcpStateData


StreamEvent: TypeAlias = (
    TextEvent
    | ReasoningEvent
    | ToolUseEvent
    | ToolResultEvent
    | BudgetExceededEvent
    | DoneEvent
    | ErrorEvent
    | UpdateEvent
    | PlanEvent
    | UsageUpdateEvent
    | AvailableCommandsUpdateEvent
    | CurrentModeUpdateEvent
)


@with_config(_CLOSED)
class RunEventParams(TypedDict):
    runId: str
    event: StreamEvent
    #: The event's entry in the agent's journal (docs/sessions.md).
    seq: int


# ---------------------------------------------------------------------------
# The journal: agent/watch, agent/event, run/result (docs/sessions.md)


@with_config(_CLOSED)
class RunStartEntry(TypedDict):
    type: Literal["run_start"]
    runId: str
    method: str
    input: str | list[Any]


@with_config(_CLOSED)
class EventEntry(TypedDict):
    type: Literal["event"]
    runId: str
    event: StreamEvent
    #: acp: the chunk a text or reasoning event came from, when it carries more
    #: than its text (``messageId``, ``_meta``, ``annotations``): docs/acp.md.
    update: NotRequired[AcpSessionUpdate]


@with_config(_CLOSED)
class RunEndEntry(TypedDict):
    type: Literal["run_end"]
    runId: str
    result: AgentRunResult


@with_config(_CLOSED)
class UpdateEntry(TypedDict):
    type: Literal["update"]
    update: dict[str, Any]


@with_config(_CLOSED)
class NoteEntry(TypedDict):
    """What the daemon says about the session: today, that an acp agent's earlier
    downstream session could not be continued after a restart (or a respawn) and a
    new one started, with why (PROTOCOL §13.4; docs/sessions.md).  The ACP facade
    relays it as an ``agent_message_chunk`` marked ``_meta["oma-bridge/note"]`` (D21)."""

    type: Literal["note"]
    #: Plain text for a person, one line.
    text: str


JournalEntry: TypeAlias = RunStartEntry | EventEntry | RunEndEntry | UpdateEntry | NoteEntry


@with_config(_CLOSED)
class AgentEventParams(TypedDict):
    agentId: str
    seq: int
    entry: JournalEntry


@with_config(_CLOSED)
class WatchResult(TypedDict):
    seq: int


@with_config(_CLOSED)
class CursorExpiredData(TypedDict):
    name: Literal["CursorExpired"]
    oldestSeq: int
    #: The error's message again (PROTOCOL §18.3): ACP clients show this one.
    details: str


@with_config(_CLOSED)
class RunInProgressData(TypedDict):
    running: Literal[True]
    #: The error's message again (PROTOCOL §18.3): ACP clients show this one.
    details: str


@with_config(_CLOSED)
class SandboxUnavailableData(TypedDict):
    name: Literal["SandboxUnavailable"]
    #: Why: no bubblewrap binary, user namespaces refused (the message adds the fix).
    reason: str
    #: The error's message again (PROTOCOL §18.3): ACP clients show this one.
    details: str


# ---------------------------------------------------------------------------
# oma/progress (oma/runAgent, and the runs of oma/runTasks / oma/runTeam)


@with_config(_CLOSED)
class PromptStart(TypedDict):
    prompt: str


@with_config(_CLOSED)
class MessagesStart(TypedDict):
    messages: list[LLMMessage]


@with_config(_CLOSED)
class TaskRunStart(TypedDict):
    """A team member's run of a task (each attempt has one)."""

    prompt: str
    taskId: str
    attempt: int


@with_config(_CLOSED)
class CoordinatorRunStart(TypedDict):
    """A run of ``oma/runTeam``'s coordinator."""

    phase: Literal["decomposition", "repair", "synthesis"]
    prompt: str


@with_config(_CLOSED)
class AgentStartProgress(TypedDict):
    type: Literal["agent_start"]
    agent: str
    #: Extension: the task's id, on every event of a team run's task.
    task: NotRequired[str]
    data: PromptStart | MessagesStart | TaskRunStart | CoordinatorRunStart


@with_config(_CLOSED)
class ProgressBudgetData(TypedDict):
    """From the run's ``errorInfo`` (keys may be null) or the cost cap."""

    name: str | None
    code: str | None
    message: str | None


@with_config(_CLOSED)
class BudgetExceededProgress(TypedDict):
    type: Literal["budget_exceeded"]
    agent: str
    task: NotRequired[str]
    data: ProgressBudgetData


@with_config(_CLOSED)
class AgentCompleteProgress(TypedDict):
    type: Literal["agent_complete"]
    agent: str
    task: NotRequired[str]
    data: AgentRunResult


@with_config(_CLOSED)
class TaskStartData(TypedDict):
    taskId: str
    title: str
    assignee: str
    #: The ids of the task's dependencies.
    dependsOn: list[str]


@with_config(_CLOSED)
class TaskCompleteData(TypedDict):
    taskId: str
    title: str
    assignee: str
    status: Literal["completed"]
    output: str


@with_config(_CLOSED)
class TaskFailedData(TypedDict):
    taskId: str
    title: str
    assignee: str
    status: Literal["failed", "cancelled"]
    error: str


@with_config(_CLOSED)
class TaskSkippedData(TypedDict):
    taskId: str
    title: str
    assignee: str
    status: Literal["skipped"]
    reason: str


@with_config(_CLOSED)
class TaskRetryData(TypedDict):
    taskId: str
    attempt: int
    maxAttempts: int
    error: str
    nextDelayMs: int


@with_config(_CLOSED)
class TaskStartProgress(TypedDict):
    type: Literal["task_start"]
    #: The task's assignee.
    agent: str
    task: str
    data: TaskStartData


@with_config(_CLOSED)
class TaskCompleteProgress(TypedDict):
    type: Literal["task_complete"]
    agent: str
    task: str
    data: TaskCompleteData


@with_config(_CLOSED)
class TaskFailedProgress(TypedDict):
    type: Literal["task_failed"]
    agent: str
    task: str
    data: TaskFailedData


@with_config(_CLOSED)
class TaskSkippedProgress(TypedDict):
    type: Literal["task_skipped"]
    agent: str
    task: str
    data: TaskSkippedData


@with_config(_CLOSED)
class TaskRetryProgress(TypedDict):
    type: Literal["task_retry"]
    agent: str
    task: str
    data: TaskRetryData


ProgressEvent: TypeAlias = (
    AgentStartProgress
    | BudgetExceededProgress
    | AgentCompleteProgress
    | TaskStartProgress
    | TaskCompleteProgress
    | TaskFailedProgress
    | TaskSkippedProgress
    | TaskRetryProgress
)


@with_config(_CLOSED)
class ProgressParams(TypedDict):
    runId: str
    event: ProgressEvent


# ---------------------------------------------------------------------------
# Team runs (docs/contract.md §15; oma_bridge.orchestration.outcome.*.to_wire)


@with_config(_CLOSED)
class TeamTaskResult(TypedDict):
    id: str
    title: str
    #: The profile the task ran on.
    assignee: str
    status: Literal["completed", "failed", "skipped", "cancelled"]
    #: The last attempt's result (usage summed over the attempts); absent for
    #: a task that never ran.
    result: NotRequired[AgentRunResult]


@with_config(_CLOSED)
class TeamRunResult(TypedDict):
    runId: str
    success: bool
    output: str
    tasks: list[TeamTaskResult]
    tokenUsage: TokenUsage


# ---------------------------------------------------------------------------
# Results of the client's requests


@with_config(_CLOSED)
class SandboxInfo(TypedDict):
    """How a process or acp profile's processes run (PROTOCOL §19.1)."""

    kind: Literal["none", "bwrap"]
    #: false: a network namespace of its own, with only loopback.
    network: bool


@with_config(_CLOSED)
class AdvertisedCapabilities(TypedDict):
    """What an acp profile's agent said at its last ``initialize`` (PROTOCOL §22.2).

    Each value is the agent's own JSON as it sent it (an absent object is
    ``{}``); ``initializedAt`` is when (Unix time).
    """

    loadSession: bool
    sessionCapabilities: dict[str, Any]
    promptCapabilities: dict[str, Any]
    mcpCapabilities: dict[str, Any]
    authMethods: list[dict[str, Any]]
    agentInfo: NotRequired[dict[str, Any]]
    initializedAt: float


@with_config(_CLOSED)
class AgentProfileInfo(TypedDict):
    name: str
    kind: Literal["llm", "process", "acp"]
    #: A run of it can start (PROTOCOL §18.3); else ``notReady`` says why.
    ready: bool
    #: e.g. ``ANTHROPIC_API_KEY is not set in the daemon's environment``.
    notReady: NotRequired[str]
    description: NotRequired[str]
    model: NotRequired[str]
    #: Process and acp profiles.
    sandbox: NotRequired[SandboxInfo]
    #: An acp profile whose agent has been initialized (PROTOCOL §22.2).
    capabilities: NotRequired[AdvertisedCapabilities]
    #: ``agents/probe`` (extension): why this profile's agent could not be started.
    probeError: NotRequired[str]


@with_config(_CLOSED)
class ServerInfo(TypedDict):
    name: Literal["oma-bridge"]
    version: str


@with_config(_CLOSED)
class InitializeResult(TypedDict):
    protocolVersion: Literal[1]
    serverInfo: ServerInfo
    agents: list[AgentProfileInfo]


@with_config(_CLOSED)
class AgentsListResult(TypedDict):
    agents: list[AgentProfileInfo]


@with_config(_CLOSED)
class AgentOpenResult(TypedDict):
    agentId: str


@with_config(_CLOSED)
class HistoryResult(TypedDict):
    messages: list[LLMMessage]


@with_config(_CLOSED)
class EmptyResult(TypedDict):
    """``{}``."""


@with_config(_CLOSED)
class CancelResult(TypedDict):
    cancelled: bool


@with_config(_CLOSED)
class StatusAgent(TypedDict):
    agentId: str
    profile: str
    kind: Literal["llm", "process", "acp"]
    state: Literal["idle", "running", "completed", "error"]
    queuedRuns: int
    #: Process and acp agents.
    sandbox: NotRequired[SandboxInfo]


@with_config(_CLOSED)
class StatusRun(TypedDict):
    runId: str
    #: null for an ``oma/runAgent`` or team run (one-off agents have no agentId).
    agentId: str | None
    method: Literal[
        "agent/run", "agent/stream", "agent/prompt", "oma/runAgent", "oma/runTasks", "oma/runTeam"
    ]
    #: Unix time in seconds; null while the run is queued.
    startedAt: float | None


@with_config(_CLOSED)
class StatusProcess(TypedDict):
    pid: int
    #: null for the process of an ``oma/runAgent`` or team run.
    agentId: str | None
    rssBytes: int
    runId: NotRequired[str]


@with_config(_CLOSED)
class EvaluationStats(TypedDict):
    sampled: int
    enqueued: int
    completed: int
    dropped: int
    failed: int
    storeFailed: int


@with_config(_CLOSED)
class RunStatsMinute(TypedDict):
    #: Unix time in seconds of the minute's start (a multiple of ``bucketS``).
    start: int
    #: Runs that ended in that minute, by ``status.code`` (only codes that occurred).
    runs: dict[str, int]
    #: Of them, the runs that started (one cancelled while queued never did), and
    #: the sum and the longest of their durations, in seconds.
    durationCount: int
    durationSumS: float
    durationMaxS: float


@with_config(_CLOSED)
class RunStats(TypedDict):
    """The last hour of run ends, per minute: the status page's charts (PROTOCOL §20.3)."""

    bucketS: int
    #: How many minutes the window holds (60): ``minutes`` lists those with runs.
    buckets: int
    #: The daemon's clock, Unix time in seconds.
    now: float
    minutes: list[RunStatsMinute]


@with_config(_CLOSED)
class DaemonStatus(TypedDict):
    version: str
    uptimeS: float
    #: Extension: the daemon's event loop, ``uvloop`` or ``asyncio`` (``[server] event_loop``).
    eventLoop: Literal["asyncio", "uvloop"]
    connections: int
    agents: list[StatusAgent]
    runs: list[StatusRun]
    processes: list[StatusProcess]
    #: Session files on disk (docs/sessions.md).
    sessions: int
    #: Extension: present when the daemon's orchestrator evaluates runs.
    evaluation: NotRequired[EvaluationStats]
    #: What each acp profile's agent said at its last ``initialize``, by profile (§22.2).
    capabilities: dict[str, AdvertisedCapabilities]
    #: Extension: the figures of ``GET /metrics``' runs, per minute (docs/status-page.md).
    runStats: RunStats


@with_config(_OPEN)
class AuditRecord(TypedDict):
    """One line of the audit log (PROTOCOL §14); the keys beyond these depend on ``event``."""

    ts: str
    event: str
    agentId: str | None


@with_config(_CLOSED)
class DaemonAuditResult(TypedDict):
    #: Oldest first; at most ``limit`` (and at most 1000).
    records: list[AuditRecord]


# ---------------------------------------------------------------------------
# The daemon's requests (docs/contract.md §5) and the answers it accepts


@with_config(_CLOSED)
class BeforeRunContext(TypedDict):
    prompt: str
    messages: list[LLMMessage]
    agent: AgentProfileInfo


@with_config(_CLOSED)
class BeforeRunParams(TypedDict):
    agentId: str
    runId: str
    context: BeforeRunContext


@with_config(_OPEN)
class BeforeRunAnswer(TypedDict):
    """Other keys are ignored; ``messages`` null or absent keeps the messages."""

    prompt: str
    messages: NotRequired[list[LLMMessage] | None]


@with_config(_CLOSED)
class AfterRunParams(TypedDict):
    agentId: str
    runId: str
    result: AgentRunResult


@with_config(_OPEN)
class AfterRunAnswer(TypedDict):
    result: AgentRunResult


@with_config(_CLOSED)
class PermissionToolCall(TypedDict):
    """The keys of the agent's ``toolCall`` the daemon forwards, values as the agent sent them."""

    toolCallId: NotRequired[str]
    title: NotRequired[str]
    kind: NotRequired[str]
    rawInput: NotRequired[Any]


@with_config(_CLOSED)
class PermissionOptionInfo(TypedDict):
    optionId: str
    name: str
    kind: str


@with_config(_CLOSED)
class PermissionRequestParams(TypedDict):
    #: null for a run of ``oma/runAgent`` or of a team member.
    agentId: str | None
    runId: str
    toolCall: PermissionToolCall
    options: list[PermissionOptionInfo]


@with_config(_OPEN)
class SelectedOutcome(TypedDict):
    outcome: Literal["selected"]
    optionId: str


@with_config(_OPEN)
class CancelledOutcome(TypedDict):
    outcome: Literal["cancelled"]


@with_config(_OPEN)
class PermissionAnswer(TypedDict):
    """Anything else (or an option not offered) counts as the least-privilege reject."""

    outcome: SelectedOutcome | CancelledOutcome


@with_config(_OPEN)
class ElicitationRequestParams(TypedDict):
    """Extension: an ACP agent's ``elicitation/create`` params, without its ``sessionId``
    / ``requestId``, plus whose they are (docs/acp.md, "Elicitations")."""

    agentId: str
    #: null between runs.
    runId: str | None
    message: str
    mode: Literal["form", "url"]
    requestedSchema: NotRequired[dict[str, Any]]
    url: NotRequired[str]
    elicitationId: NotRequired[str]
    toolCallId: NotRequired[str]


@with_config(_CLOSED)
class ElicitationAnswer(TypedDict):
    """Anything else counts as no answer; with no valid answer the agent gets ``cancel``."""

    action: Literal["accept", "decline", "cancel"]
    #: With ``accept`` only: the form's values.
    content: NotRequired[dict[str, Any]]
    _meta: NotRequired[dict[str, Any]]


@with_config(_CLOSED)
class CancelRequestParams(TypedDict):
    """``$/cancel_request``: the daemon sends ``id``; it accepts ``id`` or ``requestId``."""

    id: int | str


# ---------------------------------------------------------------------------
# Error data (docs/contract.md §7)


@with_config(_CLOSED)
class EnvelopeErrorData(TypedDict):
    """Extension on -32700 / -32600: a short reason, never the input (none on a second
    ``initialize``, a request whose envelope was fine)."""

    detail: NotRequired[str]
    #: The error's message again (PROTOCOL §18.3): ACP clients show this one.
    details: str


@with_config(_CLOSED)
class ParamsErrorItem(TypedDict):
    loc: list[str | int]
    msg: str
    type: NotRequired[str]


@with_config(_CLOSED)
class InvalidParamsData(TypedDict):
    errors: list[ParamsErrorItem]
    #: The error's message again (PROTOCOL §18.3): ACP clients show this one.
    details: str


@with_config(_CLOSED)
class OverloadedData(TypedDict):
    retryAfterMs: int
    #: The error's message again (PROTOCOL §18.3): ACP clients show this one.
    details: str


@with_config(_CLOSED)
class UnsupportedVersionData(TypedDict):
    supported: list[int]
    #: The error's message again (PROTOCOL §18.3): ACP clients show this one.
    details: str


@with_config(_CLOSED)
class InvalidMessageData(TypedDict):
    name: Literal["InvalidMessageError"]
    code: Literal["INVALID_MESSAGE"]
    message: str
    #: The error's message again (PROTOCOL §18.3): ACP clients show this one.
    details: str


@with_config(_CLOSED)
class NotFoundData(TypedDict):
    name: Literal["NotFound"]
    #: The error's message again (PROTOCOL §18.3): ACP clients show this one.
    details: str


@with_config(_CLOSED)
class ForbiddenData(TypedDict):
    name: Literal["Forbidden"]
    #: The error's message again (PROTOCOL §18.3): ACP clients show this one.
    details: str


@with_config(_CLOSED)
class ErrorDetailsData(TypedDict):
    """The data of an error with no other keys: its message, for ACP clients (§18.3)."""

    details: str


# ---------------------------------------------------------------------------
# JSON-RPC envelopes

RequestId: TypeAlias = int | str


@with_config(_CLOSED)
class JsonRpcRequest(TypedDict):
    jsonrpc: Literal["2.0"]
    id: RequestId
    method: str
    params: NotRequired[dict[str, Any] | list[Any]]


@with_config(_CLOSED)
class JsonRpcNotification(TypedDict):
    jsonrpc: Literal["2.0"]
    method: str
    params: NotRequired[dict[str, Any] | list[Any]]


@with_config(_CLOSED)
class JsonRpcResult(TypedDict):
    jsonrpc: Literal["2.0"]
    id: RequestId
    result: Any


@with_config(_CLOSED)
class JsonRpcErrorObject(TypedDict):
    code: int
    message: str
    data: NotRequired[Any]


@with_config(_CLOSED)
class JsonRpcError(TypedDict):
    jsonrpc: Literal["2.0"]
    #: null when the request's id could not be read.
    id: RequestId | None
    error: JsonRpcErrorObject


ENVELOPES: tuple[Any, ...] = (JsonRpcRequest, JsonRpcNotification, JsonRpcResult, JsonRpcError)

# ---------------------------------------------------------------------------
# The catalogue


class _Ignored:
    """Marker: the daemon ignores these params (schema ``{}``, anything)."""


Direction: TypeAlias = Literal["client→daemon", "daemon→client", "both"]


@dataclass(frozen=True)
class MethodSpec:
    """One method: who sends it, its params, its result (``None`` for a notification)."""

    direction: Direction
    params: Any
    result: Any = None
    errors: tuple[int, ...] = ()
    summary: str = ""

    @property
    def notification(self) -> bool:
        return self.result is None


@dataclass(frozen=True)
class ErrorSpec:
    message: str
    data: Any = None
    when: str = ""


_RUN_ERRORS = (-32602, -32011, -32010, -32001)
_AGENT_ID_ERRORS = (-32602, -32011)

METHODS: dict[str, MethodSpec] = {
    "initialize": MethodSpec(
        "client→daemon",
        InitializeParams,
        InitializeResult,
        (-32602, -32003, -32600),
        "first request of a connection",
    ),
    "agents/list": MethodSpec(
        "client→daemon", NoParams, AgentsListResult, (-32602,), "the declared profiles"
    ),
    "agents/probe": MethodSpec(
        "client→daemon",
        ProbeParams,
        AgentsListResult,
        (-32602, -32011),
        "extension: agents/list once each acp agent was started for its initialize",
    ),
    "agent/open": MethodSpec(
        "client→daemon",
        OpenParams,
        AgentOpenResult,
        (-32602, -32011, -32012, -32010),
        "open an agent of a declared profile",
    ),
    "agent/fork": MethodSpec(
        "client→daemon",
        AgentIdParams,
        AgentOpenResult,
        (-32602, -32011, -32014, -32601, -32603),
        "a new agent that starts with a copy of an open one's history and journal (§22.4)",
    ),
    "agent/run": MethodSpec(
        "client→daemon", RunParams, AgentRunResult, _RUN_ERRORS, "a fresh conversation"
    ),
    "agent/stream": MethodSpec(
        "client→daemon",
        RunParams,
        AgentRunResult,
        _RUN_ERRORS,
        "like agent/run, with run/event notifications before the answer",
    ),
    "agent/prompt": MethodSpec(
        "client→daemon", RunParams, AgentRunResult, _RUN_ERRORS, "a turn of the agent's history"
    ),
    "agent/history": MethodSpec("client→daemon", AgentIdParams, HistoryResult, _AGENT_ID_ERRORS),
    "agent/reset": MethodSpec("client→daemon", AgentIdParams, EmptyResult, _AGENT_ID_ERRORS),
    "agent/close": MethodSpec("client→daemon", AgentIdParams, EmptyResult, _AGENT_ID_ERRORS),
    "agent/attach": MethodSpec("client→daemon", AgentIdParams, EmptyResult, _AGENT_ID_ERRORS),
    "run/cancel": MethodSpec("client→daemon", RunIdParams, CancelResult, (-32602,)),
    "run/result": MethodSpec(
        "client→daemon",
        RunIdParams,
        AgentRunResult,
        (-32602, -32011, -32014),
        "the result of a finished run still in its agent's journal",
    ),
    "agent/watch": MethodSpec(
        "client→daemon",
        WatchParams,
        WatchResult,
        (-32602, -32011, -32013),
        "follow an agent's journal, caught up from afterSeq first",
    ),
    "agent/unwatch": MethodSpec("client→daemon", AgentIdParams, EmptyResult, _AGENT_ID_ERRORS),
    "agent/event": MethodSpec(
        "daemon→client", AgentEventParams, None, (), "one journal entry of a watched agent"
    ),
    "oma/runAgent": MethodSpec(
        "client→daemon",
        RunAgentParams,
        AgentRunResult,
        (-32602, -32011, -32012, -32010, -32001),
        "a one-off agent with oma/progress notifications",
    ),
    "oma/runTasks": MethodSpec(
        "client→daemon",
        RunTasksParams,
        TeamRunResult,
        (-32602, -32010, -32001),
        "a DAG of tasks on daemon profiles, with oma/progress notifications",
    ),
    "oma/runTeam": MethodSpec(
        "client→daemon",
        RunTeamParams,
        TeamRunResult,
        (-32602, -32011, -32010, -32001),
        "a coordinator plans tasks for profiles, they run, it writes the answer",
    ),
    "daemon/status": MethodSpec("client→daemon", _Ignored, DaemonStatus, ()),
    "daemon/audit": MethodSpec(
        "client→daemon",
        AuditParams,
        DaemonAuditResult,
        (-32602,),
        "extension: the newest records of the audit log (the status page's tail)",
    ),
    "run/event": MethodSpec("daemon→client", RunEventParams, None, (), "one event of a stream"),
    "oma/progress": MethodSpec(
        "daemon→client",
        ProgressParams,
        None,
        (),
        "one progress event of oma/runAgent, oma/runTasks or oma/runTeam",
    ),
    "hook/beforeRun": MethodSpec(
        "daemon→client", BeforeRunParams, BeforeRunAnswer, (), "to the agent's hook owner"
    ),
    "hook/afterRun": MethodSpec(
        "daemon→client", AfterRunParams, AfterRunAnswer, (), "to the agent's hook owner"
    ),
    "permission/request": MethodSpec(
        "daemon→client",
        PermissionRequestParams,
        PermissionAnswer,
        (),
        "to the connection that started the run",
    ),
    "elicitation/request": MethodSpec(
        "daemon→client",
        ElicitationRequestParams,
        ElicitationAnswer,
        (),
        "extension: an ACP agent asks the user; to the run's connection, then watchers, "
        "that declared elicitation",
    ),
    "$/cancel_request": MethodSpec(
        "both", CancelRequestParams, None, (), "withdraw a pending request"
    ),
}

ERRORS: dict[int, ErrorSpec] = {
    -32700: ErrorSpec("Parse error", EnvelopeErrorData, "not JSON"),
    -32600: ErrorSpec(
        "Invalid Request", EnvelopeErrorData, "not a JSON-RPC request; a second initialize"
    ),
    -32601: ErrorSpec("Method not found: <method>", ErrorDetailsData, "unknown method"),
    -32602: ErrorSpec("Invalid params", InvalidParamsData, "params of the wrong shape"),
    -32603: ErrorSpec("Internal error", ErrorDetailsData, "a bug; logged with a trace"),
    -32800: ErrorSpec(
        "Request cancelled", ErrorDetailsData, "the client sent $/cancel_request for it"
    ),
    -32001: ErrorSpec("Overloaded: too many runs queued", OverloadedData, "past max_queued_runs"),
    -32002: ErrorSpec("Not initialized", ErrorDetailsData, "a request before initialize"),
    -32003: ErrorSpec(
        "Unsupported protocol version", UnsupportedVersionData, "initialize with another version"
    ),
    -32010: ErrorSpec("<the InvalidMessageError message>", InvalidMessageData, "invalid input"),
    -32011: ErrorSpec("Not found: <what>", NotFoundData, "unknown agentId, runId or profile"),
    -32012: ErrorSpec("Forbidden: <why>", ForbiddenData, "refused by the daemon's policy"),
    -32013: ErrorSpec(
        "Cursor expired: <why>", CursorExpiredData, "afterSeq older than the retained entries"
    ),
    -32014: ErrorSpec("Run in progress: <runId>", RunInProgressData, "run/result of a live run"),
    -32015: ErrorSpec(
        "The sandbox cannot be applied: <reason>. To fix it: <fix>.",
        SandboxUnavailableData,
        "a run of a sandboxed profile whose sandbox cannot be applied; nothing spawned",
    ),
}

# ---------------------------------------------------------------------------
# Assembly

_REF = "#/$defs/{model}"


def _name(kind: Any) -> str:
    if kind is _Ignored:
        return "IgnoredParams"
    return str(kind.__name__)


def _adapter_schema(kind: Any) -> dict[str, Any]:
    if kind is _Ignored:
        return {"description": "The daemon ignores these params."}
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return kind.model_json_schema(ref_template=_REF, mode="validation")
    return TypeAdapter(kind).json_schema(ref_template=_REF, mode="validation")


def _collect(kind: Any, defs: dict[str, Any]) -> dict[str, str]:
    """Put ``kind`` (and every shape it uses) into ``defs``; return its ``$ref``."""
    schema = _adapter_schema(kind)
    for name, nested in schema.pop("$defs", {}).items():
        _add(defs, name, nested)
    _add(defs, _name(kind), schema)
    return {"$ref": _REF.format(model=_name(kind))}


def _add(defs: dict[str, Any], name: str, schema: dict[str, Any]) -> None:
    known = defs.get(name)
    if known is not None and known != schema:
        raise ValueError(f"two different wire shapes are named {name}")
    defs[name] = schema


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def protocol_schema() -> dict[str, Any]:
    """The JSON Schema document of the wire protocol (keys sorted, stable)."""
    defs: dict[str, Any] = {}
    methods: dict[str, Any] = {}
    for method, spec in METHODS.items():
        entry: dict[str, Any] = {
            "direction": spec.direction,
            "kind": "notification" if spec.notification else "request",
            "params": _collect(spec.params, defs),
        }
        if spec.result is not None:
            entry["result"] = _collect(spec.result, defs)
        if spec.errors:
            entry["errors"] = list(spec.errors)
        if spec.summary:
            entry["summary"] = spec.summary
        methods[method] = entry
    errors: dict[str, Any] = {}
    for code, error in ERRORS.items():
        described: dict[str, Any] = {"message": error.message, "when": error.when}
        if error.data is not None:
            described["data"] = _collect(error.data, defs)
        errors[str(code)] = described
    envelopes = [_collect(kind, defs) for kind in ENVELOPES]
    document = {
        "$schema": SCHEMA_DIALECT,
        "title": f"oma-bridge wire protocol, version {PROTOCOL_VERSION}",
        "description": (
            "Validates one frame's JSON-RPC envelope. x-methods gives, per method, the $ref of "
            "its params and result; x-errors the data of each error code. Generated from the "
            "models in oma_bridge/wire/schema.py by scripts/gen_schema.py."
        ),
        "x-protocolVersion": PROTOCOL_VERSION,
        "oneOf": envelopes,
        "$defs": defs,
        "x-methods": methods,
        "x-errors": errors,
    }
    return dict(_sorted(document))
