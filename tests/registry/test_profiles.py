"""An acp profile with ``registry = "<id>"`` in the daemon's config (PROTOCOL §22.1)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oma_bridge.server.config import ConfigError, parse_config
from oma_bridge.server.profiles import profile_agent_config

from .snapshot import binary_entry, npx_entry, uvx_entry, write_registry


def refused(text: str, base: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="c.toml", base_dir=base)
    return str(caught.value)


def test_a_registry_profile_is_an_acp_profile_with_the_entry_s_command(tmp_path: Path) -> None:
    registry = write_registry(
        tmp_path / "r.json",
        npx_entry("npx-agent", "@scope/agent@1.2.3", "--acp", env={"A": "entry", "B": "entry"}),
        uvx_entry("uvx-agent", "uvx-agent"),
        binary_entry("bin-agent", sha256="ab" * 32),
    )
    text = f"""
[server]
acp_registry = "{registry.name}"

[agents.n]
kind = "acp"
registry = "npx-agent"
version = "2.0.0"
args = ["--more"]
env = {{ B = "profile" }}

[agents.u]
kind = "acp"
registry = "uvx-agent"
description = "mine"

[agents.b]
kind = "acp"
registry = "bin-agent"
binary_path = "bin/agent"
"""
    agents = parse_config(text, source="c.toml", base_dir=tmp_path).agents
    npx = profile_agent_config(
        "n", agents["n"], parse_config("", source="x", base_dir=tmp_path).server
    )
    backend = npx.backend
    assert (backend.command, backend.args) == (
        "npx",
        ("-y", "@scope/agent@2.0.0", "--acp", "--more"),
    )
    assert backend.env == {"A": "entry", "B": "profile"}
    assert agents["n"].description == "Npx-Agent: the npx-agent test agent"
    assert (agents["u"].command, agents["u"].args, agents["u"].description) == (
        "uvx",
        ("uvx-agent",),
        "mine",
    )
    binary = agents["b"]
    assert (binary.command, binary.command_sha256) == (str(tmp_path / "bin" / "agent"), "ab" * 32)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ('registry = "x; rm -rf ~"', "agents.a.registry: not a registry id"),
        ('registry = "--config=/etc/passwd"', "agents.a.registry: not a registry id"),
        (
            'registry = "gemini"\nversion = "--config=/etc/passwd"',
            "agents.a.version: not a version",
        ),
        ('registry = "gemini"\nversion = "1.0.0; rm -rf ~"', "agents.a.version: not a version"),
        ('registry = "gemini"\ncommand = "npx"', "command and registry do not go together"),
        ('command = "x"\nversion = "1.0.0"', "agents.a.version: goes with registry"),
        ("", "agents.a.command: required key is missing (or registry"),
        (
            'registry = "gemini"\ncommand_sha256 = "' + "a" * 64 + '"',
            "command_sha256: checks a binary",
        ),
        (
            'registry = "codex-acp"',
            "agents.a.binary_path: the registry entry 'codex-acp' is a binary",
        ),
        ('registry = "gemni"', "agents.a.registry: no entry 'gemni' in the ACP registry"),
    ],
)
def test_a_registry_profile_that_cannot_start_is_a_config_error(
    tmp_path: Path, keys: str, expected: str
) -> None:
    message = refused(f'[agents.a]\nkind = "acp"\n{keys}\n', tmp_path)
    assert expected in message


def test_an_entry_the_registry_refuses_is_named_with_its_file_and_json_path(tmp_path: Path) -> None:
    registry = write_registry(
        tmp_path / "r.json", npx_entry("fine", "pkg"), npx_entry("bad", "pkg", version="1.0.0 x")
    )
    text = f'[server]\nacp_registry = "{registry}"\n[agents.a]\nkind = "acp"\nregistry = "bad"\n'
    message = refused(text, tmp_path)
    assert message.startswith("c.toml: agents.a.registry: the entry 'bad' of ")
    assert f"{registry}: $.agents[1].version: not a version" in message
    missing = refused(text.replace(str(registry), "nope.json"), tmp_path)
    assert re.search(
        r"^c\.toml: server\.acp_registry: cannot read the ACP registry .*nope\.json", missing
    )


def test_the_checksum_of_a_binary_profile_and_of_its_entry_must_agree(tmp_path: Path) -> None:
    registry = write_registry(tmp_path / "r.json", binary_entry("bin", sha256="ab" * 32))
    head = f'[server]\nacp_registry = "{registry}"\n[agents.a]\nkind = "acp"\nregistry = "bin"\n'
    path = 'binary_path = "/opt/agent"\n'
    assert "differs from the sha256 the registry entry gives" in refused(
        head + path + f'command_sha256 = "{"cd" * 32}"\n', tmp_path
    )
    same = parse_config(
        head + path + f'command_sha256 = "{"AB" * 32}"\n', source="c", base_dir=tmp_path
    )
    assert same.agents["a"].command_sha256 == "ab" * 32
    assert "needs command to be a file's path" in refused(
        f'[agents.a]\nkind = "acp"\ncommand = "agent"\ncommand_sha256 = "{"ab" * 32}"\n', tmp_path
    )
