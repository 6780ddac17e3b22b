"""``oma-bridge tls init`` and the walk of docs/deploy.md, "TLS in five minutes", step by step.

The walk: ``tls init --host NAME`` makes a local CA and a server certificate
in the state folder (keys 0600, the folder 0700) and writes ``tls_cert`` and
``tls_key`` into ``[server]`` of the user's config (here a new one, made
from the built-in config, so its TCP listener is loopback 47683 or the next
free port); a token file goes beside it; ``oma-bridge serve`` then speaks
``wss://``; a client with ``--ca-file`` (the CLI and the Python client)
connects, one without it is told what to do.  Loopback only: no traffic
leaves the machine.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from oma_bridge.client import connect

from .user_daemon import serving, user_env

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="the openssl command makes the certificates"
)


@pytest.fixture
def root() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="omtl-", dir="/tmp"))  # short: a socket path's limit
    for name in ("run", "config", "state"):
        (base / name).mkdir(mode=0o700)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _cli(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "oma_bridge.cli", *args]
    return subprocess.run(
        argv, env=user_env(root, **env), capture_output=True, text=True, timeout=60
    )


def _tls(root: Path) -> Path:
    return root / "state" / "oma-bridge" / "tls"


def _config(root: Path) -> Path:
    return root / "config" / "oma-bridge" / "config.toml"


async def _python_client(url: str, token: Path, ca: Path) -> str:
    async with connect(url=url, token_file=token, ca_file=ca) as client:
        agent = await client.open("echo")
        return (await agent.run("hello")).output


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_walk_tls_init_serve_and_a_client_with_its_ca_file(root: Path) -> None:
    # 1. tls init.
    done = _cli(root, "tls", "init", "--host", "bridge.test")
    assert (done.returncode, done.stderr) == (0, ""), done
    tls = _tls(root)
    ca, cert, key = tls / "ca.pem", tls / "server.pem", tls / "server.key"
    assert _mode(tls) == 0o700
    assert {p.name: _mode(p) for p in tls.iterdir()} == {
        name: 0o600 for name in ("ca.pem", "ca.key", "server.pem", "server.key")
    }
    assert f"--ca-file {ca}\n" in done.stdout
    names = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert re.findall(r"(?:DNS|IP Address):[^,\s]+", names) == [
        "DNS:localhost",
        "IP Address:127.0.0.1",
        "IP Address:0:0:0:0:0:0:0:1",
        "DNS:bridge.test",
    ]
    config = _config(root)
    server = tomllib.loads(config.read_text())["server"]
    assert (server["tls_cert"], server["tls_key"]) == (str(cert), str(key))
    assert server["tcp"] == "127.0.0.1:47683"  # a new config starts as the built-in one
    assert "`oma-bridge tls init`" in config.read_text().splitlines()[0]

    # 2. A token file for clients that come by URL, named in [server].
    token = config.parent / "token"
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(secrets.token_urlsafe(32) + "\n")
    config.write_text(config.read_text().replace("[server]\n", '[server]\ntoken_file = "token"\n'))

    # 3. serve: the TCP listener speaks wss://.
    with serving(root) as discovery:
        url = discovery["url"]
        assert url.startswith("wss://127.0.0.1:")
        port = url.rsplit(":", 1)[1].rstrip("/")
        # 4. A client with --ca-file, by name and by address.
        for host in ("localhost", "127.0.0.1"):
            remote = ("--url", f"wss://{host}:{port}/", "--token-file", str(token))
            hi = _cli(root, "run", "echo", "hi", *remote, "--ca-file", str(ca))
            assert (hi.returncode, hi.stdout, hi.stderr) == (0, "hi\n", ""), hi
        refused = _cli(root, "run", "echo", "hi", *remote)
        assert refused.returncode == 3
        assert "cannot verify the TLS certificate" in refused.stderr
        assert "--ca-file" in refused.stderr
        # The Python client, with the same three.
        assert anyio.run(_python_client, f"wss://localhost:{port}/", token, ca) == "hello"


def test_a_second_init_keeps_the_ca_and_the_config_and_renews_the_certificate(
    root: Path,
) -> None:
    assert _cli(root, "tls", "init").returncode == 0
    tls = _tls(root)
    ca, old_cert = (tls / "ca.pem").read_bytes(), (tls / "server.pem").read_bytes()
    config = _config(root).read_text()
    again = _cli(root, "tls", "init", "--host", "10.1.2.3")
    assert again.returncode == 0, again
    assert again.stdout.startswith(f"kept the local CA {tls / 'ca.pem'}")
    assert "already in [server]" in again.stdout
    assert (tls / "ca.pem").read_bytes() == ca
    assert (tls / "server.pem").read_bytes() != old_cert
    assert _config(root).read_text() == config
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tls / "ca.pem"), str(tls / "server.pem")],
        capture_output=True,
        text=True,
    )
    assert verified.returncode == 0, verified.stderr


def test_a_config_of_the_user_s_own_gets_the_lines_under_its_server_header(root: Path) -> None:
    config = _config(root)
    config.parent.mkdir()
    mine = (
        '# mine\n[agents.echo]\nkind = "llm"\nprovider = "echo"\nmodel = "echo-1"\n\n'
        '[server]  # the listeners\nsocket = "auto"\n'
    )
    config.write_text(mine)
    config.chmod(0o640)
    inode = config.stat().st_ino
    assert _cli(root, "tls", "init").returncode == 0
    text = config.read_text()
    tls = _tls(root)
    assert text == mine.replace(
        "[server]  # the listeners\n",
        f'[server]  # the listeners\ntls_cert = "{tls / "server.pem"}"\n'
        f'tls_key = "{tls / "server.key"}"\n',
    )
    # The user's file, edited in place: its inode and mode stay.
    assert (config.stat().st_ino, _mode(config)) == (inode, 0o640)


def test_a_config_it_must_not_change_gets_the_lines_printed(root: Path) -> None:
    config = _config(root)
    config.parent.mkdir()
    theirs = '[server]\ntls_cert = "/etc/mine.pem"\ntls_key = "/etc/mine.key"\n'
    config.write_text(theirs)
    done = _cli(root, "tls", "init")
    assert done.returncode == 0
    assert "[server] tls_cert is set already, to another file" in done.stderr
    tls = _tls(root)
    assert f'[server]\ntls_cert = "{tls / "server.pem"}"\n' in done.stdout
    assert config.read_text() == theirs
    # --no-config: only the files and the lines (a config mounted read-only).
    printed = _cli(root, "tls", "init", "--no-config", "--config", str(root / "none.toml"))
    assert (printed.returncode, printed.stderr) == (0, "")
    assert "put these lines in [server]" in printed.stdout
    assert not (root / "none.toml").exists()


def test_bad_hosts_and_a_missing_openssl_say_what_to_do(root: Path) -> None:
    bad = _cli(root, "tls", "init", "--host", "a,DNS:evil")
    assert bad.returncode == 2
    assert "--host 'a,DNS:evil': not a DNS name or an IP address" in bad.stderr
    assert not _tls(root).exists()  # checked before anything is made
    missing = _cli(root, "tls", "init", PATH=str(root / "empty"))
    assert missing.returncode == 1
    assert "the openssl command is needed" in missing.stderr
    assert "apt install openssl" in missing.stderr
