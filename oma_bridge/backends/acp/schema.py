"""Lenient models of the ACP v1 messages this client reads (schema v1.25.0).

Open models (``extra="allow"``): unknown fields are kept, never dropped.  A
malformed optional value falls back to its default instead of rejecting the
whole message (the schema's ``x-deserialize-default-on-error``), lists skip
their bad items (``x-deserialize-skip-invalid-items``), and ``null`` means the
default (``x-deserialize-default-on-null``).  Unions whose variants this
client does not know (update kinds, auth methods, config options, stop
reasons) stay raw dicts or plain strings.

``session/update`` payloads are not modelled here: the turn reads the few
fields it maps with checked accessors and forwards every update raw, so a
bad nested field never costs a whole notification.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WrapValidator
from pydantic_core.core_schema import ValidatorFunctionWrapHandler

__all__ = [
    "AgentCapabilities",
    "InitializeResponse",
    "PromptResponse",
    "SessionResponse",
]

T = TypeVar("T")


def _default_on_error(default: Any) -> WrapValidator:
    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if value is None:
            return default() if callable(default) else default
        try:
            return handler(value)
        except ValidationError:
            return default() if callable(default) else default

    return WrapValidator(validate)


def _objects(value: Any, handler: ValidatorFunctionWrapHandler) -> list[dict[str, Any]]:
    """A list of JSON objects, skipping items that are not objects."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


ObjectList = Annotated[list[dict[str, Any]], WrapValidator(_objects)]
LenientBool = Annotated[bool, _default_on_error(False)]
LenientDict = Annotated[dict[str, Any] | None, _default_on_error(None)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class AgentCapabilities(_Open):
    load_session: LenientBool = Field(default=False, alias="loadSession")
    prompt_capabilities: LenientDict = Field(default=None, alias="promptCapabilities")
    session_capabilities: LenientDict = Field(default=None, alias="sessionCapabilities")
    mcp_capabilities: LenientDict = Field(default=None, alias="mcpCapabilities")

    def session_capability(self, name: str) -> bool:
        """Whether ``sessionCapabilities.<name>`` is advertised (an object marker)."""
        caps = self.session_capabilities or {}
        return isinstance(caps.get(name), dict)


class InitializeResponse(_Open):
    protocol_version: int = Field(alias="protocolVersion")
    agent_capabilities: Annotated[AgentCapabilities, _default_on_error(AgentCapabilities)] = Field(
        default_factory=AgentCapabilities, alias="agentCapabilities"
    )
    auth_methods: ObjectList = Field(default_factory=list, alias="authMethods")
    agent_info: LenientDict = Field(default=None, alias="agentInfo")

    def auth_method_ids(self) -> set[str]:
        return {m["id"] for m in self.auth_methods if isinstance(m.get("id"), str)}


class SessionResponse(_Open):
    """The answer to ``session/new`` (with ``sessionId``), ``session/load`` or ``resume``."""

    session_id: str | None = Field(default=None, alias="sessionId")
    config_options: Annotated[list[dict[str, Any]] | None, _default_on_error(None)] = Field(
        default=None, alias="configOptions"
    )
    modes: LenientDict = None
    models: LenientDict = None

    def model_option_id(self) -> str | None:
        """The id of the config option of category ``model``, if the agent offers one."""
        for option in self.config_options or ():
            if isinstance(option, dict) and option.get("category") == "model":
                option_id = option.get("id")
                if isinstance(option_id, str):
                    return option_id
        return None


class PromptResponse(_Open):
    #: Kept as a string: an unknown stop reason must not fail the turn's answer.
    stop_reason: str = Field(alias="stopReason")
