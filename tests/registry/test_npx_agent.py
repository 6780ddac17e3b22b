"""A registry profile of a real npm ACP agent, started through ``npx`` offline (PROTOCOL §22.1).

The agent is Zed's codex-acp, pinned in ``support/npm_peers.py`` and
installed in the suite's npm cache; the test's registry names it as an npx
distribution, so the daemon's command is ``npx -y @zed-industries/codex-acp@0.16.0``.
How ``npx`` runs it without the network: ``npx`` (``npm exec``) takes a
package that the project it runs in already has in ``node_modules``, and the
profile's ``cwd`` is the cache folder that holds it; ``npm_config_offline``
in the profile's ``env`` makes any fetch fail at once instead (npm's
``--offline``), and ``HOME`` is the test's, so neither npm's cache nor
codex's settings of the machine are touched.  Started by the daemon for
``agents/probe``, it answers ``initialize`` with what codex-acp can do.
Skipped, with the reason, where node, npm or the package is missing.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import anyio
import pytest
from daemon.conftest import daemon
from support import npm_peers

from oma_bridge.client import connect
from oma_bridge.server.config import parse_config
from oma_bridge.server.profiles import profile_agent_config

from .snapshot import npx_entry, write_registry

pytestmark = pytest.mark.anyio

PACKAGE = npm_peers.CODEX_ACP


def offline_codex_profile(home: Path, folder: Path) -> str:
    """A ``codex`` profile that ``npx`` starts from ``folder``, offline, with ``home`` as HOME."""
    return f"""
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
    home = tmp_path / "home"
    home.mkdir()
    server = f'acp_registry = "{codex_registry(tmp_path)}"'
    agents = offline_codex_profile(home, folder)
    config = parse_config(f"[server]\n{server}\n{agents}", source="test.toml", base_dir=tmp_path)
    backend = profile_agent_config("codex", config.agents["codex"], config.server).backend
    assert (backend.command, backend.args) == ("npx", ("-y", PACKAGE.spec))
    # The daemon starts it as it starts any acp agent, for agents/probe
    # (`oma-bridge agents --probe`): initialize alone, then the end.
    with tempfile.TemporaryDirectory(prefix="omr-", dir="/tmp") as short:
        socket_dir = Path(short)
        async with daemon(socket_dir, server, agents), connect(discovery_dir=socket_dir) as client:
            with anyio.fail_after(100):
                (probed,) = await client.probe_agents(["codex"])
            assert "probeError" not in probed, probed
            caps = probed["capabilities"]
            assert caps["agentInfo"]["name"] == "codex-acp"
            assert caps["agentInfo"]["version"] == PACKAGE.version
            assert caps["loadSession"] is True
            assert caps["mcpCapabilities"]["http"] is True
            assert "chatgpt" in {method["id"] for method in caps["authMethods"]}
            assert (await client.status())["processes"] == []  # npx and codex both gone
