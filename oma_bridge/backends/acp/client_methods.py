"""An ACP agent's ``fs/*`` and ``terminal/*``: served here, or by a client that can.

``fs = "cwd"`` and ``terminal = true`` are served by the host (``fs.py``,
``terminal.py``).  With ``"client"`` a request goes to the run's
``client_forwarder`` first (the daemon gives it to an attached ACP facade
client that advertised the capability), and only when that finds no such
client is it served here, as ``"cwd"`` / ``true`` would (so in library use,
with no forwarder, ``"client"`` is the host's service).  Paths are confined
to the agent's cwd *before* anything is forwarded (docs/contract.md §11.13):
a path outside it is refused here and never reaches a client.

A terminal belongs to whoever created it: later calls for a client's
terminal id go to the forwarder that created it (which knows which client),
never to the host, and the host's ids never to a client (docs/decisions.md,
D20).  Each request names the forwarder and the run it came in (its turn's,
or the latest run's between runs): nothing here is kept per run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from oma_bridge.backends import ClientAnswer, ClientCall, ClientForwarder
from oma_bridge.backends.acp import fs
from oma_bridge.backends.acp.config import AcpConfig
from oma_bridge.backends.acp.terminal import Terminals
from oma_bridge.errors import WireError
from oma_bridge.observe import report
from oma_bridge.rpc.codes import INTERNAL_ERROR, RESOURCE_NOT_FOUND

__all__ = ["ClientMethods"]

logger = logging.getLogger(__name__)

FS_METHODS = ("fs/read_text_file", "fs/write_text_file")
#: How long a client's terminal may take to be released when its agent ends.
_RELEASE_S = 1.0


@dataclass(frozen=True)
class _Request:
    """One request of the agent, and whom it may be forwarded to."""

    method: str
    params: dict[str, Any]
    #: Reaches the client of the run it came in (``None``: there is none).
    forwarder: ClientForwarder | None
    run_id: str | None


class ClientMethods:
    """The ``fs/*`` and ``terminal/*`` requests of one ACP agent (see the module docstring)."""

    def __init__(
        self,
        config: AcpConfig,
        cwd: Path,
        terminals: Terminals,
        *,
        label: str,
        who: Callable[[], dict[str, str]],
    ) -> None:
        self._config = config
        self._cwd = cwd
        self._terminals = terminals
        self._label = label
        self._who = who
        #: The terminal ids a client created (they are its, not the host's), each
        #: with the forwarder that reaches that client.
        self._client_terminals: dict[str, ClientForwarder] = {}

    def serves(self, method: str) -> bool:
        if method in FS_METHODS:
            return self._config.fs in ("cwd", "client")
        return method.startswith("terminal/") and self._config.terminal is not False

    async def handle(
        self,
        method: str,
        params: dict[str, Any],
        *,
        forwarder: ClientForwarder | None,
        run_id: str | None,
    ) -> Any:
        """Serve one request; ``forwarder`` reaches the client of the run ``run_id``."""
        request = _Request(method, params, forwarder, run_id)
        if method in FS_METHODS:
            return await self._fs(request)
        return await self._terminal(request)

    # -- fs ----------------------------------------------------------------------

    async def _fs(self, request: _Request) -> Any:
        who, method, params = self._who(), request.method, request.params
        if self._config.fs == "client" and request.forwarder is not None:
            path = fs.confine(self._cwd, params.get("path"), who)  # refused before forwarding
            content = fs.written_content(params) if method == "fs/write_text_file" else None
            forwarded = await self._forward(request, request.forwarder)
            if forwarded is not None:
                if content is not None:
                    report(
                        "fs_write",
                        path=str(path),
                        bytes=len(content.encode()),
                        servedBy=dict(forwarded.served_by),
                        **who,
                    )
                return forwarded.answer
        if method == "fs/read_text_file":
            return await fs.read_text_file(self._cwd, params, who)
        return await fs.write_text_file(self._cwd, params, who)

    # -- terminals ----------------------------------------------------------------

    async def _terminal(self, request: _Request) -> Any:
        method, params = request.method, request.params
        if method == "terminal/create":
            if self._config.terminal == "client" and request.forwarder is not None:
                forwarded = await self._forward(request, request.forwarder)
                if forwarded is not None:
                    return await self._client_created(request, forwarded)
            return await self._terminals.handle(method, params)
        terminal_id = params.get("terminalId")
        owner = self._client_terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if owner is None:
            return await self._terminals.handle(method, params)
        if method == "terminal/release":
            del self._client_terminals[str(terminal_id)]
        forwarded = await self._forward(request, owner)
        if forwarded is None:
            raise WireError(
                RESOURCE_NOT_FOUND,
                f"terminal {terminal_id} is a client's, and no client can be asked for it",
            )
        return forwarded.answer

    async def _client_created(self, request: _Request, forwarded: ClientAnswer) -> Any:
        answer, forwarder = forwarded.answer, request.forwarder
        assert forwarder is not None
        terminal_id = answer.get("terminalId") if isinstance(answer, Mapping) else None
        if isinstance(terminal_id, str) and self._terminals.owns(terminal_id):
            # Two owners for one id: the client's terminal is let go, the agent told.
            await self._release(terminal_id, forwarder, request.run_id)
            raise WireError(
                INTERNAL_ERROR,
                f"the client's terminal id {terminal_id} is already one of the daemon's terminals",
            )
        if isinstance(terminal_id, str):
            self._client_terminals[terminal_id] = forwarder
        command = request.params.get("command")
        report(
            "terminal",
            command=command if isinstance(command, str) else None,
            servedBy=dict(forwarded.served_by),
            **self._who(),
        )
        return answer

    async def release_client_terminals(self, run_id: str | None) -> None:
        """Release every client terminal (a turn cancel, the end of the agent), best effort."""
        terminals, self._client_terminals = self._client_terminals, {}
        for terminal_id, forwarder in terminals.items():
            await self._release(terminal_id, forwarder, run_id)

    async def _release(
        self, terminal_id: str, forwarder: ClientForwarder, run_id: str | None
    ) -> None:
        request = _Request("terminal/release", {"terminalId": terminal_id}, forwarder, run_id)
        with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_S):
            try:
                await self._forward(request, forwarder)
            except WireError as error:
                logger.info(
                    "ACP agent %s: terminal %s not released: %s",
                    self._label,
                    terminal_id,
                    error.message,
                )

    # -- forwarding -----------------------------------------------------------------

    async def _forward(self, request: _Request, forwarder: ClientForwarder) -> ClientAnswer | None:
        params = {key: value for key, value in request.params.items() if key != "sessionId"}
        return await forwarder(ClientCall(self._label, request.run_id, request.method, params))
