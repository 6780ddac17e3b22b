"""Error classes: stable codes and names, the wire shape, and the retry rule (section 14)."""

from __future__ import annotations

import pytest

from oma_bridge.errors import (
    AuthRequiredError,
    BackendError,
    CallbackError,
    CostBudgetExceededError,
    EgressPolicyError,
    InvalidEgressPolicyError,
    InvalidMessageError,
    LLMCallTimeoutError,
    OMAError,
    ProviderError,
    RunCancelledError,
    RunTimeoutError,
    StructuredOutputValidationError,
    TokenBudgetExceededError,
    UnsupportedToolCallError,
    UnsupportedToolResultContentError,
    WireError,
    is_retryable,
    kind_of,
)


@pytest.mark.parametrize(
    ("error", "name", "code"),
    [
        (InvalidMessageError("m"), "InvalidMessageError", "INVALID_MESSAGE"),
        (TokenBudgetExceededError("a", 2, 1), "TokenBudgetExceededError", "TOKEN_BUDGET_EXCEEDED"),
        (CostBudgetExceededError("a", 2, 1), "CostBudgetExceededError", "COST_BUDGET_EXCEEDED"),
        (LLMCallTimeoutError("m"), "LLMCallTimeoutError", "LLM_CALL_TIMEOUT"),
        (RunTimeoutError("m"), "TimeoutError", "RUN_TIMEOUT"),
        (RunCancelledError(), "AbortError", "RUN_CANCELLED"),
        (
            StructuredOutputValidationError("m"),
            "StructuredOutputValidationError",
            "STRUCTURED_OUTPUT_VALIDATION_FAILED",
        ),
        (UnsupportedToolCallError("m"), "UnsupportedToolCallError", "UNSUPPORTED_TOOL_CALL"),
        (
            UnsupportedToolResultContentError("m"),
            "UnsupportedToolResultContentError",
            "UNSUPPORTED_TOOL_RESULT_CONTENT",
        ),
        (EgressPolicyError("m"), "EgressPolicyError", "EGRESS_POLICY_DENIED"),
        (InvalidEgressPolicyError("m"), "InvalidEgressPolicyError", "INVALID_EGRESS_POLICY"),
        (CallbackError("m"), "CallbackError", "CALLBACK_ERROR"),
        (BackendError("m"), "BackendError", "BACKEND_ERROR"),
        (AuthRequiredError("m"), "AuthRequiredError", "AUTH_REQUIRED"),
        (ProviderError("m", http_status=500), "ProviderError", "PROVIDER_ERROR"),
        (WireError(-32000, "m"), "WireError", "WIRE_ERROR"),
    ],
    ids=lambda value: value if isinstance(value, str) else type(value).__name__,
)
def test_names_codes_and_the_wire_shape(error: OMAError, name: str, code: str) -> None:
    assert isinstance(error, OMAError)
    assert isinstance(error, Exception)
    assert error.name == name
    assert error.code == code
    assert type(error).code == code  # a stable class attribute, not per instance
    assert error.to_wire() == {"name": name, "code": code, "message": str(error)}
    assert error.message == str(error)


def test_invalid_message_error() -> None:
    error = InvalidMessageError("messages[0] must be an object, got null", path="messages[0]")
    assert str(error) == "messages[0] must be an object, got null"
    assert error.path == "messages[0]"
    assert InvalidMessageError("m").path is None
    assert error.to_wire() == {
        "name": "InvalidMessageError",
        "code": "INVALID_MESSAGE",
        "message": "messages[0] must be an object, got null",
    }


def test_the_reference_messages() -> None:
    assert str(TokenBudgetExceededError("coder", 1200, 1000)) == (
        'Agent "coder" exceeded token budget: 1200 tokens used (budget: 1000)'
    )
    assert str(CostBudgetExceededError("coder", 2.0, 1.5)) == (
        'Agent "coder" exceeded cost budget: 2 estimated cost used (budget: 1.5)'
    )
    assert str(RunTimeoutError.for_agent("coder", 5000)) == (
        'Agent "coder" exceeded whole-run timeout of 5000ms'
    )
    assert str(RunCancelledError()) == "Run cancelled by caller."


def test_budget_errors_keep_their_figures() -> None:
    error = TokenBudgetExceededError("a", 12, 10)
    assert (error.used, error.budget) == (12, 10)
    cost = CostBudgetExceededError("a", 0.25, 0.2)
    assert (cost.used, cost.budget) == (0.25, 0.2)


def test_provider_and_wire_error_details() -> None:
    error = ProviderError("rate limited", http_status=429, provider="anthropic")
    assert (error.http_status, error.provider) == (429, "anthropic")
    wire = WireError(-32602, "bad params", {"errors": []})
    assert (wire.rpc_code, wire.data, wire.code) == (-32602, {"errors": []}, "WIRE_ERROR")


# -- the retry rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        InvalidMessageError("m"),
        TokenBudgetExceededError("a", 2, 1),
        CostBudgetExceededError("a", 2, 1),
        RunCancelledError(),
        StructuredOutputValidationError("m"),
        UnsupportedToolCallError("m"),
        UnsupportedToolResultContentError("m"),
        EgressPolicyError("m"),
        InvalidEgressPolicyError("m"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_terminal_errors_are_not_retried(error: OMAError) -> None:
    assert not is_retryable(error)
    assert not error.retryable


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 410, 413, 418, 422, 451, 499])
def test_http_4xx_is_terminal(status: int) -> None:
    assert not is_retryable(ProviderError("m", http_status=status))


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529, 599])
def test_http_408_409_429_and_5xx_are_retried(status: int) -> None:
    assert is_retryable(ProviderError("m", http_status=status))


@pytest.mark.parametrize(
    "error",
    [
        ProviderError("connection reset"),  # no status
        LLMCallTimeoutError("m"),
        RunTimeoutError("m"),
        BackendError('Process backend "wc" exited with code 7'),
        WireError(-32603, "internal"),
        Exception("plain"),
        RuntimeError("plain"),
        TimeoutError(),
        OSError("EPIPE"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_everything_else_is_retried(error: BaseException) -> None:
    assert is_retryable(error)


def test_the_status_decides_before_the_class() -> None:
    class Rejected(Exception):
        http_status = 403

    class Throttled(InvalidMessageError):
        http_status = 429

    assert not is_retryable(Rejected())
    assert is_retryable(Throttled("m"))


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ProviderError("m", http_status=500), "provider"),
        (LLMCallTimeoutError("m"), "timeout"),
        (RunTimeoutError("m"), "timeout"),
        (TokenBudgetExceededError("a", 2, 1), "budget"),
        (CostBudgetExceededError("a", 2, 1), "budget"),
        (CallbackError("m"), "callback"),
        (RunCancelledError(), "cancelled"),
        (BackendError("m"), "backend"),
        (AuthRequiredError("m"), "backend"),
        (InvalidMessageError("m"), "backend"),
        (WireError(-32000, "m"), "backend"),
        (ValueError("a bug"), "internal"),
    ],
    ids=lambda value: value if isinstance(value, str) else type(value).__name__,
)
def test_each_error_class_says_the_kind_of_failure_it_is(error: BaseException, kind: str) -> None:
    """``errorInfo.kind``: a class attribute of each error, not a chain of isinstance tests."""
    assert kind_of(error) == kind
