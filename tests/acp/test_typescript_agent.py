"""The ACP backend against an agent on the official TypeScript SDK.

Needs node and ``@agentclientprotocol/sdk`` 2.4.0, which the ``acp_ts_sdk``
fixture installs once into the npm test cache (``tests/support/npm_peers.py``;
``OMA_ACP_TS_SDK_DIR`` may name a folder installed by hand instead). Skipped,
with the reason, when node, npm or the registry is not there.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from support.npm_peers import require_node

from oma_bridge.backends.acp import AcpBackend, AcpConfig

from .helpers import AGENTS, Recorder, context, run_text

pytestmark = pytest.mark.anyio


def ts_config(tmp_path: Path, sdk_dir: Path, **overrides: object) -> AcpConfig:
    return AcpConfig(
        command=require_node(),
        args=(str(AGENTS / "acp_ts_agent.mjs"),),
        cwd=tmp_path,
        env={"OMA_ACP_TS_SDK_DIR": str(sdk_dir)},
        stop_grace_s=1.0,
        cancel_grace_s=3.0,
        **overrides,  # type: ignore[arg-type]
    )


async def test_typescript_agent_streams_shares_session_and_asks(
    tmp_path: Path, acp_ts_sdk: Path
) -> None:
    config = ts_config(tmp_path, acp_ts_sdk, permission="auto-approve")
    backend = AcpBackend(config, agent_name="ts")
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


async def test_typescript_agent_cancel(tmp_path: Path, acp_ts_sdk: Path) -> None:
    backend = AcpBackend(ts_config(tmp_path, acp_ts_sdk), agent_name="ts")
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
