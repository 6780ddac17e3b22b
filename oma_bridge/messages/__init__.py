"""Message types, the shape guard and the defensive copy (the bottom layer)."""

from oma_bridge.messages.guard import (
    MAX_CONTAINERS,
    MAX_NESTING_DEPTH,
    AgentPromptInput,
    AgentRunInput,
    ContentBlock,
    LLMMessage,
    ToolResultBlock,
    copy_messages,
    is_canonical_base64,
    last_user_text,
    prompt_to_messages,
    text_message,
    validate_content_blocks,
    validate_messages,
)

__all__ = [
    "MAX_CONTAINERS",
    "MAX_NESTING_DEPTH",
    "AgentPromptInput",
    "AgentRunInput",
    "ContentBlock",
    "LLMMessage",
    "ToolResultBlock",
    "copy_messages",
    "is_canonical_base64",
    "last_user_text",
    "prompt_to_messages",
    "text_message",
    "validate_content_blocks",
    "validate_messages",
]
