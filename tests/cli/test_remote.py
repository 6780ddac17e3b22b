"""The command line against a daemon that is not local: ``--url``, ``--token-file``, ``--ca-file``.

One real ``oma-bridge serve`` with TLS for the module; every client command
runs with a runtime folder of its own, empty, so that only the options can
lead it to the daemon (PROTOCOL §17).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import pytest

if TYPE_CHECKING:
    from conftest import TlsFiles

CONFIG = """
[server]
tcp = "127.0.0.1:0"
token_file = "token"
{tls}
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""


def environment(folder: Path) -> dict[str, str]:
    (folder / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
    return {
        **os.environ,
        "XDG_RUNTIME_DIR": str(folder / "run"),
        "XDG_STATE_HOME": str(folder / "state"),
        "XDG_CONFIG_HOME": str(folder / "config"),
    }


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oma_bridge.cli", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


@dataclass(frozen=True)
class Remote:
    """A TLS daemon, and what a remote client knows of it."""

    url: str
    token: str
    token_file: Path
    ca: Path
    #: The environment of a client on "another machine": no local daemon.
    env: dict[str, str]

    def options(self) -> list[str]:
        return ["--url", self.url, "--token-file", str(self.token_file), "--ca-file", str(self.ca)]

    def leaked(self, done: subprocess.CompletedProcess[str]) -> bool:
        return self.token in done.stdout or self.token in done.stderr


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="omab-remote-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def remote(folder: Path, tls_files: TlsFiles) -> Iterator[Remote]:
    server = folder / "server"
    server.mkdir()
    token = secrets.token_hex(32)
    (server / "token").write_text(token + "\n")
    (server / "token").chmod(0o600)
    config = server / "bridge.toml"
    config.write_text(CONFIG.format(tls=tls_files.server_toml()))
    env = environment(server)
    process = subprocess.Popen(
        [sys.executable, "-m", "oma_bridge.cli", "serve", "--config", str(config)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = _wait_for_url(process, Path(env["XDG_RUNTIME_DIR"]) / "oma-bridge" / "bridge.json")
        client_token = folder / "client-token"  # a copy, as a remote client has it
        shutil.copy(server / "token", client_token)
        yield Remote(url, token, client_token, tls_files.ca, environment(folder / "client"))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=15)
        output = process.stdout.read() if process.stdout else ""
        assert token not in output  # the daemon's whole log


def _wait_for_url(process: subprocess.Popen[str], discovery: Path) -> str:
    deadline = time.monotonic() + 20
    while not discovery.exists():
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        assert time.monotonic() < deadline, "the daemon did not become ready"
        time.sleep(0.05)
    url = orjson.loads(discovery.read_bytes())["url"]
    assert isinstance(url, str) and url.startswith("wss://127.0.0.1:")
    return url


def test_run_agents_and_status_reach_a_tls_daemon_by_url(remote: Remote) -> None:
    done = cli(remote.env, "run", "echo", "hi", *remote.options())
    assert (done.returncode, done.stdout, done.stderr) == (0, "hi\n", "")
    # Options before the arguments work as well.
    done = cli(remote.env, "run", *remote.options(), "--stream", "echo", "one two")
    assert (done.returncode, done.stdout) == (0, "one two\n"), done.stderr
    agents = cli(remote.env, "agents", *remote.options())
    assert agents.returncode == 0, agents.stderr
    assert agents.stdout.split()[:5] == ["NAME", "KIND", "MODEL", "DESCRIPTION", "echo"]
    status = cli(remote.env, "status", *remote.options())
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith("oma-bridge ")
    assert not any(remote.leaked(d) for d in (done, agents, status))
    # Without the options, this client has no daemon: the options did it.
    assert cli(remote.env, "status").returncode == 3


def test_a_certificate_the_cli_cannot_verify_exits_3_with_one_line(remote: Remote) -> None:
    done = cli(
        remote.env, "run", "echo", "hi", "--url", remote.url, "--token-file", str(remote.token_file)
    )
    assert done.returncode == 3
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(
        f"oma-bridge: cannot verify the TLS certificate of the daemon at {remote.url}:"
    )
    assert "--ca-file" in line
    assert not remote.leaked(done)


def test_a_plain_ws_url_to_the_tls_listener_exits_3(remote: Remote) -> None:
    plain = remote.url.replace("wss://", "ws://")
    done = cli(remote.env, "agents", "--url", plain, "--token-file", str(remote.token_file))
    assert done.returncode == 3
    [line] = done.stderr.splitlines()
    assert line.endswith("a TLS listener needs wss://")
    assert not remote.leaked(done)
    # And the daemon is unharmed.
    assert cli(remote.env, "agents", *remote.options()).returncode == 0


def test_a_wrong_token_exits_4_and_is_not_printed(remote: Remote, folder: Path) -> None:
    wrong = folder / "wrong-token"
    wrong.write_text("w" * 64)
    options = ["--url", remote.url, "--token-file", str(wrong), "--ca-file", str(remote.ca)]
    done = cli(remote.env, "status", *options)
    assert done.returncode == 4  # refused by the daemon (PROTOCOL §18.3), not "no daemon" (3)
    [line] = done.stderr.splitlines()
    assert line == (
        f"oma-bridge: the daemon at {remote.url} refused the connection: HTTP 401: "
        "Unauthorized; the daemon's token in the file of --token-file is wrong"
    )
    assert "w" * 64 not in done.stderr + done.stdout


def test_a_url_without_a_token_is_refused_not_missing(remote: Remote) -> None:
    """HTTP 401 is the daemon saying no: exit 4, and the line says how to give the token."""
    done = cli(remote.env, "status", "--url", remote.url, "--ca-file", str(remote.ca))
    assert done.returncode == 4, done.stderr
    [line] = done.stderr.splitlines()
    assert line == (
        f"oma-bridge: the daemon at {remote.url} refused the connection: HTTP 401: "
        "Unauthorized; give the daemon's token with --token-file FILE"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--token-file": "/nonexistent/token"}, "cannot read the token file /nonexistent/token"),
        ({"--ca-file": "/nonexistent/ca.pem"}, "cannot read the CA file /nonexistent/ca.pem"),
        ({"--url": "http://127.0.0.1:1/"}, "not a ws:// or wss:// URL"),
        ({"--url": "ws://127.0.0.1:1/"}, "ca_file is for wss:// URLs"),
    ],
)
def test_client_options_that_cannot_work_exit_2(
    remote: Remote, change: dict[str, str], message: str
) -> None:
    given = dict(zip(remote.options()[::2], remote.options()[1::2], strict=True)) | change
    done = cli(remote.env, "status", *(part for pair in given.items() for part in pair))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert message in line


# --- serve refuses, in one line --------------------------------------------


def serve_once(folder: Path, server: str) -> subprocess.CompletedProcess[str]:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "bridge.toml"
    config.write_text(f"[server]\n{server}\n")
    return cli(environment(folder), "serve", "--config", str(config))


def test_serve_refuses_a_remote_listener_without_tls(folder: Path) -> None:
    where = folder / "remote-in-clear"
    done = serve_once(where, 'allow_remote = true\ntcp = "0.0.0.0:0"')
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"oma-bridge: {where / 'bridge.toml'}: server.tcp: a listener beyond this machine needs "
        "TLS: configure tls_cert and tls_key (or set allow_insecure_remote = true to send the "
        "token in clear)"
    )
    assert "Traceback" not in done.stderr
    assert not (where / "run" / "oma-bridge" / "bridge.json").exists()


def test_serve_refuses_a_key_others_can_read(folder: Path, tls_files: TlsFiles) -> None:
    where = folder / "open-key"
    where.mkdir()
    key = where / "server.key"
    shutil.copy(tls_files.key, key)
    key.chmod(0o644)
    done = serve_once(
        where, f'tcp = "127.0.0.1:0"\ntls_cert = "{tls_files.cert}"\ntls_key = "server.key"'
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"oma-bridge: {where / 'bridge.toml'}: server.tls_key: {key} has mode 0644; it must be 0600"
    )
    assert "Traceback" not in done.stderr
