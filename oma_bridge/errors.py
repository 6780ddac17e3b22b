"""The error classes of oma_bridge, with the stable codes of open-multi-agent.

Every error has a ``code`` (stable, machine-readable), a ``name`` (the class
name OMA reports, which for two of them is a JavaScript built-in name) and a
message.  ``to_wire()`` gives the ``{"name", "code", "message"}`` shape that
travels in ``errorInfo`` and in stream ``error`` events.

Where OMA has no code (a whole-run timeout, a caller cancel, a backend
failure), oma_bridge gives one so that clients can switch on ``code`` alone;
the names stay OMA's.  See ``docs/errors.md``.
"""

from __future__ import annotations

from typing import ClassVar, Literal, TypeAlias

__all__ = [
    "AuthRequiredError",
    "BackendError",
    "CallbackError",
    "CostBudgetExceededError",
    "EgressPolicyError",
    "ErrorKind",
    "InvalidEgressPolicyError",
    "InvalidMessageError",
    "LLMCallTimeoutError",
    "OMAError",
    "ProviderError",
    "RefusedError",
    "RunCancelledError",
    "RunTimeoutError",
    "SandboxUnavailableError",
    "StructuredOutputValidationError",
    "TaskGraphError",
    "TeamError",
    "TokenBudgetExceededError",
    "UnsupportedToolCallError",
    "UnsupportedToolResultContentError",
    "WireError",
    "WorktreeError",
    "is_retryable",
    "kind_of",
]

#: What kind of failure ended a run (``errorInfo.kind``): each error class says its own.
ErrorKind: TypeAlias = Literal[
    "callback", "backend", "provider", "timeout", "cancelled", "budget", "internal"
]


class OMAError(Exception):
    """Base class: a message, a stable ``code`` and a reported ``name``."""

    code: ClassVar[str] = "INTERNAL_ERROR"
    #: The name reported on the wire; defaults to the class name.
    wire_name: ClassVar[str | None] = None
    #: Whether a retry of the same call may succeed (see :func:`is_retryable`).
    retryable: ClassVar[bool] = True
    #: The ``errorInfo.kind`` of a run this error ended (:func:`kind_of`).
    kind: ClassVar[ErrorKind] = "backend"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def name(self) -> str:
        return self.wire_name or type(self).__name__

    def to_wire(self) -> dict[str, str]:
        return {"name": self.name, "code": self.code, "message": self.message}


class InvalidMessageError(OMAError):
    """Input that fails the shape guard, the copy, or the text-only boundary.

    ``path`` names the offending place (``messages[0].content[1]``) when the
    guard knows it.
    """

    code = "INVALID_MESSAGE"
    retryable = False

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class TokenBudgetExceededError(OMAError):
    code = "TOKEN_BUDGET_EXCEEDED"
    kind = "budget"
    retryable = False

    def __init__(self, agent: str, used: int, budget: int) -> None:
        super().__init__(
            f'Agent "{agent}" exceeded token budget: {used} tokens used (budget: {budget})'
        )
        self.used = used
        self.budget = budget


class CostBudgetExceededError(OMAError):
    code = "COST_BUDGET_EXCEEDED"
    kind = "budget"
    retryable = False

    def __init__(self, agent: str, used: float, budget: float) -> None:
        super().__init__(
            f'Agent "{agent}" exceeded cost budget: {_js_number(used)} estimated cost used'
            f" (budget: {_js_number(budget)})"
        )
        self.used = used
        self.budget = budget


