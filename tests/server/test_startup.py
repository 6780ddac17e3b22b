"""Start-up and shutdown: runtime folder, socket, discovery file, token file (PROTOCOL §1, §2)."""

from __future__ import annotations

import errno
import os
import socket
import stat
from functools import partial
from pathlib import Path

import anyio
import orjson
import pytest
from websockets.asyncio.client import connect

from oma_bridge import __version__
from oma_bridge.server import ConfigError, StartupError, parse_config, serve
from oma_bridge.server.discovery import write_discovery

from .helpers import (
    UPGRADE_HEADERS,
    initialize,
    make_config,
    raw_http,
    running_daemon,
    unix_session,
)

pytestmark = pytest.mark.anyio


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


async def test_auto_socket_discovery_and_modes(runtime_dir: Path) -> None:
    config = parse_config('[server]\ntcp = "127.0.0.1:0"', source="t", base_dir=runtime_dir)
    async with running_daemon(config) as running:
        assert running.socket_path == runtime_dir / "bridge.sock"
        assert mode(runtime_dir) == 0o700
        assert stat.S_ISSOCK(os.lstat(running.socket_path).st_mode)
        assert mode(running.socket_path) == 0o600
        discovery = runtime_dir / "bridge.json"
        assert running.discovery_path == discovery
        assert mode(discovery) == 0o600
        content = orjson.loads(discovery.read_bytes())
        assert content == {
            "pid": os.getpid(),
            "version": __version__,
            "protocolVersion": 1,
            "socket": str(runtime_dir / "bridge.sock"),
            "url": f"ws://127.0.0.1:{running.port}/",
            "token": running.token,
        }
        # The discovery file is enough to connect.
        auth = [("Authorization", f"Bearer {content['token']}")]
        async with connect(content["url"], additional_headers=auth) as ws:
            await initialize(ws)
        # No temp file is left beside it.
        assert names(runtime_dir) == [
            "bridge.json",
            "bridge.lock",
            "bridge.sock",
        ]
    # A clean stop removes the discovery file and the socket.
    assert not discovery.exists()
    assert not (runtime_dir / "bridge.sock").exists()


async def test_an_auto_folder_others_can_reach_is_refused_with_the_fix(runtime_dir: Path) -> None:
    # Made 0700 by every daemon: wider, someone changed it, and may have been inside.
    os.mkdir(runtime_dir)  # noqa: PTH102
    os.chmod(runtime_dir, 0o755)  # noqa: PTH101
    config = parse_config("", source="t", base_dir=runtime_dir)
    with pytest.raises(StartupError) as caught:
        await serve(config)
    assert str(caught.value) == (
        f"cannot use the runtime folder: {runtime_dir} has mode 0755; "
        f"it must be 0700: chmod 700 {runtime_dir}"
    )
    assert mode(runtime_dir) == 0o755  # refused, not changed
    assert names(runtime_dir) == []
    os.chmod(runtime_dir, 0o700)  # noqa: PTH101 - the fix it names
    async with running_daemon(config) as running:
        assert running.url is None
        assert orjson.loads(running.discovery_path.read_bytes())["url"] is None


async def test_tcp_only_keeps_the_discovery_file_in_the_socket_folder(runtime_dir: Path) -> None:
    config = parse_config(
        '[server]\nsocket = false\ntcp = "127.0.0.1:0"', source="t", base_dir=runtime_dir
    )
    async with running_daemon(config) as running:
        assert running.socket_path is None
        content = orjson.loads((runtime_dir / "bridge.json").read_bytes())
        assert content["socket"] is None
        assert content["url"] == f"ws://127.0.0.1:{running.port}/"
        assert not (runtime_dir / "bridge.sock").exists()
    assert not (runtime_dir / "bridge.json").exists()


async def test_stale_socket_is_replaced(short_dir: Path) -> None:
    path = short_dir / "bridge.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens: a daemon that died
    async with unix_session(make_config(short_dir, tcp=False)) as (_, ws):
        await initialize(ws)


async def test_live_socket_is_refused(short_dir: Path) -> None:
    path = short_dir / "bridge.sock"
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(path))
    live.listen()
    try:
        with pytest.raises(StartupError, match="already listening"):
            await serve(make_config(short_dir, tcp=False))
    finally:
        live.close()
    assert not (short_dir / "bridge.json").exists()


