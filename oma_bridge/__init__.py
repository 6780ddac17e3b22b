"""oma-bridge: LLM, process and ACP agents side by side, with open-multi-agent semantics.

The library is usable without the daemon::

    from oma_bridge import validate_messages, copy_messages
"""

from ._version import __version__
from .errors import (
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
    TokenBudgetExceededError,
    is_retryable,
)
from .messages import (
    AgentPromptInput,
    AgentRunInput,
    ContentBlock,
    LLMMessage,
    copy_messages,
    validate_content_blocks,
    validate_messages,
)
from .redaction import redact

__all__ = [
    "AgentPromptInput",
    "AgentRunInput",
    "AuthRequiredError",
    "BackendError",
    "CallbackError",
    "ContentBlock",
    "CostBudgetExceededError",
    "InvalidMessageError",
    "LLMCallTimeoutError",
    "LLMMessage",
    "OMAError",
    "ProviderError",
    "RunCancelledError",
    "RunTimeoutError",
    "TokenBudgetExceededError",
    "__version__",
    "copy_messages",
    "is_retryable",
    "redact",
    "validate_content_blocks",
    "validate_messages",
]
