"""oma-bridge: LLM, process and ACP agents side by side, with open-multi-agent semantics.

The library is usable without the daemon::

    from oma_bridge import Agent, AgentConfig

    agent = Agent(AgentConfig(name="demo", provider="echo", model="echo-1"))
    result = await agent.run("hello")
"""

from oma_bridge._version import __version__
from oma_bridge.agent import Agent, AgentConfig, AgentState, RunStream
from oma_bridge.backends import Backend, BackendOutcome, PermissionRequest, RunContext
from oma_bridge.errors import (
    AuthRequiredError,
    BackendError,
    CallbackError,
    CostBudgetExceededError,
    InvalidMessageError,
    LLMCallTimeoutError,
    OMAError,
    ProviderError,
    RunCancelledError,
    RunTimeoutError,
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
from oma_bridge.orchestration.orchestrator import OpenMultiAgent
from oma_bridge.orchestration.outcome import TaskStatus, TeamRunResult, TeamTask
from oma_bridge.orchestration.roster import Team
from oma_bridge.orchestration.tasks import TaskSpec
from oma_bridge.redaction import redact
from oma_bridge.results import (
    AgentRunResult,
    ErrorInfo,
    RunStatus,
    StreamEvent,
    TokenUsage,
    ToolCallRecord,
)
from oma_bridge.tools import ToolDefinition

__all__ = [
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
    "ErrorInfo",
    "EvaluationConfig",
    "EvaluationInput",
    "InvalidMessageError",
    "JsonlFileStore",
    "LLMCallTimeoutError",
    "LLMMessage",
    "OMAError",
    "OnlineEvaluator",
    "OpenMultiAgent",
    "PermissionRequest",
    "ProviderError",
    "RunCancelledError",
    "RunContext",
    "RunStatus",
    "RunStream",
    "RunTimeoutError",
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
