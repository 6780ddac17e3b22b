"""Run ``tests/agents/acp_ts_client.mjs``, the ACP client on the official TypeScript SDK.

``await run_ts_client(script)`` runs one JSON script (the format is in the
header of the ``.mjs``) and returns every line the client printed, parsed.
It needs node and the SDK (``npm_peers``), and ``ws`` for a ``url`` script;
the calling test is skipped when they cannot be had. The client runs in its
own process group, with the agent it spawns; the whole group is killed at
the end whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream

from .npm_peers import WS, require_node, require_package, ts_sdk_dir

__all__ = ["TS_CHUNK_AGENT", "TS_CLIENT", "TsClientRun", "run_ts_client"]

AGENTS = Path(__file__).resolve().parent.parent / "agents"
TS_CLIENT = AGENTS / "acp_ts_client.mjs"
TS_CHUNK_AGENT = AGENTS / "acp_ts_chunk_agent.mjs"
#: Time the client gets beyond its own ``timeout_s`` to report and exit.
GRACE_S = 10.0


@dataclass
class TsClientRun:
    """What one client run printed."""

    returncode: int
    lines: list[dict[str, Any]]
    stderr: str
    #: stdout lines that were not JSON (none are expected).
    junk: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The lines of one ``type`` (``update``, ``response``, ``step``, ...)."""
        return [line for line in self.lines if line.get("type") == kind]

    def updates(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The ``update`` objects of every ``session/update``, of one ``sessionUpdate`` kind."""
        return [
            line["update"]
            for line in self.of("update")
            if kind is None or line["update"].get("sessionUpdate") == kind
        ]

    def chunks(self) -> list[str]:
        """The texts of the ``agent_message_chunk`` updates, in order."""
        return [update["content"].get("text", "") for update in self.updates("agent_message_chunk")]

    def responses(self, method: str) -> list[dict[str, Any]]:
        """The raw ``response`` lines to our requests of ``method``, in order."""
        return [line for line in self.of("response") if line["method"] == method]

    def result(self, method: str, index: int = -1) -> Any:
        """The result of the ``index``-th response to ``method`` (an error fails the test)."""
        line = self.responses(method)[index]
        assert "result" in line, f"{method} failed: {line.get('error')}\n{self.stderr}"
        return line["result"]

    @property
    def ok(self) -> bool:
        """Every step succeeded and the client said so."""
        return self.returncode == 0 and self.of("done") == [{"type": "done", "ok": True}]

    def describe(self) -> str:
        """For assertion messages: the exit, the failed steps and stderr's tail."""
        failed = [line for line in self.of("step") if not line["ok"]]
        fatal = self.of("fatal")
        return (
            f"exit {self.returncode}; failed steps {failed}; fatal {fatal}; "
            f"stderr tail:\n{self.stderr[-2000:]}"
        )


async def _drain(stream: ByteReceiveStream | None, into: bytearray) -> None:
    if stream is None:
        return
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
        async for data in stream:
            into.extend(data)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def run_ts_client(
    script: Mapping[str, Any],
    *,
    timeout_s: float = 60.0,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> TsClientRun:
    """Run the TS client on ``script`` (sent on its stdin) and return what it printed.

    ``timeout_s`` becomes the script's own limit unless it sets ``timeout_s``;
    past it (plus a grace) the client's process group is killed and the test
    fails with stderr's tail. ``env`` is added to the client's environment
    (the spawned agent inherits it).
    """
    node = require_node()
    full_env = {**os.environ, "OMA_ACP_TS_SDK_DIR": str(ts_sdk_dir())}
    if "url" in script:
        full_env["OMA_WS_DIR"] = str(require_package(WS))
    full_env.update(env or {})
    script = {"timeout_s": timeout_s, **script}
    limit = float(script["timeout_s"]) + GRACE_S
    data = json.dumps(script).encode()
    stdout, stderr = bytearray(), bytearray()
    process = await anyio.open_process(
        [node, str(TS_CLIENT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
        cwd=cwd,
        start_new_session=True,  # the client, its agent and their children: one group to kill
    )
    try:
        with anyio.fail_after(limit):
            async with anyio.create_task_group() as group:
                group.start_soon(_drain, process.stdout, stdout)
                group.start_soon(_drain, process.stderr, stderr)
                assert process.stdin is not None
                await process.stdin.send(data)
                await process.stdin.aclose()
            returncode = await process.wait()
    except TimeoutError:
        raise AssertionError(
            f"the TS client did not finish within {limit:.0f} s; stdout tail:\n"
            f"{stdout[-2000:].decode(errors='replace')}\nstderr tail:\n"
            f"{stderr[-2000:].decode(errors='replace')}"
        ) from None
    finally:
        _kill_group(process.pid)
        with anyio.CancelScope(shield=True):
            await process.aclose()
    lines: list[dict[str, Any]] = []
    junk: list[str] = []
    for raw in stdout.decode(errors="replace").splitlines():
        try:
            parsed = json.loads(raw)
        except ValueError:
            junk.append(raw)
            continue
        if isinstance(parsed, dict):
            lines.append(parsed)
        else:
            junk.append(raw)
    return TsClientRun(returncode, lines, stderr.decode(errors="replace"), junk)
