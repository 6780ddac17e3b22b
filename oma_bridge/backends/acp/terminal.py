"""``terminal/*``: commands an agent runs through the client (opt-in, ``terminal = true``).

Each command is a child of the supervisor (``docs/processes.md``), as the
agent itself is: no shell, its own process group, the environment every
agent gets (the daemon's, minus its secrets and service variables) with the
request's ``env`` laid over it, tagged and known to the crash watchdog, so
that it outlives neither the agent nor a daemon killed with SIGKILL, and
labelled as the agent is, so that ``daemon/status`` says whose it is.
stdout and stderr are merged as a terminal shows them.  Output is kept up
to the request's ``outputByteLimit``: past it, bytes are dropped from the
start, at a UTF-8 character boundary, and ``truncated`` is set.
``terminal/kill`` ends the command's group and keeps its output;
``terminal/release`` (and a turn cancel, and the end of the agent) stop its
whole tree.

No task of ours reads a command's output (a backend owns no task between
calls): the supervisor buffers up to 1 MiB of it ahead
(``supervision/pipes.py``), then the command blocks until
``terminal/output`` collects what is ready or ``terminal/wait_for_exit``
reads until the end.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from oma_bridge.errors import SandboxUnavailableError, WireError
from oma_bridge.observe import report
from oma_bridge.rpc.codes import INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND
from oma_bridge.supervision.exits import exit_parts
from oma_bridge.supervision.sandbox import Sandbox
from oma_bridge.supervision.supervisor import SupervisedProcess, default_supervisor

__all__ = ["Terminals", "acp_exit_status"]

_DEFAULT_LIMIT = 1024 * 1024
#: ``terminal/release`` kills a command still running: no grace between SIGTERM and SIGKILL.
_STOP_GRACE_S = 0.0


def acp_exit_status(returncode: int) -> dict[str, Any]:
    """ACP's ``TerminalExitStatus``: ``{"exitCode": N, "signal": None}`` or the signal's name."""
    code, name = exit_parts(returncode)
    return {"exitCode": code, "signal": name}


def _trim_to_limit(data: bytearray, limit: int) -> bool:
    """Drop bytes from the start of ``data`` to fit ``limit``, at a character boundary."""
    if len(data) <= limit:
        return False
    cut = len(data) - limit
    # A UTF-8 continuation byte is 0b10xxxxxx: never start inside a character.
    while cut < len(data) and data[cut] & 0xC0 == 0x80:
        cut += 1
    del data[:cut]
    return True


class _Terminal:
    def __init__(self, process: SupervisedProcess, limit: int) -> None:
        self.process = process
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        self._eof = False

    async def _read(self, *, to_the_end: bool) -> None:
        stream = self.process.stdout
        while not self._eof:
            with anyio.move_on_after(None if to_the_end else 0.01) as waited:
                try:
                    chunk = await stream.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self._eof = True
                    return
            if waited.cancelled_caught:
                return  # nothing more is ready now
            self.output += chunk
            self.truncated = _trim_to_limit(self.output, self.limit) or self.truncated

    async def collect_ready(self) -> None:
        await self._read(to_the_end=False)

    async def wait(self) -> int:
        await self._read(to_the_end=True)
        return await self.process.wait()

    def exit_status(self) -> dict[str, Any] | None:
        code = self.process.returncode
        return None if code is None else acp_exit_status(code)

    def kill(self) -> None:
        """End the command's group; its output stays readable (``terminal/kill``)."""
        if self.process.returncode is None:
            # Once the command is gone, the supervisor ends what holds its pipes.
            self.process.signal_group(signal.SIGKILL)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.process.stop(_STOP_GRACE_S)


class Terminals:
    """The terminals of one agent, by id; ``labels`` are the agent's (whose the commands are).

    A sandboxed agent's ``sandbox`` (its folder bound, whatever ``cwd`` a
    command asks for) is each command's too: a command sees what the agent
    sees, never more.
    """

    def __init__(
        self, cwd: Path, *, labels: Mapping[str, str] | None = None, sandbox: Sandbox | None = None
    ) -> None:
        self._cwd = cwd
        self._labels = dict(labels or {})
        self._sandbox = sandbox
        self._ids = itertools.count(1)
        self._terminals: dict[str, _Terminal] = {}

    def owns(self, terminal_id: str) -> bool:
        """Whether ``terminal_id`` names one of these (live) terminals."""
        return terminal_id in self._terminals

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        if method == "terminal/create":
            return await self._create(params)
        terminal_id = params.get("terminalId")
        terminal = self._terminals.get(terminal_id) if isinstance(terminal_id, str) else None
        if terminal is None:
            raise WireError(RESOURCE_NOT_FOUND, f"unknown terminal: {terminal_id}")
        if method == "terminal/output":
            await terminal.collect_ready()
            return {
                "output": terminal.output.decode("utf-8", errors="replace"),
                "truncated": terminal.truncated,
                "exitStatus": terminal.exit_status(),
            }
        if method == "terminal/wait_for_exit":
            await terminal.wait()
            return terminal.exit_status()
        if method == "terminal/kill":
            terminal.kill()
            return {}
        if method == "terminal/release":
            del self._terminals[terminal_id]  # type: ignore[arg-type]
            await terminal.close()
            return {}
        raise WireError(METHOD_NOT_FOUND, f"Method not found: {method}")

    async def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        command, args = params.get("command"), params.get("args") or []
        if not isinstance(command, str) or not command:
            raise WireError(INVALID_PARAMS, "command must be a non-empty string")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise WireError(INVALID_PARAMS, "args must be a list of strings")
        # An overlay on the supervisor's scrubbed environment, as an agent's env is.
        env: dict[str, str] = {}
        for item in params.get("env") or []:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                env[item["name"]] = str(item.get("value", ""))
        cwd = params.get("cwd") or str(self._cwd)
        limit = params.get("outputByteLimit")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            limit = _DEFAULT_LIMIT
        try:
            process = await default_supervisor().spawn(
                [command, *args],
                env=env,
                cwd=cwd,
                stdin=False,
                merge_stderr=True,
                labels=self._labels,
                sandbox=self._sandbox,
            )
        except SandboxUnavailableError as exc:  # the agent's sandbox cannot be applied now
            raise WireError(RESOURCE_NOT_FOUND, f"cannot start {command}: {exc.message}") from None
        except OSError as exc:
            raise WireError(RESOURCE_NOT_FOUND, f"cannot start {command}: {exc}") from None
        except ValueError as exc:  # a NUL byte in a command, an argument or the env
            raise WireError(INVALID_PARAMS, f"cannot start {command}: {exc}") from None
        terminal_id = f"term-{next(self._ids)}"
        self._terminals[terminal_id] = _Terminal(process, limit)
        report(
            "terminal",
            command=command,
            pid=process.pid,
            servedBy="daemon",
            agentId=self._labels.get("agentId"),
        )
        return {"terminalId": terminal_id}

    async def close_all(self) -> None:
        """End every command (a turn cancel, the end of the agent)."""
        terminals, self._terminals = self._terminals, {}
        if terminals:
            async with anyio.create_task_group() as group:
                for terminal in terminals.values():
                    group.start_soon(terminal.close)
