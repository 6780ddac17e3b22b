"""The request shapes the two providers document, as checks that list problems.

Anthropic: https://docs.anthropic.com/en/api/messages (body fields, content
block shapes, tool_use / tool_result pairing, headers ``x-api-key`` and
``anthropic-version``).  OpenAI: https://platform.openai.com/docs/api-reference/chat
(message roles, content parts, ``image_url`` data URLs, ``tool_calls`` with
JSON ``arguments``, ``tool`` messages answering them, ``stream_options``).

Unknown keys are problems, as the real APIs answer them with a 400.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from fake_llm_provider import Recorded

_MEDIA_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}
_DATA_URL = re.compile(r"^data:(image/[a-z]+);base64,([A-Za-z0-9+/]+={0,2})$")


def validate_request(flavor: str, request: Recorded) -> list[str]:
    problems: list[str] = []
    if request.method != "POST":
        problems.append(f"method {request.method}")
    if request.headers.get("content-type") != "application/json":
        problems.append("content-type is not application/json")
    if not isinstance(request.body, dict):
        return [*problems, "body is not a JSON object"]
    if flavor == "anthropic":
        _anthropic(request, problems)
    else:
        _openai(request, problems)
    return problems


def _extra(obj: dict[str, Any], allowed: set[str], where: str, problems: list[str]) -> None:
    for key in obj.keys() - allowed:
        problems.append(f"{where}.{key}: Extra inputs are not permitted")


def _base64_ok(data: Any) -> bool:
    if not isinstance(data, str) or not data:
        return False
    try:
        base64.b64decode(data, validate=True)
    except binascii.Error:
        return False
    return True


# -- Anthropic -------------------------------------------------------------

_ANTHROPIC_BODY = {
    "model",
    "max_tokens",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "temperature",
    "stream",
    "metadata",
    "stop_sequences",
    "top_k",
    "top_p",
    "thinking",
}


def _anthropic(request: Recorded, problems: list[str]) -> None:
    if request.path != "/v1/messages":
        problems.append(f"path {request.path}")
    for header in ("x-api-key", "anthropic-version"):
        if not request.headers.get(header):
            problems.append(f"missing header {header}")
    body = request.body
    _extra(body, _ANTHROPIC_BODY, "body", problems)
    if not isinstance(body.get("model"), str):
        problems.append("model: field required")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        problems.append("max_tokens: field required")
    if "system" in body and not isinstance(body["system"], str | list):
        problems.append("system: must be a string or text blocks")
    for i, tool in enumerate(body.get("tools", [])):
        _extra(
            tool, {"name", "description", "input_schema", "cache_control"}, f"tools.{i}", problems
        )
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            problems.append(f"tools.{i}.input_schema: must be a JSON Schema object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: at least one message is required")
        return
    previous_tool_ids: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        _extra(message, {"role", "content"}, where, problems)
        role = message.get("role")
        if role not in ("user", "assistant"):
            problems.append(f"{where}.role: must be user or assistant (system goes in `system`)")
        content = message.get("content")
        if isinstance(content, str):
            previous_tool_ids = set()
            continue
        if not isinstance(content, list):
            problems.append(f"{where}.content: must be a string or a list")
            continue
        tool_ids: set[str] = set()
        for j, block in enumerate(content):
            _anthropic_block(block, role, f"{where}.content.{j}", previous_tool_ids, problems)
            if block.get("type") == "tool_use":
                tool_ids.add(block.get("id"))
        previous_tool_ids = tool_ids


def _anthropic_block(
    block: Any, role: Any, where: str, tool_ids: set[str], problems: list[str]
) -> None:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        _extra(block, {"type", "text", "cache_control", "citations"}, where, problems)
        if not isinstance(block.get("text"), str):
            problems.append(f"{where}.text: must be a string")
    elif kind == "image":
        _extra(block, {"type", "source", "cache_control"}, where, problems)
        _anthropic_image_source(block.get("source"), where, problems)
    elif kind == "tool_use":
        _extra(block, {"type", "id", "name", "input", "cache_control"}, where, problems)
        if role != "assistant":
            problems.append(f"{where}: tool_use only in assistant messages")
        if not isinstance(block.get("input"), dict):
            problems.append(f"{where}.input: must be an object")
    elif kind == "tool_result":
        _extra(
            block, {"type", "tool_use_id", "content", "is_error", "cache_control"}, where, problems
        )
        if role != "user":
            problems.append(f"{where}: tool_result only in user messages")
        if block.get("tool_use_id") not in tool_ids:
            problems.append(f"{where}: tool_result without a tool_use in the previous message")
        content = block.get("content")
        if isinstance(content, list):
            for k, part in enumerate(content):
                if part.get("type") not in ("text", "image", "document"):
                    problems.append(f"{where}.content.{k}: bad tool_result part")
        elif not isinstance(content, str):
            problems.append(f"{where}.content: must be a string or a list")
    elif kind == "thinking":
        _extra(block, {"type", "thinking", "signature"}, where, problems)
        if not block.get("signature"):
            problems.append(f"{where}.signature: field required")
    elif kind == "redacted_thinking":
        _extra(block, {"type", "data"}, where, problems)
    else:
        problems.append(f"{where}.type: unknown block type {kind!r}")


def _anthropic_image_source(source: Any, where: str, problems: list[str]) -> None:
    if not isinstance(source, dict):
        problems.append(f"{where}.source: field required")
        return
    if source.get("type") == "url":
        _extra(source, {"type", "url"}, f"{where}.source", problems)
        return
    _extra(source, {"type", "media_type", "data"}, f"{where}.source", problems)
    if source.get("type") != "base64":
        problems.append(f"{where}.source.type: must be base64 or url")
    if source.get("media_type") not in _MEDIA_TYPES:
        problems.append(f"{where}.source.media_type: unsupported")
    if not _base64_ok(source.get("data")):
        problems.append(f"{where}.source.data: must be base64")


# -- OpenAI ----------------------------------------------------------------

_OPENAI_BODY = {
    "model",
    "messages",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "n",
    "seed",
}


def _openai(request: Recorded, problems: list[str]) -> None:
    if request.path != "/v1/chat/completions":
        problems.append(f"path {request.path}")
    auth = request.headers.get("authorization")
    if auth is not None and not auth.startswith("Bearer "):
        problems.append("authorization must be a Bearer token")
    body = request.body
    _extra(body, _OPENAI_BODY, "body", problems)
    if not isinstance(body.get("model"), str):
        problems.append("model: required")
    if body.get("stream") and body.get("stream_options") != {"include_usage": True}:
        problems.append("stream_options.include_usage expected with stream")
    for i, tool in enumerate(body.get("tools", [])):
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, dict):
            problems.append(f"tools[{i}]: must be a function tool")
            continue
        _extra(function, {"name", "description", "parameters", "strict"}, f"tools[{i}]", problems)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: required")
        return
    open_calls: set[str] = set()
    for i, message in enumerate(messages):
        _openai_message(message, f"messages[{i}]", open_calls, problems)


def _openai_message(message: Any, where: str, open_calls: set[str], problems: list[str]) -> None:
    role = message.get("role")
    content = message.get("content")
    if role == "system":
        _extra(message, {"role", "content", "name"}, where, problems)
        if not isinstance(content, str):
            problems.append(f"{where}.content: must be a string")
    elif role == "user":
        _extra(message, {"role", "content", "name"}, where, problems)
        if open_calls:
            problems.append(f"{where}: tool_calls {sorted(open_calls)} not answered")
        if isinstance(content, list):
            for j, part in enumerate(content):
                _openai_part(part, f"{where}.content[{j}]", problems)
        elif not isinstance(content, str):
            problems.append(f"{where}.content: must be a string or parts")
    elif role == "assistant":
        _extra(message, {"role", "content", "tool_calls", "name"}, where, problems)
        if open_calls:
            problems.append(f"{where}: tool_calls {sorted(open_calls)} not answered")
        open_calls.clear()
        if content is None and not message.get("tool_calls"):
            problems.append(f"{where}.content: required without tool_calls")
        for j, call in enumerate(message.get("tool_calls", [])):
            _extra(call, {"id", "type", "function"}, f"{where}.tool_calls[{j}]", problems)
            function = call.get("function", {})
            try:
                arguments = orjson.loads(function.get("arguments", ""))
            except orjson.JSONDecodeError:
                arguments = None
            if call.get("type") != "function" or not isinstance(arguments, dict):
                problems.append(f"{where}.tool_calls[{j}]: arguments must be a JSON object string")
            open_calls.add(call.get("id"))
    elif role == "tool":
        _extra(message, {"role", "content", "tool_call_id"}, where, problems)
        if message.get("tool_call_id") not in open_calls:
            problems.append(f"{where}: tool message answers no open tool call")
        open_calls.discard(message.get("tool_call_id"))
        if not isinstance(content, str | list):
            problems.append(f"{where}.content: must be a string or parts")
    else:
        problems.append(f"{where}.role: unknown role {role!r}")


def _openai_part(part: Any, where: str, problems: list[str]) -> None:
    kind = part.get("type")
    if kind == "text":
        _extra(part, {"type", "text"}, where, problems)
    elif kind == "image_url":
        _extra(part, {"type", "image_url"}, where, problems)
        url = (part.get("image_url") or {}).get("url", "")
        match = _DATA_URL.match(url)
        if not url.startswith("https://") and (match is None or not _base64_ok(match.group(2))):
            problems.append(f"{where}.image_url.url: must be an https or base64 data URL")
    elif kind == "file":
        _extra(part, {"type", "file"}, where, problems)
    else:
        problems.append(f"{where}.type: unknown content part {kind!r}")
