"""``registry = "<id>"`` profiles through a live daemon (PROTOCOL §22.1).

A binary entry whose ``sha256`` matches the file at ``binary_path`` starts
and answers; one whose checksum differs never starts (the file says when it
is started), and a file changed after its first start is refused at the
next spawn.  The agent is the demo ACP agent behind a script standing for a
downloaded binary.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from registry.snapshot import binary_entry, demo_binary, write_registry

from oma_bridge.client import connect

from .conftest import daemon

pytestmark = pytest.mark.anyio


async def test_a_binary_starts_only_when_its_checksum_matches(
    short_dir: Path, tmp_path: Path
) -> None:
    binary, digest = demo_binary(tmp_path / "agent")
    started = tmp_path / "started"
    env = {"STARTED_FILE": str(started)}
    registry = write_registry(
        tmp_path / "registry.json",
        binary_entry("good-bin", sha256=digest, env=env),
        binary_entry("bad-bin", sha256="0" * 64, env=env),
    )
    agents = "".join(
        f'[agents.{name}]\nkind = "acp"\nregistry = "{entry}"\nbinary_path = "{binary}"\n'
        for name, entry in (("good", "good-bin"), ("bad", "bad-bin"))
    )
    server = f'acp_registry = "{registry}"'
    async with daemon(short_dir, server, agents), connect(discovery_dir=short_dir) as client:
        profiles = {profile["name"]: profile for profile in client.profiles}
        assert profiles["good"]["description"] == "Good-Bin: the good-bin test agent"
        good = await client.open("good")
        result = await good.run("hello there")
        assert result.success, result.status
        assert "hello there" in result.output
        assert started.read_text() == "acp\n"  # the entry's args, its env
        bad = await client.open("bad")
        refused = await bad.run("hello")
        assert not refused.success
        assert refused.error_info is not None
        message = refused.error_info.message or ""
        assert f'"bad" was not started: {binary} is not the file expected' in message
        assert f"its sha256 is {digest}; command_sha256, or the registry entry's, is " in message
        assert message.endswith(f"{'0' * 64})")
        assert started.read_text() == "acp\n"  # never spawned
        with binary.open("a") as file:
            file.write("# changed\n")
        again = await client.open("good")
        changed = await again.run("hello")
        assert not changed.success and changed.error_info is not None
        assert f"entry's, is {digest})" in (changed.error_info.message or "")
        assert started.read_text() == "acp\n"
