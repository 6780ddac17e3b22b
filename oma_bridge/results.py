"""What a run produces: :class:`AgentRunResult` and :class:`StreamEvent`.

Plain dataclasses inside the library; ``to_wire()`` gives exactly the JSON
shapes of docs/contract.md §6 (camelCase fields, OMA's ``snake_case`` inside
token usage and message blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, get_args

from oma_bridge.errors import ErrorKind, OMAError, is_retryable

if TYPE_CHECKING:  # the client reads results without the messages package
    from oma_bridge.messages import LLMMessage

__all__ = [
    "AgentRunResult",
    "ErrorInfo",
    "ErrorKind",
    "RunIdentity",
    "RunStatus",
    "StatusCode",
    "StreamEvent",
    "StreamEventType",
    "TokenUsage",
    "ToolCallRecord",
]

StatusCode: TypeAlias = Literal["ok", "error", "cancelled", "timeout", "budget_exhausted"]
StreamEventType: TypeAlias = Literal[
    "text",
    "reasoning",
    "tool_use",
    "tool_result",
    "budget_exceeded",
    "done",
    "error",
    "update",
    # An ACP agent's session state, typed (docs/decisions.md D15): ``data`` is
    # the update without its ``sessionUpdate``.
    "plan",
    "usage_update",
    "available_commands_update",
    "current_mode_update",
]
#: The ACP ``sessionUpdate`` kinds that are stream events of their own type.
ACP_TYPED_UPDATES = frozenset(
    {"plan", "usage_update", "available_commands_update", "current_mode_update"}
)

#: OMA caps ``status.message`` at 256 characters and ``errorInfo.message`` at 1,024.
STATUS_MESSAGE_LIMIT = 256
ERROR_MESSAGE_LIMIT = 1024


def _redact(text: str) -> str:
    """:func:`~oma_bridge.redaction.redact`, imported at first use: its patterns
    compile at import, which a client that only reads results never needs."""
    from oma_bridge.redaction import redact

    return redact(text)


def _cap(text: str, limit: int) -> str:
    text = _redact(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: TokenUsage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens

    def to_wire(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


@dataclass
class ToolCallRecord:
    tool_name: str
    input: Any
    output: str
    duration: int  # milliseconds

    def to_wire(self) -> dict[str, Any]:
        return {
            "toolName": self.tool_name,
            "input": self.input,
            "output": self.output,
            "duration": self.duration,
        }


@dataclass
class RunStatus:
    code: StatusCode = "ok"
    message: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"code": self.code}
        if self.message is not None:
            wire["message"] = _cap(self.message, STATUS_MESSAGE_LIMIT)
        return wire


_STATUS_BY_KIND: dict[ErrorKind, StatusCode] = {
    "timeout": "timeout",
    "budget": "budget_exhausted",
    "cancelled": "cancelled",
}


@dataclass
class ErrorInfo:
    kind: ErrorKind
    code: str | None = None
    name: str | None = None
    message: str | None = None
    #: :func:`~oma_bridge.errors.is_retryable` of the error, when it was known
    #: (team runs retry on it); ``None`` for an info read from the wire, which
    #: does not carry it.
    retryable: bool | None = None

    @classmethod
    def from_error(cls, kind: ErrorKind, error: BaseException) -> ErrorInfo:
        retryable = is_retryable(error)
        if isinstance(error, OMAError):
            return cls(kind, error.code, error.name, error.message, retryable)
        return cls(kind=kind, name=type(error).__name__, message=str(error), retryable=retryable)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"kind": self.kind}
        if self.code is not None:
            wire["code"] = self.code
        if self.name is not None:
            wire["name"] = self.name
        if self.message is not None:
            wire["message"] = _cap(self.message, ERROR_MESSAGE_LIMIT)
        return wire


@dataclass(frozen=True)
class RunIdentity:
    """Who a run is in traces: set by ``OpenMultiAgent.run_agent``."""

    run_id: str
    attempt: int
    trace_id: str  # 32 hex digits
    root_span_id: str  # 16 hex digits

    def to_wire(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "attempt": self.attempt,
            "traceId": self.trace_id,
            "rootSpanId": self.root_span_id,
        }


@dataclass
class AgentRunResult:
    """The outcome of one run; ``success`` is true exactly when ``status.code == "ok"``."""

    run_id: str
    success: bool
    output: str
    messages: list[LLMMessage] = field(default_factory=list)
    token_usage: TokenUsage = field(default_factory=TokenUsage)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    status: RunStatus = field(default_factory=RunStatus)
    error_info: ErrorInfo | None = None
    budget_exceeded: bool = False
    #: Set by ``run_agent`` only; an extension of the wire shape (docs/protocol.md).
    identity: RunIdentity | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "runId": self.run_id,
            "success": self.success,
            "output": self.output,
            "messages": self.messages,
            "tokenUsage": self.token_usage.to_wire(),
            "toolCalls": [call.to_wire() for call in self.tool_calls],
            "status": self.status.to_wire(),
        }
        if self.error_info is not None:
            wire["errorInfo"] = self.error_info.to_wire()
        if self.budget_exceeded:
            wire["budgetExceeded"] = True
        if self.identity is not None:
            wire["identity"] = self.identity.to_wire()
        return wire

    @classmethod
    def failed(
        cls, run_id: str, error: BaseException, kind: ErrorKind, *, partial: str = ""
    ) -> AgentRunResult:
        """The one failed result: no messages, no usage, the message (or ``partial``) as output.

        ``status.code`` follows ``kind`` (``timeout``, ``budget_exhausted``,
        ``cancelled``, else ``error``), as open-multi-agent's exception path does.
        """
        message = str(error) or type(error).__name__
        return cls(
            run_id=run_id,
            success=False,
            output=partial or message,
            status=RunStatus(_STATUS_BY_KIND.get(kind, "error"), message),
            error_info=ErrorInfo.from_error(kind, error),
        )

    @classmethod
    def from_wire(cls, wire: Any) -> AgentRunResult:
        """Parse the §6 shape (a client reading a result, an ``afterRun`` answer).

        Raises ``ValueError`` naming the first field of the wrong shape.
        """
        if not isinstance(wire, dict):
            raise ValueError(f"an AgentRunResult must be an object, got {type(wire).__name__}")
        usage = _field(wire, "tokenUsage", dict, {})
        status = _field(wire, "status", dict, {"code": "ok"})
        code = status.get("code")
        if code not in _STATUS_CODES:
            raise ValueError(f"status.code must be one of {sorted(_STATUS_CODES)}, got {code!r}")
        info = wire.get("errorInfo")
        if info is not None and not isinstance(info, dict):
            raise ValueError("errorInfo must be an object")
        identity = wire.get("identity")
        return cls(
            run_id=str(_field(wire, "runId", str, "")),
            success=bool(_field(wire, "success", bool, code == "ok")),
            output=_field(wire, "output", str, ""),
            messages=list(_field(wire, "messages", list, [])),
            token_usage=TokenUsage(
                int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
            ),
            tool_calls=[
                ToolCallRecord(
                    str(call.get("toolName", "")),
                    call.get("input"),
                    str(call.get("output", "")),
                    int(call.get("duration", 0)),
                )
                for call in _field(wire, "toolCalls", list, [])
                if isinstance(call, dict)
            ],
            status=RunStatus(code, status.get("message")),
            error_info=None
            if info is None
            else ErrorInfo(
                kind=info.get("kind", "internal"),
                code=info.get("code"),
                name=info.get("name"),
                message=info.get("message"),
            ),
            budget_exceeded=bool(wire.get("budgetExceeded", False)),
            identity=None
            if not isinstance(identity, dict)
            else RunIdentity(
                str(identity.get("runId", "")),
                int(identity.get("attempt", 1)),
                str(identity.get("traceId", "")),
                str(identity.get("rootSpanId", "")),
            ),
        )


_STATUS_CODES = frozenset(get_args(StatusCode))


def _field(wire: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = wire.get(key, default)
    if not isinstance(value, kind):
        raise ValueError(f"{key} must be of type {kind.__name__}, got {type(value).__name__}")
    return value


@dataclass
class StreamEvent:
    """One event of a stream.

    ``data`` is a string for ``text`` and ``reasoning``, the block for
    ``tool_use`` / ``tool_result``, the :class:`AgentRunResult` for ``done``,
    an :class:`~oma_bridge.errors.OMAError` (or any exception) for ``error``
    and ``budget_exceeded``, the raw ACP update for ``update``, and the ACP
    update without its ``sessionUpdate`` for the typed ACP kinds (``plan``,
    ``usage_update``, ``available_commands_update``, ``current_mode_update``).
    """

    type: StreamEventType
    data: Any
    #: The ACP update this event came from, when it must be relayed as the agent
    #: sent it (the typed kinds; a text or thought chunk carrying more than its
    #: text: ``messageId``, ``_meta``, ``annotations``).  Not part of the wire event.
    acp_update: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def to_wire(self) -> dict[str, Any]:
        data = self.data
        if type(data) is str:  # text and reasoning: a stream's every event
            return {"type": self.type, "data": data}
        if isinstance(data, AgentRunResult):
            data = data.to_wire()
        elif isinstance(data, OMAError):
            data = {"name": data.name, "code": data.code, "message": _redact(data.message)}
        elif isinstance(data, BaseException):
            data = {"name": type(data).__name__, "message": _redact(str(data))}
        return {"type": self.type, "data": data}
