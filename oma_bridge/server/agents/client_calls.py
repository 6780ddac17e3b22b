"""An ACP agent's ``fs/*`` and ``terminal/*`` forwarded to an attached ACP facade client.

For profiles with ``fs = "client"`` / ``terminal = "client"`` (PROTOCOL §12.7;
docs/acp.md, "fs and terminals served by a client").  The backend has
confined the path to the agent's cwd already.  Who serves (docs/decisions.md,
D20): the client that sent the run's ``session/prompt`` when it advertised
the capability, else the first attached client that did; none: ``None``,
and the backend serves the request itself.  A terminal stays with the client
that created it: its later calls go there, and fail with a clear error once
that client is gone.  The request's ``sessionId`` is the facade's; the answer
or error goes back to the agent unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oma_bridge.backends import ClientAnswer, ClientCall, ClientForwarder
from oma_bridge.errors import WireError
from oma_bridge.rpc import ConnectionClosedError
from oma_bridge.rpc.codes import INTERNAL_ERROR, RESOURCE_NOT_FOUND
from oma_bridge.server.agents.registry import AcpClient, HostedAgent
from oma_bridge.server.audit import decided_by_client
from oma_bridge.server.session import Session

__all__ = ["client_forwarder"]


def client_forwarder(
    target: Callable[[], HostedAgent], run_session: Callable[[str | None], Session | None]
) -> ClientForwarder:
    """The forwarder of one hosted agent (``target()``); see the module docstring."""
    #: terminal id -> the connection that created it.
    owners: dict[str, Session] = {}

    async def forward(call: ClientCall) -> ClientAnswer | None:
        hosted = target()
        terminal_id = call.params.get("terminalId")
        if call.method.startswith("fs/") or call.method == "terminal/create":
            client = _chosen(hosted, run_session(call.run_id), call.method)
            if client is None:
                return None
        else:
            owner = owners.get(terminal_id) if isinstance(terminal_id, str) else None
            if owner is None:
                return None
            if call.method == "terminal/release":
                del owners[terminal_id]  # type: ignore[arg-type]
            client = hosted.acp_clients.get(owner)
            if client is None or owner.closed:
                raise WireError(
                    RESOURCE_NOT_FOUND,
                    f"terminal {terminal_id} belongs to the client {_name(owner)}, which has "
                    "detached from the session: the terminal is gone with it",
                )
        answer = await _ask(client.session, call, {"sessionId": hosted.agent_id, **call.params})
        created = answer.get("terminalId") if isinstance(answer, dict) else None
        if call.method == "terminal/create" and isinstance(created, str):
            owners[created] = client.session
        return ClientAnswer(answer, decided_by_client(client.session))

    return forward


def _chosen(hosted: HostedAgent, own: Session | None, method: str) -> AcpClient | None:
    """The run's own client when it can serve ``method``, else the first attached one that can."""
    clients = [c for c in hosted.acp_clients.values() if not c.session.closed and c.serves(method)]
    for client in clients:
        if client.session is own:
            return client
    return clients[0] if clients else None


async def _ask(session: Session, call: ClientCall, params: dict[str, Any]) -> Any:
    """The client's answer; its error answer raised as it is (a cancel withdraws the request)."""
    try:
        return await session.request(call.method, params)
    except ConnectionClosedError:
        raise WireError(
            INTERNAL_ERROR,
            f"the client {_name(session)} serving {call.method} disconnected before answering",
        ) from None


def _name(session: Session) -> str:
    info = session.init.clientInfo if session.init is not None else None
    return f"{info.name if info else 'acp-client'} (connection {session.id})"
