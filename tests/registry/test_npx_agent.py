"""A registry profile of a real npm ACP agent, started through ``npx`` offline (PROTOCOL §22.1).

The agent is Zed's codex-acp, pinned in ``support/npm_peers.py`` and
installed in the suite's npm cache; the test's registry names it as an npx
distribution, so the daemon's command is ``npx -y @zed-industries/codex-acp@0.16.0``.
How ``npx`` runs it without the network: ``npx`` (``npm exec``) takes a
package that the project it runs in already has in ``node_modules``, and the
profile's ``cwd`` is the cache folder that holds it; ``npm_config_offline``
in the profile's ``env`` makes any fetch fail at once instead (npm's
``--offline``), and ``HOME`` is the test's, so neither npm's cache nor
codex's settings of the machine are touched.  It answers ``initialize``.
Skipped, with the reason, where node, npm or the package is missing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import orjson
import pytest
from support import npm_peers

from oma_bridge.backends.acp.stdio import AgentProcess
from oma_bridge.server.config import parse_config
from oma_bridge.server.profiles import profile_agent_config

from .snapshot import npx_entry, write_registry

pytestmark = pytest.mark.anyio

PACKAGE = npm_peers.CODEX_ACP


def offline_codex_config(tmp_path: Path, registry: Path, folder: Path) -> str:
    """The config of a ``codex`` profile that ``npx`` starts from ``folder``, offline."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return f"""
[server]
acp_registry = "{registry}"

[agents.codex]
kind = "acp"
registry = "codex-npm"
cwd = "{folder}"
env = {{ HOME = "{home}", npm_config_offline = "true", npm_config_update_notifier = "false" }}
"""


def codex_registry(tmp_path: Path) -> Path:
    return write_registry(
        tmp_path / "registry.json",
        npx_entry("codex-npm", PACKAGE.spec, name="Codex (npm)", version=PACKAGE.version),
    )


async def test_a_real_npm_agent_starts_offline_through_npx_and_answers_initialize(
    tmp_path: Path,
) -> None:
    npm_peers.require_node()
    if shutil.which("npx") is None:
        pytest.skip("npx is not on PATH")
    folder = npm_peers.require_package(PACKAGE)
    text = offline_codex_config(tmp_path, codex_registry(tmp_path), folder)
    config = parse_config(text, source="test.toml", base_dir=tmp_path)
    backend = profile_agent_config("codex", config.agents["codex"], config.server).backend
    assert (backend.command, backend.args) == ("npx", ("-y", PACKAGE.spec))
    process = await AgentProcess.spawn(
        backend.command, backend.args, env=backend.env, cwd=str(folder)
    )
    try:
        request = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}},
        }
        await process.send(orjson.dumps(request))
        with anyio.fail_after(90):
            answer = await process.receive()
    finally:
        await process.close(2)
    assert isinstance(answer, dict), process.diagnostics()
    result = answer["result"]
    assert result["protocolVersion"] == 1
    assert result["agentInfo"]["name"] == "codex-acp"
    assert result["agentInfo"]["version"] == PACKAGE.version
