"""The ACP backend against an agent on the official TypeScript SDK.

Needs node and ``@agentclientprotocol/sdk`` installed locally (tests never
reach the network): ``npm install --prefix ~/.cache/oma-bridge/acp-ts-sdk
@agentclientprotocol/sdk@2.4.0``, or point ``OMA_ACP_TS_SDK_DIR`` at another
folder holding it.  Skipped, with that reason, when either is missing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest

from oma_bridge.backends.acp import AcpBackend, AcpConfig

from .helpers import AGENTS, Recorder, context, run_text

pytestmark = pytest.mark.anyio

SDK_DIR = Path(
    os.environ.get("OMA_ACP_TS_SDK_DIR", Path.home() / ".cache" / "oma-bridge" / "acp-ts-sdk")
)
NODE = shutil.which("node")
HAVE_SDK = (SDK_DIR / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json").exists()

if NODE is None or not HAVE_SDK:
    pytest.skip(
        f"node or @agentclientprotocol/sdk not installed in {SDK_DIR} "
        "(npm install --prefix <dir> @agentclientprotocol/sdk@2.4.0)",
        allow_module_level=True,
    )


def ts_config(tmp_path: Path, **overrides: object) -> AcpConfig:
    assert NODE is not None
    return AcpConfig(
        command=NODE,
        args=(str(AGENTS / "acp_ts_agent.mjs"),),
        cwd=tmp_path,
        env={"OMA_ACP_TS_SDK_DIR": str(SDK_DIR)},
        stop_grace_s=1.0,
        cancel_grace_s=3.0,
        **overrides,  # type: ignore[arg-type]
    )


async def test_typescript_agent_streams_shares_session_and_asks(tmp_path: Path) -> None:
    backend = AcpBackend(ts_config(tmp_path, permission="auto-approve"), agent_name="ts")
    try:
        with anyio.fail_after(30):
            first, rec = await run_text(backend, "echo from node", system_prompt="Sys.")
            assert first.output == "Sys.\n\necho from node"
            assert "".join(rec.of("text")) == first.output
            session = backend.session_id
            second, _ = await run_text(backend, "tools")
            assert second.output == "permission:ao"
            assert backend.session_id == session
    finally:
        await backend.aclose()


async def test_typescript_agent_cancel(tmp_path: Path) -> None:
    backend = AcpBackend(ts_config(tmp_path), agent_name="ts")
    recorder = Recorder()
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:

                async def watch(event: object) -> None:
                    await recorder(event)  # type: ignore[arg-type]
                    group.cancel_scope.cancel()

                ctx = context("slow", recorder)
                ctx.emit = watch
                group.start_soon(backend.run, ctx)
            pid = backend.pid
            assert pid is not None  # ended in time: the agent lives on
            outcome, _ = await run_text(backend, "echo again")
            assert outcome.output == "echo again" and backend.pid == pid
    finally:
        await backend.aclose()
