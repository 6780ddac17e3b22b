"""oma-bridge: LLM, process and ACP agents side by side, with open-multi-agent semantics.

The library is usable without the daemon::

    from oma_bridge import Agent, AgentConfig

    agent = Agent(AgentConfig(name="demo", provider="echo", model="echo-1"))
    result = await agent.run("hello")

The root holds what the README and the docs use: agents and their configs,
messages, results, errors, teams, the client's ``connect``
(``tests/test_public_api.py`` pins it).  The rest is reached from its
subpackage: a backend's seam from :mod:`oma_bridge.backends`, prepared input
from :mod:`oma_bridge.agent`, the guard from :mod:`oma_bridge.messages`, the
evaluator's parts from :mod:`oma_bridge.orchestration.evaluation`.

Names are resolved on first use (PEP 562): ``import oma_bridge.client`` (the
command line, the ACP shim) does not pay for the agent layer, pydantic and
the backends it does not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oma_bridge._lazy import lazy_attributes
from oma_bridge._version import __version__

if TYPE_CHECKING:
    from oma_bridge.agent import (
        Agent,
        AgentConfig,
        AgentState,
        RunStream,
    )
    from oma_bridge.backends import (
        ElicitationRequest,
        PermissionRequest,
    )
    from oma_bridge.backends.acp.config import (
        AcpConfig,
    )
    from oma_bridge.backends.llm.config import (
        LlmConfig,
    )
    from oma_bridge.backends.process.config import (
        ProcessConfig,
    )
    from oma_bridge.client import (
        ClientError,
        connect,
    )
    from oma_bridge.errors import (
        AuthRequiredError,
        BackendError,
        CallbackError,
        CostBudgetExceededError,
        InvalidMessageError,
        LLMCallTimeoutError,
        OMAError,
        ProviderError,
        RefusedError,
        RunCancelledError,
        RunTimeoutError,
        SandboxUnavailableError,
        TaskGraphError,
        TeamError,
        TokenBudgetExceededError,
        is_retryable,
    )
    from oma_bridge.messages import (
        AgentPromptInput,
        AgentRunInput,
        ContentBlock,
        LLMMessage,
    )
    from oma_bridge.orchestration.evaluation import (
        EvaluationConfig,
    )
    from oma_bridge.orchestration.orchestrator import (
        OpenMultiAgent,
    )
    from oma_bridge.orchestration.outcome import (
        TeamRunResult,
        TeamTask,
    )
    from oma_bridge.orchestration.roster import (
        Team,
    )
    from oma_bridge.orchestration.tasks import (
        TaskSpec,
    )
    from oma_bridge.results import (
        AgentRunResult,
        ErrorInfo,
        RunStatus,
        StreamEvent,
        TokenUsage,
        ToolCallRecord,
    )
    from oma_bridge.tools import (
        ToolDefinition,
    )

__all__ = [
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

_HOMES = {
    "AcpConfig": "oma_bridge.backends.acp.config",
    "Agent": "oma_bridge.agent",
    "AgentConfig": "oma_bridge.agent",
    "AgentPromptInput": "oma_bridge.messages",
    "AgentRunInput": "oma_bridge.messages",
    "AgentRunResult": "oma_bridge.results",
    "AgentState": "oma_bridge.agent",
    "AuthRequiredError": "oma_bridge.errors",
    "BackendError": "oma_bridge.errors",
    "CallbackError": "oma_bridge.errors",
    "ClientError": "oma_bridge.client",
    "ContentBlock": "oma_bridge.messages",
    "CostBudgetExceededError": "oma_bridge.errors",
    "ElicitationRequest": "oma_bridge.backends",
    "ErrorInfo": "oma_bridge.results",
    "EvaluationConfig": "oma_bridge.orchestration.evaluation",
    "InvalidMessageError": "oma_bridge.errors",
    "LLMCallTimeoutError": "oma_bridge.errors",
    "LLMMessage": "oma_bridge.messages",
    "LlmConfig": "oma_bridge.backends.llm.config",
    "OMAError": "oma_bridge.errors",
    "OpenMultiAgent": "oma_bridge.orchestration.orchestrator",
    "PermissionRequest": "oma_bridge.backends",
    "ProcessConfig": "oma_bridge.backends.process.config",
    "ProviderError": "oma_bridge.errors",
    "RefusedError": "oma_bridge.errors",
    "RunCancelledError": "oma_bridge.errors",
    "RunStatus": "oma_bridge.results",
    "RunStream": "oma_bridge.agent",
    "RunTimeoutError": "oma_bridge.errors",
    "SandboxUnavailableError": "oma_bridge.errors",
    "StreamEvent": "oma_bridge.results",
    "TaskGraphError": "oma_bridge.errors",
    "TaskSpec": "oma_bridge.orchestration.tasks",
    "Team": "oma_bridge.orchestration.roster",
    "TeamError": "oma_bridge.errors",
    "TeamRunResult": "oma_bridge.orchestration.outcome",
    "TeamTask": "oma_bridge.orchestration.outcome",
    "TokenBudgetExceededError": "oma_bridge.errors",
    "TokenUsage": "oma_bridge.results",
    "ToolCallRecord": "oma_bridge.results",
    "ToolDefinition": "oma_bridge.tools",
    "connect": "oma_bridge.client",
    "is_retryable": "oma_bridge.errors",
}


__getattr__ = lazy_attributes(__name__, _HOMES)


def __dir__() -> list[str]:
    return sorted(__all__)
