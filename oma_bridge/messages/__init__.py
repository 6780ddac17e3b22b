"""Message types, the shape guard and the defensive copy (the bottom layer).

* :mod:`~oma_bridge.messages.types`: ``LLMMessage``, ``ContentBlock`` and the
  inputs of ``run`` and ``prompt``;
* :mod:`~oma_bridge.messages.guard`: :func:`validate_messages`,
  :func:`validate_content_blocks`;
* :mod:`~oma_bridge.messages.copy`: :func:`copy_messages`;
* :mod:`~oma_bridge.messages.checked`: :func:`checked_copy`, the two in one walk.
"""

from oma_bridge.messages.checked import checked_copy
from oma_bridge.messages.copy import MAX_CONTAINERS, MAX_NESTING_DEPTH, copy_messages
from oma_bridge.messages.guard import (
    is_canonical_base64,
    validate_content_blocks,
    validate_messages,
)
from oma_bridge.messages.types import (
    AgentPromptInput,
    AgentRunInput,
    Base64Source,
    ContentBlock,
    ImageBlock,
    LLMMessage,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolResultFilePart,
    ToolResultImagePart,
    ToolResultPart,
    ToolResultTextPart,
    ToolUseBlock,
    UrlSource,
    last_user_text,
    text_message,
)

__all__ = [
    "MAX_CONTAINERS",
    "MAX_NESTING_DEPTH",
    "AgentPromptInput",
    "AgentRunInput",
    "Base64Source",
    "ContentBlock",
    "ImageBlock",
    "LLMMessage",
    "ReasoningBlock",
    "TextBlock",
    "ToolResultBlock",
    "ToolResultFilePart",
    "ToolResultImagePart",
    "ToolResultPart",
    "ToolResultTextPart",
    "ToolUseBlock",
    "UrlSource",
    "checked_copy",
    "copy_messages",
    "is_canonical_base64",
    "last_user_text",
    "text_message",
    "validate_content_blocks",
    "validate_messages",
]