async def test_second_daemon_on_the_same_folder_is_refused(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        with pytest.raises(StartupError, match="another oma-bridge daemon"):
            await serve(make_config(short_dir))
        # The first daemon is untouched.
        assert (await raw_http(running, "/healthz", via="unix")) == (200, "ok")
        assert running.discovery_path.exists()


async def test_something_else_at_the_socket_path_is_refused(short_dir: Path) -> None:
    (short_dir / "bridge.sock").write_text("not a socket")
    with pytest.raises(StartupError, match="not a socket"):
        await serve(make_config(short_dir, tcp=False))


async def test_busy_tcp_port_fails_before_the_discovery_file(short_dir: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        config = make_config(short_dir, f'tcp = "127.0.0.1:{port}"', tcp=False)
        with pytest.raises(StartupError, match="cannot listen"):
            await serve(config)
    finally:
        taken.close()
    assert not (short_dir / "bridge.json").exists()
    assert not (short_dir / "bridge.sock").exists()


def test_discovery_write_failure_leaves_no_partial_file(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(StartupError, match="No space left on device"):
        write_discovery(short_dir, socket=None, url=None, token="t" * 64)
    assert names(short_dir) == []


async def test_cancelling_serve_also_cleans_up(short_dir: Path) -> None:
    config = make_config(short_dir)
    async with anyio.create_task_group() as tg:
        running = await tg.start(partial(serve, config))
        assert running.discovery_path.exists()
        tg.cancel_scope.cancel()
    assert not (short_dir / "bridge.json").exists()
    assert not (short_dir / "bridge.sock").exists()


async def test_token_file_is_used(short_dir: Path) -> None:
    token = "s3cr3t-" + "a" * 40
    token_path = short_dir / "token"
    token_path.write_text(f"  {token}\n")
    token_path.chmod(0o600)
    async with running_daemon(make_config(short_dir, f'token_file = "{token_path}"')) as running:
        assert running.token == token
        auth = [("Authorization", f"Bearer {token}")]
        assert (await raw_http(running, "/", UPGRADE_HEADERS + auth))[0] == 101


@pytest.mark.parametrize(
    ("content", "file_mode", "problem"),
    [
        ("a" * 40, 0o644, "mode 0644"),
        ("a" * 40, 0o640, "mode 0640"),
        ("short-token", 0o600, "at least 32"),
        ("a" * 20 + " " + "a" * 20, 0o600, "spaces"),
    ],
)
async def test_token_file_problems_refuse_to_start(
    short_dir: Path, content: str, file_mode: int, problem: str
) -> None:
    token_path = short_dir / "token"
    token_path.write_text(content)
    token_path.chmod(file_mode)
    config = make_config(short_dir, f'token_file = "{token_path}"')
    with pytest.raises(ConfigError) as caught:
        await serve(config)
    assert caught.value.key == "server.token_file"
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"{short_dir / 'bridge.toml'}: server.token_file: ")
    assert content not in str(caught.value)
    assert not (short_dir / "bridge.json").exists()


async def test_missing_token_file_refuses_to_start(short_dir: Path) -> None:
    config = make_config(short_dir, f'token_file = "{short_dir / "nope"}"')
    with pytest.raises(ConfigError, match=r"server\.token_file: cannot open"):
        await serve(config)


async def test_allow_remote_binds_every_address_and_still_checks_host(short_dir: Path) -> None:
    # In clear on purpose (PROTOCOL §17 needs allow_insecure_remote for that): the Host
    # check is the subject here; tests/server/test_tls.py covers the remote rule itself.
    server = 'allow_remote = true\nallow_insecure_remote = true\ntcp = "0.0.0.0:0"'
    config = make_config(short_dir, server, tcp=False)
    async with running_daemon(config) as running:
        assert running.url == f"ws://127.0.0.1:{running.port}/"
        auth = [*UPGRADE_HEADERS, ("Authorization", f"Bearer {running.token}")]
        assert (await raw_http(running, "/", auth))[0] == 101
        assert (await raw_http(running, "/", auth, host=f"0.0.0.0:{running.port}"))[0] == 403
        assert (await raw_http(running, "/", UPGRADE_HEADERS))[0] == 401
