"""Params models of the wire methods the transport layer serves itself."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr

__all__ = ["Capabilities", "ClientInfo", "InitializeParams", "NoParams", "WireParams"]


class WireParams(BaseModel):
    """Base of params models: frozen, and an unknown key is -32602 (PROTOCOL §11.6)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ClientInfo(WireParams):
    name: StrictStr
    version: StrictStr


class Capabilities(WireParams):
    """What the client can serve; each capability defaults to absent/false."""

    hooks: tuple[Literal["beforeRun", "afterRun"], ...] = ()
    permissions: StrictBool = False


class InitializeParams(WireParams):
    protocolVersion: StrictInt
    clientInfo: ClientInfo
    capabilities: Capabilities = Capabilities()


class NoParams(WireParams):
    """For methods without params: absent or ``{}``."""
