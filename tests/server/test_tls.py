"""PROTOCOL §17 on real sockets: wss://, the rule for remote listeners, /readyz.

The certificates are made per test run (``tls_files`` in ``tests/conftest.py``).
Every connection goes to 127.0.0.1, also when the daemon listens on 0.0.0.0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import httpx
import orjson
import pytest
from anyio.streams.tls import TLSAttribute
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidMessage

from oma_bridge.client import (
    ConnectOptionError,
    DaemonNotRunningError,
    DaemonTLSError,
    client_ssl_context,
    connect,
)
from oma_bridge.server import ConfigError, RunningServer, ServerConfig, parse_config, serve
from oma_bridge.server.daemon import run_daemon
from oma_bridge.server.tls import server_ssl_context

from .helpers import make_config, raw_http, running_daemon

if TYPE_CHECKING:
    from conftest import TlsFiles

pytestmark = pytest.mark.anyio

ECHO = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""


@contextlib.asynccontextmanager
async def agent_daemon(config: ServerConfig, folder: Path) -> AsyncIterator[RunningServer]:
    """The whole daemon (agents included), in this process, for the block."""
    async with anyio.create_task_group() as tg:
        running: RunningServer = await tg.start(
            lambda task_status: run_daemon(
                config, state_dir=folder / "state", task_status=task_status
            )
        )
        try:
            yield running
        finally:
            running.stop()


async def get(url: str, tls_files: TlsFiles) -> tuple[int, str]:
    """``GET url`` over TLS, trusting the test CA, with no token."""
    verify = client_ssl_context(tls_files.ca)
    async with httpx.AsyncClient(verify=verify, timeout=5, trust_env=False) as http:
        response = await http.get(url)
    return response.status_code, response.text


async def echo_through(url: str, token: str, tls_files: TlsFiles) -> str:
    async with connect(url=url, token=token, ca_file=tls_files.ca) as client:
        agent = await client.open("echo")
        result = await agent.run("hello over tls")
    assert result.success, result.status
    return result.output


def one_line(error: ConfigError) -> str:
    text = str(error)
    assert "\n" not in text
    return text


# --- wss:// -----------------------------------------------------------------


async def test_wss_serves_a_client_that_trusts_the_ca(short_dir: Path, tls_files: TlsFiles) -> None:
    config = make_config(short_dir, tls_files.server_toml(), agents=ECHO)
    async with agent_daemon(config, short_dir) as running:
        assert running.url == f"wss://127.0.0.1:{running.port}/"
        assert orjson.loads(running.discovery_path.read_bytes())["url"] == running.url
        assert await echo_through(running.url, running.token, tls_files) == "hello over tls"
        # The token from a file, as a remote client has it.
        token_file = short_dir / "token"
        token_file.write_text(running.token + "\n")
        async with connect(url=running.url, token_file=token_file, ca_file=tls_files.ca) as c:
            assert [a["name"] for a in await c.list_agents()] == ["echo"]
        # The probes need no token, over TLS too.
        assert await get(f"{running.url}healthz", tls_files) == (200, "ok")
        assert await get(f"{running.url}readyz", tls_files) == (200, "ready")


async def test_tls_is_1_2_or_later(short_dir: Path, tls_files: TlsFiles) -> None:
    config = make_config(short_dir, tls_files.server_toml())
    context = server_ssl_context(config)
    assert context is not None and context.minimum_version == ssl.TLSVersion.TLSv1_2
    async with running_daemon(config) as running:
        assert running.port is not None
        client = client_ssl_context(tls_files.ca)
        client.maximum_version = ssl.TLSVersion.TLSv1_2  # the oldest the daemon takes
        stream = await anyio.connect_tcp(
            "127.0.0.1", running.port, ssl_context=client, tls_hostname="127.0.0.1"
        )
        async with stream:
            assert stream.extra(TLSAttribute.tls_version) == "TLSv1.2"


async def test_a_client_that_does_not_trust_the_certificate_fails_clearly(
    short_dir: Path, tls_files: TlsFiles
) -> None:
    async with running_daemon(make_config(short_dir, tls_files.server_toml())) as running:
        assert running.url is not None
        with pytest.raises(DaemonTLSError) as caught:  # the system's CAs know no test CA
            async with connect(url=running.url, token=running.token):
                pass
        message = str(caught.value)
        assert message.startswith(
            f"cannot verify the TLS certificate of the daemon at {running.url}"
        )
        assert "certificate verify failed" in message or "unable to get local issuer" in message
        assert "ca_file" in message
        assert running.token not in message


async def test_a_plain_ws_client_fails_and_the_daemon_keeps_serving(
    short_dir: Path, tls_files: TlsFiles
) -> None:
    config = make_config(short_dir, tls_files.server_toml(), agents=ECHO)
    async with agent_daemon(config, short_dir) as running:
        assert running.url is not None and running.port is not None
        plain = f"ws://127.0.0.1:{running.port}/"
        headers = {"Authorization": f"Bearer {running.token}"}
        # The TLS layer drops the cleartext request: no HTTP answer comes back.
        with pytest.raises(InvalidMessage, match="did not receive a valid HTTP response"):
            async with ws_connect(plain, additional_headers=headers, open_timeout=5):
                pass
        with pytest.raises(DaemonNotRunningError) as caught:
            async with connect(url=plain, token=running.token):
                pass
        assert not isinstance(caught.value, DaemonTLSError)
        assert str(caught.value).endswith("; a TLS listener needs wss://")
        assert running.token not in str(caught.value)
        # Plain HTTP gets no HTTP answer at all, not even /healthz.
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            await raw_http(running, "/healthz")
        # The daemon is unharmed: TLS clients still get through.
        assert await echo_through(running.url, running.token, tls_files) == "hello over tls"
        assert await echo_through(running.url, running.token, tls_files) == "hello over tls"


# --- refusals at start ------------------------------------------------------


@pytest.mark.parametrize("key_mode", [0o644, 0o640, 0o604])
async def test_a_key_others_can_read_refuses_to_start(
    short_dir: Path, tls_files: TlsFiles, key_mode: int
) -> None:
    key = short_dir / "server.key"
    shutil.copy(tls_files.key, key)
    key.chmod(key_mode)
    config = make_config(short_dir, f'tls_cert = "{tls_files.cert}"\ntls_key = "{key}"')
    with pytest.raises(ConfigError) as caught:
        await serve(config)
    assert one_line(caught.value) == (
        f"{short_dir / 'bridge.toml'}: server.tls_key: {key} has mode {key_mode:04o}; "
        "it must be 0600"
    )
    assert not (short_dir / "bridge.json").exists()
    assert not (short_dir / "bridge.sock").exists()


def _encrypted_copy(tls_files: TlsFiles, folder: Path) -> Path:
    path = folder / "encrypted.key"
    subprocess.run(
        ["openssl", "pkey", "-aes256", "-passout", "pass:x", "-in", tls_files.key, "-out", path],
        check=True,
        capture_output=True,
        timeout=30,
    )
    path.chmod(0o600)
    return path


def _junk(folder: Path) -> Path:
    path = folder / "junk.pem"
    path.write_text("not PEM at all\n")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(
    ("case", "key", "problem"),
    [
        ("missing cert", "server.tls_cert", "cannot read {cert}: No such file or directory"),
        ("cert is a folder", "server.tls_cert", "cannot read {cert}: Is a directory"),
        ("missing key", "server.tls_key", "cannot open {key}: No such file or directory"),
        ("key is a symlink", "server.tls_key", "cannot open {key}: Too many levels of symbolic"),
        ("mismatched", "server.tls_key", "{key} is not the private key of the certificate in"),
        ("cert is a key", "server.tls_cert", "{cert} holds no PEM certificate"),
        ("key is junk", "server.tls_key", "{key} holds no PEM private key"),
        ("encrypted key", "server.tls_key", "{key} is encrypted"),
    ],
)
async def test_a_broken_pair_refuses_to_start_with_one_line(
    short_dir: Path, tls_files: TlsFiles, case: str, key: str, problem: str
) -> None:
    cert_path, key_path = tls_files.cert, tls_files.key
    if case == "missing cert":
        cert_path = short_dir / "absent.pem"
    elif case == "cert is a folder":
        cert_path = short_dir
    elif case == "missing key":
        key_path = short_dir / "absent.key"
    elif case == "key is a symlink":  # as a Kubernetes secret volume presents it
        key_path = short_dir / "link.key"
        key_path.symlink_to(tls_files.key)
    elif case == "mismatched":
        key_path = tls_files.other_key
    elif case == "cert is a key":
        cert_path = tls_files.other_key
    elif case == "key is junk":
        key_path = _junk(short_dir)
    else:
        key_path = _encrypted_copy(tls_files, short_dir)
    config = make_config(short_dir, f'tls_cert = "{cert_path}"\ntls_key = "{key_path}"')
    with pytest.raises(ConfigError) as caught:
        await serve(config)
    assert caught.value.key == key
    assert problem.format(cert=cert_path, key=key_path) in caught.value.problem
    assert one_line(caught.value).startswith(f"{short_dir / 'bridge.toml'}: {key}: ")
    assert not (short_dir / "bridge.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 0000")
async def test_an_unreadable_certificate_refuses_to_start(
    short_dir: Path, tls_files: TlsFiles
) -> None:
    cert = short_dir / "server.pem"
    shutil.copy(tls_files.cert, cert)
    cert.chmod(0)
    config = make_config(short_dir, f'tls_cert = "{cert}"\ntls_key = "{tls_files.key}"')
    with pytest.raises(ConfigError, match=r"server\.tls_cert: cannot read .*: Permission denied"):
        await serve(config)


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        ('tls_cert = "c.pem"', "server.tls_key: required when tls_cert is set"),
        ('tls_key = "k.pem"', "server.tls_key: set without tls_cert"),
    ],
)
def test_one_file_of_the_pair_alone_is_a_config_error(
    tmp_path: Path, lines: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"[server]\n{lines}\n", source="b.toml", base_dir=tmp_path)
    assert one_line(caught.value).startswith(f"b.toml: {problem}")


def test_tls_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    text = '[server]\ntls_cert = "tls/cert.pem"\ntls_key = "tls/key.pem"\n'
    server = parse_config(text, source="b.toml", base_dir=tmp_path).server
    assert (server.tls_cert, server.tls_key) == (
        tmp_path / "tls/cert.pem",
        tmp_path / "tls/key.pem",
    )
    assert not server.allow_insecure_remote


# --- listeners beyond this machine -----------------------------------------

REMOTE = 'allow_remote = true\ntcp = "0.0.0.0:0"\n'


async def test_a_remote_listener_without_tls_refuses_to_start(short_dir: Path) -> None:
    config = make_config(short_dir, REMOTE, tcp=False)
    with pytest.raises(ConfigError) as caught:
        await serve(config)
    assert one_line(caught.value) == (
        f"{short_dir / 'bridge.toml'}: server.tcp: a listener beyond this machine needs TLS: "
        "configure tls_cert and tls_key (or set allow_insecure_remote = true to send the token "
        "in clear)"
    )
    assert not (short_dir / "bridge.json").exists()
    assert not (short_dir / "bridge.sock").exists()


async def test_allow_insecure_remote_starts_in_clear_with_a_warning(
    short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(short_dir, REMOTE + "allow_insecure_remote = true", tcp=False)
    with caplog.at_level(logging.INFO, logger="oma_bridge"):
        async with running_daemon(config) as running:
            assert running.url == f"ws://127.0.0.1:{running.port}/"
            async with connect(url=running.url, token=running.token) as client:
                assert await client.list_agents()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "the tcp listener 0.0.0.0:0 is reachable beyond this machine without TLS "
        "(allow_insecure_remote = true): the token and every message cross the network in clear"
    ]
    assert all(running.token not in r.getMessage() for r in caplog.records)


async def test_a_remote_listener_with_tls_starts_without_a_warning(
    short_dir: Path, tls_files: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(short_dir, REMOTE + tls_files.server_toml(), tcp=False, agents=ECHO)
    with caplog.at_level(logging.WARNING, logger="oma_bridge"):
        async with agent_daemon(config, short_dir) as running:
            assert running.url == f"wss://127.0.0.1:{running.port}/"
            assert await echo_through(running.url, running.token, tls_files) == "hello over tls"
    assert not [r for r in caplog.records if "without TLS" in r.getMessage()]


# --- /readyz ----------------------------------------------------------------


async def test_readyz_answers_ready_without_auth_and_reveals_nothing(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        assert await raw_http(running, "/readyz") == (200, "ready")
        assert await raw_http(running, "/readyz", via="unix") == (200, "ready")
        assert await raw_http(running, "/readyz?verbose=1", host="evil.test:1") == (200, "ready")
        assert (await raw_http(running, "/readyz", method="POST"))[0] == 404
        assert (await raw_http(running, "/readyz/x"))[0] == 404


# --- client arguments -------------------------------------------------------


async def test_connect_refuses_arguments_that_cannot_work(short_dir: Path) -> None:
    blank = short_dir / "blank"
    blank.write_text("  \n")
    url = "wss://127.0.0.1:1/"  # never reached: every case fails before connecting
    cases: list[tuple[dict[str, object], str]] = [
        ({"token": "t" * 40, "token_file": blank}, "give token or token_file, not both"),
        ({"token_file": blank}, f"the token file {blank} is empty"),
        ({"token_file": short_dir / "none"}, f"cannot read the token file {short_dir / 'none'}"),
        ({"ca_file": short_dir / "none.pem"}, f"cannot read the CA file {short_dir / 'none.pem'}"),
        ({"ca_file": blank}, f"the CA file {blank} holds no PEM certificate"),
    ]
    for options, message in cases:
        with pytest.raises(ConnectOptionError) as caught:
            async with connect(url=url, **options):
                pass
        assert str(caught.value).startswith(message), options
