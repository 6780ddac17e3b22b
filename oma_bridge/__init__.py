"""oma-bridge: LLM, process and ACP agents side by side, with open-multi-agent semantics.

The library is usable without the daemon::

    from oma_bridge import Agent, AgentConfig

    agent = Agent(AgentConfig(name="demo", provider="echo", model="echo-1"))
    result = await agent.run("hello")

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
        PreparedInput,
        PreparedPrompt,
        RunStream,
    )
    from oma_bridge.backends import (
        Backend,
        BackendOutcome,
        ElicitationRequest,
        PermissionRequest,
        RunContext,
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
        copy_messages,
        validate_content_blocks,
        validate_messages,
    )
    from oma_bridge.orchestration.evaluation import (
        EvaluationConfig,
        EvaluationInput,
        JsonlFileStore,
        OnlineEvaluator,
        Score,
    )
    from oma_bridge.orchestration.orchestrator import (
        OpenMultiAgent,
    )
    from oma_bridge.orchestration.outcome import (
        TaskStatus,
        TeamRunResult,
        TeamTask,
    )
    from oma_bridge.orchestration.roster import (
        Team,
    )
    from oma_bridge.orchestration.tasks import (
        TaskSpec,
    )
    from oma_bridge.redaction import (
        redact,
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
    "Backend",
    "BackendError",
    "BackendOutcome",
    "CallbackError",
    "ContentBlock",
    "CostBudgetExceededError",
    "ElicitationRequest",
    "ErrorInfo",
    "EvaluationConfig",
    "EvaluationInput",
    "InvalidMessageError",
    "JsonlFileStore",
    "LLMCallTimeoutError",
    "LLMMessage",
    "LlmConfig",
    "OMAError",
    "OnlineEvaluator",
    "OpenMultiAgent",
    "PermissionRequest",
    "PreparedInput",
    "PreparedPrompt",
    "ProcessConfig",
    "ProviderError",
    "RefusedError",
    "RunCancelledError",
    "RunContext",
    "RunStatus",
    "RunStream",
    "RunTimeoutError",
    "SandboxUnavailableError",
    "Score",
    "StreamEvent",
    "TaskGraphError",
    "TaskSpec",
    "TaskStatus",
    "Team",
    "TeamError",
    "TeamRunResult",
    "TeamTask",
    "TokenBudgetExceededError",
    "TokenUsage",
    "ToolCallRecord",
    "ToolDefinition",
    "__version__",
    "copy_messages",
    "is_retryable",
    "redact",
    "validate_content_blocks",
    "validate_messages",
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
    "Backend": "oma_bridge.backends",
    "BackendError": "oma_bridge.errors",
    "BackendOutcome": "oma_bridge.backends",
    "CallbackError": "oma_bridge.errors",
    "ContentBlock": "oma_bridge.messages",
    "CostBudgetExceededError": "oma_bridge.errors",
    "ErrorInfo": "oma_bridge.results",
    "EvaluationConfig": "oma_bridge.orchestration.evaluation",
    "EvaluationInput": "oma_bridge.orchestration.evaluation",
    "InvalidMessageError": "oma_bridge.errors",
    "JsonlFileStore": "oma_bridge.orchestration.evaluation",
    "LLMCallTimeoutError": "oma_bridge.errors",
    "LLMMessage": "oma_bridge.messages",
    "LlmConfig": "oma_bridge.backends.llm.config",
    "OMAError": "oma_bridge.errors",
    "OnlineEvaluator": "oma_bridge.orchestration.evaluation",
    "OpenMultiAgent": "oma_bridge.orchestration.orchestrator",
    "ElicitationRequest": "oma_bridge.backends",
    "PermissionRequest": "oma_bridge.backends",
    "PreparedInput": "oma_bridge.agent",
    "PreparedPrompt": "oma_bridge.agent",
    "ProcessConfig": "oma_bridge.backends.process.config",
    "ProviderError": "oma_bridge.errors",
    "RefusedError": "oma_bridge.errors",
    "RunCancelledError": "oma_bridge.errors",
    "RunContext": "oma_bridge.backends",
    "RunStatus": "oma_bridge.results",
    "RunStream": "oma_bridge.agent",
    "RunTimeoutError": "oma_bridge.errors",
    "SandboxUnavailableError": "oma_bridge.errors",
    "Score": "oma_bridge.orchestration.evaluation",
    "StreamEvent": "oma_bridge.results",
    "TaskGraphError": "oma_bridge.errors",
    "TaskSpec": "oma_bridge.orchestration.tasks",
    "TaskStatus": "oma_bridge.orchestration.outcome",
    "Team": "oma_bridge.orchestration.roster",
    "TeamError": "oma_bridge.errors",
    "TeamRunResult": "oma_bridge.orchestration.outcome",
    "TeamTask": "oma_bridge.orchestration.outcome",
    "TokenBudgetExceededError": "oma_bridge.errors",
    "TokenUsage": "oma_bridge.results",
    "ToolCallRecord": "oma_bridge.results",
    "ToolDefinition": "oma_bridge.tools",
    "copy_messages": "oma_bridge.messages",
    "is_retryable": "oma_bridge.errors",
    "redact": "oma_bridge.redaction",
    "validate_content_blocks": "oma_bridge.messages",
    "validate_messages": "oma_bridge.messages",
}


__getattr__ = lazy_attributes(__name__, _HOMES)


def __dir__() -> list[str]:
    return sorted(__all__)
