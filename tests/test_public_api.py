"""The root's public surface, pinned (as httpx's ``test_exported_members``).

What ``from oma_bridge import ...`` offers is what the README and the docs
use; adding or removing a name is a decision this list records.  Everything
else is reached from its subpackage.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import oma_bridge

PUBLIC = [
    "AcpConfig",
    "Agent",
    "AgentConfig",
    "AgentPromptInput",
    "AgentRunInput",
    "AgentRunResult",
    "AgentState",
    "AuthRequiredError",
    "BackendError",
    "CallbackError",
    "ClientError",
    "ContentBlock",
    "CostBudgetExceededError",
    "ElicitationRequest",
    "ErrorInfo",
    "EvaluationConfig",
    "InvalidMessageError",
    "LLMCallTimeoutError",
    "LLMMessage",
    "LlmConfig",
    "OMAError",
    "OpenMultiAgent",
    "PermissionRequest",
    "ProcessConfig",
    "ProviderError",
    "RefusedError",
    "RunCancelledError",
    "RunStatus",
    "RunStream",
    "RunTimeoutError",
    "SandboxUnavailableError",
    "StreamEvent",
    "TaskGraphError",
    "TaskSpec",
    "Team",
    "TeamError",
    "TeamRunResult",
    "TeamTask",
    "TokenBudgetExceededError",
    "TokenUsage",
    "ToolCallRecord",
    "ToolDefinition",
    "__version__",
    "connect",
    "is_retryable",
]


def test_the_root_exports_exactly_the_pinned_names() -> None:
    assert oma_bridge.__all__ == PUBLIC
    assert dir(oma_bridge) == sorted(PUBLIC)


@pytest.mark.parametrize("name", [name for name in PUBLIC if name != "__version__"])
def test_every_exported_name_resolves_to_its_own_object(name: str) -> None:
    value = getattr(oma_bridge, name)
    assert getattr(oma_bridge, name) is value  # kept once resolved
    if isinstance(value, type) or (callable(value) and not hasattr(value, "__origin__")):
        # Defined in the package, not a third party's name passed on.
        assert value.__module__.startswith("oma_bridge."), value.__module__


@pytest.mark.parametrize("name", ["Backend", "RunContext", "PreparedInput", "validate_messages"])
def test_internals_are_reached_from_their_subpackage_only(name: str) -> None:
    with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
        getattr(oma_bridge, name)


def test_importing_the_root_imports_nothing_heavy() -> None:
    """The names resolve on first use: ``import oma_bridge`` alone loads no layer below it."""
    code = (
        "import sys, oma_bridge; "
        "print(sorted(m for m in sys.modules if m.startswith('oma_bridge')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['oma_bridge', 'oma_bridge._lazy', 'oma_bridge._version']"
