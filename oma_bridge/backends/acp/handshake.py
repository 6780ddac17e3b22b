"""The start of an ACP session: ``initialize``, ``authenticate``, the session, its model.

``initialize`` sends protocol version 1, the client's info and the
capabilities the profile really serves, and refuses an agent that answers
another version; ``authenticate`` goes only with the profile's
``auth_method``, when the agent advertises it.  Then the session: an
earlier one to continue is tried with ``session/resume`` (no replay), then
``session/load``, each only when advertised (:func:`openers`), and only
when neither opens it does ``session/new`` start a fresh one, noted to the
observers (the agent no longer remembers the earlier turns).  Last, the
profile's ``model``: a config option when the agent offers one, else the
legacy ``session/set_model``.  Between ``initialize`` and the session's
opening, the ``mcpServers`` to give are checked against the agent's
``mcpCapabilities`` (``mcp_check.py``): none is dropped in silence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from oma_bridge._version import __version__
from oma_bridge.backends.acp.config import AcpConfig
from oma_bridge.backends.acp.mcp_check import refusal
from oma_bridge.backends.acp.schema import (
    AgentCapabilities,
    InitializeResponse,
    SessionResponse,
)
from oma_bridge.errors import AuthRequiredError, BackendError, WireError
from oma_bridge.observe import report
from oma_bridge.redaction import redact
from oma_bridge.rpc import ConnectionClosedError, Peer
from oma_bridge.rpc.codes import ACP_PROTOCOL_VERSION

__all__ = ["CLIENT_NAME", "Handshake", "Opened", "auth_error", "openers"]

logger = logging.getLogger(__name__)

CLIENT_NAME = "oma-bridge"


@dataclass(frozen=True)
class Opened:
    """What the handshake ended with."""

    init: InitializeResponse
    session_id: str
    #: ``False``: ``session/new`` started a fresh session (none to continue, or it
    #: could not be continued).
    continued: bool


def openers(caps: AgentCapabilities, previous: str | None) -> tuple[str, ...]:
    """The methods to try, in order, to open the session: resume, then load, then new.

    ``session/resume`` and ``session/load`` continue ``previous`` and are
    tried only when the agent advertises them; ``session/new`` comes last
    (and alone when there is nothing to continue).
    """
    if previous is None:
        return ("session/new",)
    continuing = (
        method
        for method, offered in (
            ("session/resume", caps.session_capability("resume")),
            ("session/load", caps.load_session),
        )
        if offered
    )
    return (*continuing, "session/new")


def auth_error(label: str, exc: WireError) -> AuthRequiredError:
    return AuthRequiredError(f'ACP agent "{label}" requires authentication: {redact(exc.message)}')


@dataclass(frozen=True)
class Handshake:
    """One start of an agent's session: what to say and which session to continue."""

    config: AcpConfig
    cwd: Path
    label: str
    #: The agent's earlier session, to continue (``None``: a new one).
    previous: str | None
    #: Whose the agent is, for the observers' note of a session not continued.
    who: Mapping[str, str]
    #: Told of the agent's ``initialize`` answer as soon as it is in (what it can
    #: do is known even when the session cannot then be opened).
    on_initialized: Callable[[InitializeResponse], None] | None = None

    async def run(self, peer: Peer) -> Opened:
        init = await self.initialize(peer)
        config = self.config
        # Before any session opens (PROTOCOL §22.3): an agent that no longer takes a
        # server the client gave (its capabilities changed since they were checked).
        refused = refusal(config.mcp_servers, init.agent_capabilities.mcp_capabilities, self.label)
        if refused is not None:
            raise BackendError(f'ACP agent "{self.label}" cannot open the session: {refused}')
        if config.auth_method is not None and config.auth_method in init.auth_method_ids():
            try:
                await peer.request("authenticate", {"methodId": config.auth_method})
            except WireError as exc:
                if isinstance(exc, ConnectionClosedError):
                    raise
                raise auth_error(self.label, exc) from exc
        session, continued = await self._open(peer, init.agent_capabilities)
        if config.model is not None:
            await self._apply_model(peer, session, config.model)
        assert session.session_id is not None
        return Opened(init, session.session_id, continued)

    async def initialize(self, peer: Peer) -> InitializeResponse:
        """``initialize`` alone: the agent's answer, its protocol version checked."""
        config = self.config
        serve_fs = config.fs in ("cwd", "client")
        raw = await peer.request(
            "initialize",
            {
                "protocolVersion": ACP_PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": serve_fs, "writeTextFile": serve_fs},
                    "terminal": config.terminal is not False,
                    # Always: an elicitation nobody can answer is answered
                    # "cancel", which the agent handles as a user would.
                    "elicitation": {"form": {}, "url": {}},
                },
                "clientInfo": {"name": CLIENT_NAME, "title": self.label, "version": __version__},
            },
        )
        init = InitializeResponse.model_validate(raw)
        if init.protocol_version != ACP_PROTOCOL_VERSION:
            raise BackendError(
                f'ACP agent "{self.label}" speaks protocol version {init.protocol_version}; '
                f"oma-bridge speaks {ACP_PROTOCOL_VERSION}"
            )
        if self.on_initialized is not None:
            self.on_initialized(init)
        return init

    async def _open(self, peer: Peer, caps: AgentCapabilities) -> tuple[SessionResponse, bool]:
        # A remote agent's folder is on its own host (remote_cwd); unset, ours.
        cwd = self.config.remote_cwd or str(self.cwd)
        base = {"cwd": cwd, "mcpServers": list(self.config.mcp_servers)}
        previous = self.previous
        failures = []
        for method in openers(caps, previous):
            if method == "session/new":
                break
            try:
                raw = await peer.request(method, {"sessionId": previous, **base})
            except WireError as exc:
                if isinstance(exc, ConnectionClosedError):
                    raise
                logger.info("ACP agent %s: %s failed (%s)", self.label, method, exc.message)
                failures.append(f"{method} failed with error {exc.rpc_code}: {exc.message}")
                continue
            session = SessionResponse.model_validate(raw or {})
            session.session_id = str(previous)
            return session, True
        raw = await peer.request("session/new", base)
        session = SessionResponse.model_validate(raw)
        if not session.session_id:
            raise BackendError(f'ACP agent "{self.label}" answered session/new without sessionId')
        if previous is not None:
            why = "; ".join(failures) or (
                "the agent advertises neither session/resume nor session/load"
            )
            self._not_continued(previous, session.session_id, why)
        return session, False

    def _not_continued(self, previous: str, new: str, why: str) -> None:
        """Say that the agent's earlier session is lost: logged, and a ``note`` to the observers
        (the daemon journals it, PROTOCOL §13.4; docs/decisions.md, D21)."""
        text = (
            f'ACP agent "{self.label}": its earlier session {previous} could not be continued '
            f"({' '.join(redact(why).split())}); a new session {new} started, and the agent "
            "does not remember the earlier turns"
        )
        logger.warning("%s", text)
        report("note", text=text, **self.who)

    async def _apply_model(self, peer: Peer, session: SessionResponse, model: str) -> None:
        option_id = session.model_option_id()
        if option_id is not None:
            params = {"sessionId": session.session_id, "configId": option_id, "value": model}
            await peer.request("session/set_config_option", params)
        else:
            await peer.request(
                "session/set_model", {"sessionId": session.session_id, "modelId": model}
            )
