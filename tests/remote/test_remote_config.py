"""A remote acp profile's keys (PROTOCOL §21): each mistake is one line naming the key.

Checked when the config is read (``url`` and what goes with it) and, for the
two files, when the daemon starts (``server/remote_profiles.py``): a token
file others can read stops the daemon before anything is bound.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oma_bridge.server.config import ConfigError, parse_config
from oma_bridge.server.profiles import profile_agent_config
from oma_bridge.server.remote_profiles import check_remote_profiles

URL = 'url = "wss://agents.example:7878/acp/coder"'


def parsed(body: str, base: Path = Path("/base")) -> object:
    return parse_config(f'[agents.r]\nkind = "acp"\n{body}\n', source="f.toml", base_dir=base)


def problem(body: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parsed(body)
    return str(caught.value)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "",
            "f.toml: agents.r.command: required key is missing (or registry, the id of an "
            "ACP registry agent, or url, a remote agent's)",
        ),
        (
            f'command = "x"\n{URL}',
            "f.toml: agents.r.url: url and command do not go together: "
            "a remote agent is not started",
        ),
        (
            'url = "ws://agents.example:7878/acp/coder"',
            "f.toml: agents.r.url: ws:// to a host beyond this machine sends the token and "
            "every message in clear: use wss:// (or set allow_insecure_remote = true)",
        ),
        (
            'url = "https://agents.example/acp/coder"',
            "f.toml: agents.r.url: must be a wss:// (or ws://) URL such as "
            "wss://HOST:PORT/acp/PROFILE",
        ),
        (
            'url = "wss://agents.example/acp/coder?token=abc"',
            "f.toml: agents.r.url: must not carry a token: a URL ends up in logs; use token_file",
        ),
        (
            'url = "wss://me:pw@agents.example/acp/coder"',
            "f.toml: agents.r.url: must not carry credentials: put the token in token_file",
        ),
        (
            f'args = ["-v"]\n{URL}',
            "f.toml: agents.r.url: a remote agent takes no args, env or command_sha256: "
            "they are a command's",
        ),
        (
            f'{URL}\npass_env = ["GITHUB_TOKEN"]',
            "f.toml: agents.r.pass_env: a remote agent (url) is started elsewhere: nothing of "
            "this daemon's environment reaches it",
        ),
        (
            'url = "ws://127.0.0.1:7878/acp/coder"\nca_file = "ca.pem"',
            "f.toml: agents.r.ca_file: is for a wss:// url: a ws:// connection has no certificate",
        ),
        (
            'command = "x"\ntoken_file = "t"',
            "f.toml: agents.r.token_file: is for a remote agent: set url (or remove it)",
        ),
        (
            f'{URL}\nremote_cwd = "work"',
            "f.toml: agents.r.remote_cwd: must be an absolute path (a folder on the remote host)",
        ),
    ],
)
def test_each_mistake_is_one_line_naming_the_key(body: str, expected: str) -> None:
    assert problem(body) == expected


def test_a_remote_profile_becomes_the_library_config() -> None:
    config = parse_config(
        f'[server]\nsend_timeout_s = 7.0\n[agents.r]\nkind = "acp"\n{URL}\n'
        'token_file = "secrets/token"\nca_file = "ca.pem"\nremote_cwd = "/workspace"\n',
        source="f.toml",
        base_dir=Path("/base"),
    )
    backend = profile_agent_config("r", config.agents["r"], config.server).backend
    assert backend.url == "wss://agents.example:7878/acp/coder"  # type: ignore[union-attr]
    assert backend.token_file == Path("/base/secrets/token")  # type: ignore[union-attr]
    assert backend.ca_file == Path("/base/ca.pem")  # type: ignore[union-attr]
    assert backend.remote_cwd == "/workspace"  # type: ignore[union-attr]
    assert backend.send_timeout_s == 7.0  # type: ignore[union-attr]
    assert backend.command is None  # type: ignore[union-attr]
    # ws:// stays allowed on loopback, and beyond it when the user says so.
    parsed('url = "ws://localhost:7878/acp/coder"')
    parsed('url = "ws://agents.example:7878/acp/coder"\nallow_insecure_remote = true')


def test_the_files_are_checked_at_start(tmp_path: Path) -> None:
    token, ca = tmp_path / "token", tmp_path / "ca.pem"
    token.write_text("s" * 40)
    ca.write_text("not a certificate")

    def check() -> str:
        config = parse_config(
            f'[agents.r]\nkind = "acp"\n{URL}\ntoken_file = "token"\nca_file = "ca.pem"\n',
            source="f.toml",
            base_dir=tmp_path,
        )
        with pytest.raises(ConfigError) as caught:
            check_remote_profiles(config)
        return str(caught.value)

    token.chmod(0o644)
    assert check() == f"f.toml: agents.r.token_file: {token} has mode 0644; it must be 0600"
    token.chmod(0o600)
    assert check() == f"f.toml: agents.r.ca_file: {ca} holds no PEM certificate"
    token.write_text("  \n")
    assert check() == f"f.toml: agents.r.token_file: {token} is empty"
    token.unlink()
    assert check() == (
        f"f.toml: agents.r.token_file: cannot read {token}: No such file or directory"
    )


def test_the_daemon_refuses_to_start_with_a_token_file_others_can_read(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s" * 40)
    token.chmod(0o640)
    config = tmp_path / "bridge.toml"
    config.write_text(
        f'[server]\nsocket = "{tmp_path}/s.sock"\n[agents.r]\nkind = "acp"\n{URL}\n'
        'token_file = "token"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "oma_bridge.cli", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines[-1].endswith(
        f"{config}: agents.r.token_file: {token} has mode 0640; it must be 0600"
    )
    assert "s" * 40 not in done.stderr
