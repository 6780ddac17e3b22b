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
terminal id go to the forwarder (which knows which client), never to the
host, and the host's ids never to a client (docs/decisions.md, D20).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
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
        #: The forwarder of the latest run (kept between runs) and the run now going.
        self.forwarder: ClientForwarder | None = None
        self.run_id: str | None = None
        #: Terminal ids a client created (they are its, not the host's).
        self._client_terminals: set[str] = set()

    def serves(self, method: str) -> bool:
        if method in FS_METHODS:
            return self._config.fs in ("cwd", "client")
        return method.startswith("terminal/") and self._config.terminal is not False

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        if method in FS_METHODS:
            return await self._fs(method, params)
        return await self._terminal(method, params)

    # -- fs ----------------------------------------------------------------------

    async def _fs(self, method: str, params: dict[str, Any]) -> Any:
        who = self._who()
        if self._config.fs == "client" and self.forwarder is not None:
            path = fs.confine(self._cwd, params.get("path"), who)  # refused before forwarding
            content = fs.written_content(params) if method == "fs/write_text_file" else None
            forwarded = await self._forward(method, params)
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

    async def _terminal(self, method: str, params: dict[str, Any]) -> Any:
        if method == "terminal/create":
            if self._config.terminal == "client":
                forwarded = await self._forward(method, params)
                if forwarded is not None:
                    return await self._client_created(params, forwarded)
            return await self._terminals.handle(method, params)
        terminal_id = params.get("terminalId")
        if isinstance(terminal_id, str) and terminal_id in self._client_terminals:
            if method == "terminal/release":
                self._client_terminals.discard(terminal_id)
            forwarded = await self._forward(method, params)
            if forwarded is None:
                raise WireError(
                    RESOURCE_NOT_FOUND,
                    f"terminal {terminal_id} is a client's, and no client can be asked for it",
                )
            return forwarded.answer
        return await self._terminals.handle(method, params)

    async def _client_created(self, params: dict[str, Any], forwarded: ClientAnswer) -> Any:
        answer = forwarded.answer
        terminal_id = answer.get("terminalId") if isinstance(answer, Mapping) else None
        if isinstance(terminal_id, str) and self._terminals.owns(terminal_id):
            # Two owners for one id: the client's terminal is let go, the agent told.
            await self._release(terminal_id)
            raise WireError(
                INTERNAL_ERROR,
                f"the client's terminal id {terminal_id} is already one of the daemon's terminals",
            )
        if isinstance(terminal_id, str):
            self._client_terminals.add(terminal_id)
        command = params.get("command")
        report(
            "terminal",
            command=command if isinstance(command, str) else None,
            servedBy=dict(forwarded.served_by),
            **self._who(),
        )
        return answer

    async def release_client_terminals(self) -> None:
        """Release every client terminal (a turn cancel, the end of the agent), best effort."""
        terminals, self._client_terminals = self._client_terminals, set()
        for terminal_id in terminals:
            await self._release(terminal_id)

    async def _release(self, terminal_id: str) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_S):
            try:
                await self._forward("terminal/release", {"terminalId": terminal_id})
            except WireError as error:
                logger.info(
                    "ACP agent %s: terminal %s not released: %s",
                    self._label,
                    terminal_id,
                    error.message,
                )

    # -- forwarding -----------------------------------------------------------------

    async def _forward(self, method: str, params: dict[str, Any]) -> ClientAnswer | None:
        forwarder = self.forwarder
        if forwarder is None:
            return None
        forwarded = {key: value for key, value in params.items() if key != "sessionId"}
        return await forwarder(ClientCall(self._label, self.run_id, method, forwarded))