def _js_number(value: float) -> str:
    """A number as JavaScript prints it (``2`` rather than ``2.0``)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class LLMCallTimeoutError(OMAError):
    """One provider call (or a stalled stream) ran past ``call_timeout_ms``."""

    code = "LLM_CALL_TIMEOUT"
    kind = "timeout"


class RunTimeoutError(OMAError):
    """The whole-run timer fired (OMA reports the name ``TimeoutError``)."""

    code = "RUN_TIMEOUT"
    kind = "timeout"
    wire_name = "TimeoutError"

    @classmethod
    def for_agent(cls, agent: str, timeout_ms: int) -> RunTimeoutError:
        return cls(f'Agent "{agent}" exceeded whole-run timeout of {timeout_ms}ms')


class RunCancelledError(OMAError):
    """The caller cancelled the run (OMA reports the name ``AbortError``)."""

    code = "RUN_CANCELLED"
    kind = "cancelled"
    wire_name = "AbortError"
    retryable = False

    def __init__(self, message: str = "Run cancelled by caller.") -> None:
        super().__init__(message)


class StructuredOutputValidationError(OMAError):
    code = "STRUCTURED_OUTPUT_VALIDATION_FAILED"
    retryable = False


class UnsupportedToolCallError(OMAError):
    code = "UNSUPPORTED_TOOL_CALL"
    retryable = False


class UnsupportedToolResultContentError(OMAError):
    code = "UNSUPPORTED_TOOL_RESULT_CONTENT"
    retryable = False


class EgressPolicyError(OMAError):
    """A request denied by an egress policy (status ``rejected`` in OMA)."""

    code = "EGRESS_POLICY_DENIED"
    retryable = False


class InvalidEgressPolicyError(EgressPolicyError):
    code = "INVALID_EGRESS_POLICY"


class CallbackError(OMAError):
    """A ``beforeRun`` / ``afterRun`` hook raised, timed out or answered badly."""

    code = "CALLBACK_ERROR"
    kind = "callback"
    retryable = False


class BackendError(OMAError):
    """A process or ACP backend failed (non-zero exit, crash, refused turn)."""

    code = "BACKEND_ERROR"


class AuthRequiredError(BackendError):
    """An ACP agent answered -32000: it needs authentication (docs/contract.md §11.33)."""

    code = "AUTH_REQUIRED"
    retryable = False


class RefusedError(BackendError):
    """An ACP agent ended its turn with ``stopReason: "refusal"`` (docs/acp.md).

    A failed run on the daemon's own protocol, as any refused ACP turn is
    (docs/contract.md §7); its code lets the ACP facade answer its own client
    ``stopReason: "refusal"`` instead of an error.
    """

    code = "REFUSED"
    retryable = False


class SandboxUnavailableError(BackendError):
    """A profile's sandbox cannot be applied here (PROTOCOL §19.1): nothing was spawned.

    ``reason`` says why (no bubblewrap binary, user namespaces refused); the
    message adds how to fix it.  The daemon answers it with -32015
    ``SandboxUnavailable``; a run of the library fails with it.
    """

    code = "SANDBOX_UNAVAILABLE"
    retryable = False

    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(f"The sandbox cannot be applied: {reason}. To fix it: {fix}.")
        self.reason = reason
        self.fix = fix


class WorktreeError(OMAError):
    """A git worktree of the client's repository cannot be made or ended (PROTOCOL §19.2).

    ``reason`` says why (the folder is not in a git repository, the
    repository has no commit, git is missing or failed); the message adds
    how to fix it when there is a fix.  ``not_a_repository`` marks the
    client's mistake (the daemon answers it -32602) from the machine's.
    """

    code = "WORKTREE_ERROR"
    retryable = False

    def __init__(
        self, reason: str, fix: str | None = None, *, not_a_repository: bool = False
    ) -> None:
        super().__init__(f"{reason}. To fix it: {fix}." if fix else reason)
        self.reason = reason
        self.fix = fix
        self.not_a_repository = not_a_repository


class ProviderError(OMAError):
    """An LLM provider answered with an error, or its stream broke."""

    code = "PROVIDER_ERROR"
    kind = "provider"

    def __init__(
        self, message: str, *, http_status: int | None = None, provider: str | None = None
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.provider = provider


class WireError(OMAError):
    """A JSON-RPC error answer from a peer (a client, the daemon, an ACP agent)."""

    code = "WIRE_ERROR"

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(message)
        self.rpc_code = code
        self.data = data


class TeamError(ValueError):
    """A team run refused before anything ran: a bad roster, a bad option.

    A ``ValueError`` rather than an :class:`OMAError`: it is the caller's
    argument that is wrong, not a run that failed (the daemon answers it
    with -32602).  :class:`TaskGraphError` is the case of bad tasks.
    """


class TaskGraphError(TeamError):
    """Tasks that cannot run as given: a bad shape, a duplicate title or id,
    an unknown ``dependsOn`` or assignee, a cycle.

    ``issues`` lists every problem found (each names its task); the message
    joins them.  ``tasks`` holds the titles (or ``tasks[i]``) of the tasks named.
    """

    def __init__(self, issues: list[str], tasks: list[str]) -> None:
        super().__init__(" ".join(issues))
        self.issues = list(issues)
        self.tasks = list(tasks)


_RETRYABLE_HTTP_4XX = frozenset({408, 409, 429})


def is_retryable(error: BaseException) -> bool:
    """Classify an error as OMA does: terminal errors are never retried.

    Terminal: invalid input, budgets, caller cancels, structured-output and
    tool-shape errors, egress denials, and HTTP 4xx other than 408, 409 and
    429.  Everything else (a 5xx, a timeout, a process exit, an unknown
    exception) may be retried.
    """
    status = getattr(error, "http_status", None)
    if isinstance(status, int) and 400 <= status < 500:
        return status in _RETRYABLE_HTTP_4XX
    if isinstance(error, OMAError):
        return error.retryable
    return True


def kind_of(error: BaseException) -> ErrorKind:
    """The ``errorInfo.kind`` of a run ``error`` ended: its class's, ``internal`` for a bug."""
    return error.kind if isinstance(error, OMAError) else "internal"
