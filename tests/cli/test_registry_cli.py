"""``oma-bridge registry`` and ``oma-bridge agents add`` (PROTOCOL §22.1), as a user runs them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from registry.snapshot import binary_entry, npx_entry, write_registry

from oma_bridge.acp_registry import snapshot
from oma_bridge.cli import main
from oma_bridge.server.config import load_config

from .test_cli import cli

USER_CONFIG = """\
# My daemon.  Keep these comments.
[server]
join_text = true   # an inline comment

[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
# the last line, a comment without a newline"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "XDG_RUNTIME_DIR": str(tmp_path / "run"),
    }


def test_registry_version_and_list(env: dict[str, str], tmp_path: Path) -> None:
    version = cli(env, "registry", "--version")
    taken = snapshot()
    assert version.returncode == 0
    assert (
        version.stdout
        == f"ACP registry snapshot {taken.commit} of {taken.date} ({taken.repository})\n"
    )
    listed = cli(env, "registry", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "VERSION", "DISTRIBUTION", "DESCRIPTION"]
    gemini = next(line for line in lines if line.split()[0] == "gemini")
    assert gemini.split()[-6:-4] == ["0.27.3", "npx"] or "npx" in gemini.split()
    assert "add one: oma-bridge agents add ID" in lines[-1]
    # Another registry, named by the config: its entries, and the refused one on stderr.
    registry = write_registry(
        tmp_path / "mine.json", npx_entry("mine", "pkg"), npx_entry("x; rm -rf ~", "pkg")
    )
    config = tmp_path / "c.toml"
    config.write_text(f'[server]\nacp_registry = "{registry.name}"\n')
    other = cli(env, "registry", "--config", str(config), "list")
    assert other.returncode == 0
    assert [line.split()[0] for line in other.stdout.splitlines()[1:2]] == ["mine"]
    assert (
        other.stderr
        == f"oma-bridge: refused: {registry}: $.agents[1].id: does not match ^[a-z][a-z0-9-]*$\n"
    )
    in_use = cli(env, "registry", "--version", "--config", str(config))
    assert (
        in_use.stdout.splitlines()[1]
        == f"in use instead: {registry} ([server] acp_registry in {config})"
    )


def test_agents_add_appends_to_the_user_config_and_keeps_every_byte(
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = Path(env["XDG_CONFIG_HOME"]) / "oma-bridge" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(USER_CONFIG)
    config.chmod(0o640)
    added = cli(env, "agents", "add", "gemini")
    assert added.returncode == 0, added.stderr
    assert added.stdout.splitlines()[0] == f"added [agents.gemini] (registry gemini) to {config}"
    assert "kill -HUP" in added.stdout and "reload" in added.stdout
    text = config.read_text()
    assert text.startswith(USER_CONFIG + "\n")  # nothing before it changed
    assert text[len(USER_CONFIG) :] == (
        "\n\n# Gemini CLI (gemini 0.27.3, npx) from the ACP registry: "
        "Google's official CLI for Gemini\n"
        "# Added by `oma-bridge agents add`.\n"
        '[agents.gemini]\nkind = "acp"\nregistry = "gemini"\n'
    )
    assert stat.S_IMODE(config.stat().st_mode) == 0o640  # its mode kept
    loaded = load_config(config)
    assert loaded.agents["gemini"].args == ("-y", "@google/gemini-cli@0.27.3", "--experimental-acp")
    named = cli(env, "agents", "add", "qwen-code", "--name", "qwen", "--version", "0.10.0")
    assert named.returncode == 0, named.stderr
    assert load_config(config).agents["qwen"].args[:2] == ("-y", "@qwen-code/qwen-code@0.10.0")
    before = config.read_text()
    for args, problem in [
        (("gemini",), "a profile named 'gemini' exists already; choose another with --name"),
        (
            ("codex-acp",),
            "(./codex-acp in the archive); give it with --binary-path FILE",
        ),
        (
            ("gemini", "--name", "g2", "--version", "1.0; rm -rf ~"),
            "agents.g2.version: not a version",
        ),
        (("gemni",), "did you mean 'gemini'?"),
    ]:
        # In this process (each refusal is made before anything is written).
        monkeypatch.setenv("XDG_CONFIG_HOME", env["XDG_CONFIG_HOME"])
        assert main(["agents", "add", *args]) == 2
        assert problem in capsys.readouterr().err
    assert config.read_text() == before  # nothing written on a refusal


def test_agents_add_makes_a_private_config_where_there_is_none(
    env: dict[str, str], tmp_path: Path
) -> None:
    registry = write_registry(tmp_path / "r.json", binary_entry("bin-agent"))
    binary = tmp_path / "agent"
    binary.write_text("")
    config = tmp_path / "new" / "config.toml"
    made = cli(
        env, "agents", "add", "bin-agent", "--config", str(config), "--binary-path", str(binary)
    )
    # The shipped registry has no bin-agent: a new config names none of its own.
    assert made.returncode == 2 and "no entry 'bin-agent'" in made.stderr
    assert not config.exists()
    config.parent.mkdir(mode=0o700)
    config.write_text(f'[server]\nacp_registry = "{registry}"\n')
    config.chmod(0o600)
    made = cli(
        env, "agents", "add", "bin-agent", "--config", str(config), "--binary-path", str(binary)
    )
    assert made.returncode == 0, made.stderr
    assert load_config(config).agents["bin-agent"].command == str(binary)
    fresh = Path(env["XDG_CONFIG_HOME"]) / "oma-bridge" / "config.toml"
    assert cli(env, "agents", "add", "claude-code-acp").returncode == 0
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    assert stat.S_IMODE(fresh.parent.stat().st_mode) == 0o700
    # It starts as the built-in config: the daemon, which reads it from now on,
    # keeps the profiles it served.
    assert fresh.read_text().startswith("# Made by `oma-bridge agents add` from oma-bridge's")
    assert list(load_config(fresh).agents) == ["echo", "wordcount", "demo", "claude-code-acp"]
