"""PROTOCOL §18.5: the built-in config (what ``make serve`` runs) also listens on loopback TCP,
port 47683 or the next free one, so that ``oma-bridge ui`` works under it; the token is still
required there and the Host and Origin checks of §2 hold.

``oma-bridge serve`` runs as ``make serve`` runs it (no ``--config``, no user
config), with a runtime folder of the test's own.  Port 47683 is held by the
test while it starts (or by someone else already, which is just as good), so
the daemon always shows "the next free one".
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from oma_bridge.server.config import EMBEDDED_SOURCE, ConfigError, parse_config
from oma_bridge.server.default_config import DEFAULT_CONFIG_TOML

from .user_daemon import serving, user_env

PORT = 47683
RETRIES = 100
UPGRADE = (
    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


def test_the_built_in_config_listens_on_loopback_47683_or_the_next_free_one() -> None:
    server = parse_config(DEFAULT_CONFIG_TOML, source=EMBEDDED_SOURCE, base_dir=Path.cwd()).server
    assert server.tcp is not None and (server.tcp.host, server.tcp.port) == ("127.0.0.1", PORT)
    assert server.tcp.is_loopback and not server.allow_remote
    assert server.tcp_port_retries == RETRIES
    # Any other config: the port it names, or an error.
    assert parse_config("", source="x", base_dir=Path.cwd()).server.tcp_port_retries == 0


@pytest.mark.parametrize("value", ["-1", "1001", '"5"', "1.5"])
def test_tcp_port_retries_is_a_small_count(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(
            f"[server]\ntcp_port_retries = {value}\n", source="c.toml", base_dir=Path.cwd()
        )
    assert str(caught.value).startswith("c.toml: server.tcp_port_retries: ")


@pytest.fixture
def root() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="ombl-", dir="/tmp"))  # short: a socket path's limit
    for name in ("run", "config", "state", "home"):
        (base / name).mkdir(mode=0o700)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "oma_bridge.cli", *args]
    return subprocess.run(argv, env=user_env(root), capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def _holding(port: int) -> Iterator[socket.socket | None]:
    """A socket bound to 127.0.0.1:``port``, or ``None`` when something else has it already."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            held.bind(("127.0.0.1", port))
            held.listen()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            yield None
        else:
            yield held
    finally:
        held.close()


def _status(port: int, head: str) -> int:
    """The status code of one raw HTTP/1.1 request to 127.0.0.1:``port``."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(f"GET / HTTP/1.1\r\n{head}\r\n".encode("latin-1"))
        answer = connection.recv(4096).decode("latin-1")
    return int(answer.split(" ", 2)[1])


def test_oma_bridge_ui_works_under_make_serve_and_the_listener_keeps_its_checks(
    root: Path,
) -> None:
    with _holding(PORT), serving(root) as discovery:
        url = str(discovery["url"])
        port = int(url.rsplit(":", 1)[1].rstrip("/"))
        assert url == f"ws://127.0.0.1:{port}/" and PORT < port <= PORT + RETRIES
        assert "port 47683 is in use; listening on" in (root / "serve.log").read_text()

        done = _cli(root, "ui", "--no-browser")
        assert (done.returncode, done.stderr) == (0, "")
        token = str(discovery["token"])
        assert done.stdout == f"http://127.0.0.1:{port}/ui#token={token}\n"
        page = httpx.get(done.stdout.strip(), timeout=10)
        assert page.status_code == 200 and "<main" in page.text

        here = f"Host: 127.0.0.1:{port}\r\n"
        bearer = f"Authorization: Bearer {token}\r\n"
        # The token is still required on TCP...
        assert _status(port, here + UPGRADE) == 401
        # ...and a name that is not this listener's (DNS rebinding), or a foreign page, is refused.
        assert _status(port, f"Host: attacker.example:{port}\r\n" + bearer + UPGRADE) == 403
        foreign = "Origin: https://attacker.example\r\n"
        assert _status(port, here + bearer + foreign + UPGRADE) == 403
        assert _status(port, here + bearer + UPGRADE) == 101


def test_two_daemons_on_the_built_in_config_take_two_ports(root: Path) -> None:
    other = Path(tempfile.mkdtemp(prefix="ombl-", dir="/tmp"))
    for name in ("run", "config", "state"):
        (other / name).mkdir(mode=0o700)
    try:
        with serving(root) as first, serving(other) as second:
            assert first["url"] != second["url"]
            for found in (first, second):
                port = int(str(found["url"]).rsplit(":", 1)[1].rstrip("/"))
                assert PORT <= port <= PORT + RETRIES
    finally:
        shutil.rmtree(other, ignore_errors=True)


def test_a_port_given_on_the_command_line_is_that_port_or_an_error(root: Path) -> None:
    with _holding(0) as held:
        assert held is not None
        port = held.getsockname()[1]
        done = _cli(root, "serve", "--tcp", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: " in done.stderr
    assert "in use" in done.stderr


def test_every_port_of_the_range_in_use_is_one_line_naming_the_range(root: Path) -> None:
    with contextlib.ExitStack() as stack:
        for _attempt in range(50):  # three free ports in a row
            first = stack.enter_context(_holding(0))
            assert first is not None
            start = first.getsockname()[1]
            held = [stack.enter_context(_holding(start + i)) for i in (1, 2)]
            if all(held) and start + 2 <= 65535:
                break
            stack.close()
        else:
            pytest.skip("no three free ports in a row on 127.0.0.1")
        config = root / "config" / "ranged.toml"
        config.write_text(
            f'[server]\nsocket = "{root}/run/b.sock"\ntcp = "127.0.0.1:{start}"\n'
            "tcp_port_retries = 2\n"
        )
        done = _cli(root, "serve", "--config", str(config))
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]  # after the log lines of the start
    assert last.startswith(f"oma-bridge: cannot listen on 127.0.0.1:{start}-{start + 2}: ")
    assert last.endswith("address already in use")
