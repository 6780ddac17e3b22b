"""The checks made before the WebSocket upgrade (PROTOCOL §2), over real sockets."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from websockets.asyncio.client import connect, unix_connect
from websockets.exceptions import InvalidStatus

from oma_bridge.server import RunningServer

from .helpers import UPGRADE_HEADERS, initialize, make_config, raw_http, running_daemon

pytestmark = pytest.mark.anyio


def bearer(running: RunningServer) -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {running.token}")]


async def test_healthz_answers_ok_without_auth(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        assert await raw_http(running, "/healthz") == (200, "ok")
        assert await raw_http(running, "/healthz", via="unix") == (200, "ok")
        # Even on a request that would otherwise be refused.
        assert await raw_http(running, "/healthz", host="evil.test:1") == (200, "ok")


async def test_plain_http_is_404_with_or_without_token(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        assert (await raw_http(running, "/"))[0] == 404
        assert (await raw_http(running, "/status", bearer(running)))[0] == 404
        assert (await raw_http(running, "/", via="unix"))[0] == 404
        assert (await raw_http(running, "/healthz", method="POST"))[0] == 404
        assert (await raw_http(running, "/", UPGRADE_HEADERS, method="POST"))[0] == 404


async def test_token_in_query_is_400_even_when_correct(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        target = f"/?token={running.token}"
        status, body = await raw_http(running, target, UPGRADE_HEADERS + bearer(running))
        assert status == 400
        assert running.token not in body
        assert (await raw_http(running, "/?a=1&token=x", UPGRADE_HEADERS, via="unix"))[0] == 400


async def test_token_by_bearer_header(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        assert running.url is not None
        async with connect(running.url, additional_headers=bearer(running)) as ws:
            assert ws.subprotocol is None
            await initialize(ws)


async def test_token_by_subprotocol_selects_v1_and_never_echoes_it(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        assert running.url is not None
        offered = ["oma-bridge.v1", f"oma-bridge.auth.{running.token}"]
        async with connect(running.url, subprotocols=offered) as ws:  # type: ignore[arg-type]
            assert ws.subprotocol == "oma-bridge.v1"
            assert ws.response is not None
            assert ws.response.headers.get_all("Sec-WebSocket-Protocol") == ["oma-bridge.v1"]
            assert running.token not in str(ws.response.headers)
            await initialize(ws)


async def test_auth_subprotocol_without_v1_is_400(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        headers = [*UPGRADE_HEADERS, ("Sec-WebSocket-Protocol", f"oma-bridge.auth.{running.token}")]
        assert (await raw_http(running, "/", headers))[0] == 400


@pytest.mark.parametrize(
    "credentials",
    [
        [],
        [("Authorization", "Bearer " + "0" * 64)],
        [("Authorization", "Basic abc")],
        [("Sec-WebSocket-Protocol", "oma-bridge.v1, oma-bridge.auth." + "0" * 64)],
    ],
)
async def test_tcp_without_the_right_token_is_401(
    short_dir: Path, credentials: list[tuple[str, str]]
) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        status, body = await raw_http(running, "/", UPGRADE_HEADERS + credentials)
        assert (status, body) == (401, "Unauthorized\n")


async def test_unix_needs_a_token_only_when_configured(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir, tcp=False)) as running:
        assert (await raw_http(running, "/", UPGRADE_HEADERS, via="unix"))[0] == 101
        # A credential that is presented is checked, even where none is needed.
        wrong = [("Authorization", "Bearer " + "0" * 64)]
        assert (await raw_http(running, "/", UPGRADE_HEADERS + wrong, via="unix"))[0] == 401
    config = make_config(short_dir, "require_token_on_unix = true", tcp=False)
    async with running_daemon(config) as running:
        assert (await raw_http(running, "/", UPGRADE_HEADERS, via="unix"))[0] == 401
        right = UPGRADE_HEADERS + bearer(running)
        assert (await raw_http(running, "/", right, via="unix"))[0] == 101


async def test_host_must_be_loopback_with_the_listening_port(short_dir: Path) -> None:
    config = make_config(short_dir, 'allowed_hosts = ["Bridge.Test"]')
    async with running_daemon(config) as running:
        port = running.port
        assert port is not None
        auth = UPGRADE_HEADERS + bearer(running)
        for good in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            f"[::1]:{port}",
            f"bridge.test:{port}",
        ):
            assert (await raw_http(running, "/", auth, host=good))[0] == 101, good
        for bad in (
            f"evil.test:{port}",
            "127.0.0.1",
            "localhost",
            "[::1]",
            f"127.0.0.1:{port + 1}",
        ):
            assert (await raw_http(running, "/", auth, host=bad))[0] == 403, bad
        assert (await raw_http(running, "/", auth, host=None))[0] in (400, 403)


async def test_origin_absent_or_allowed(short_dir: Path) -> None:
    config = make_config(short_dir, 'allowed_origins = ["vscode-webview://abc"]')
    async with running_daemon(config) as running:
        auth = UPGRADE_HEADERS + bearer(running)
        ok = [("Origin", "vscode-webview://abc")]
        assert (await raw_http(running, "/", auth + ok))[0] == 101
        foreign = [("Origin", "https://evil.test")]
        assert (await raw_http(running, "/", auth + foreign))[0] == 403
        assert (await raw_http(running, "/", auth + ok + ok))[0] == 403
        assert (await raw_http(running, "/", auth + ok + foreign))[0] == 403
        # Also on the unix socket: a browser page may reach it through a proxy.
        assert (await raw_http(running, "/", UPGRADE_HEADERS + foreign, via="unix"))[0] == 403


async def test_connection_cap_counts_every_listener(short_dir: Path) -> None:
    config = make_config(short_dir, "max_connections = 2")
    async with running_daemon(config) as running:
        assert running.url is not None and running.socket_path is not None
        auth = bearer(running)
        async with unix_connect(str(running.socket_path)) as first:
            async with connect(running.url, additional_headers=auth) as second:
                await initialize(first)
                await initialize(second)
                with pytest.raises(InvalidStatus) as refused:
                    async with connect(running.url, additional_headers=auth):
                        pass
                assert refused.value.response.status_code == 503
                with pytest.raises(InvalidStatus) as refused:
                    async with unix_connect(str(running.socket_path)):
                        pass
                assert refused.value.response.status_code == 503
            # A slot is free again once a connection ends.
            async with connect(running.url, additional_headers=auth) as third:
                await initialize(third)


async def test_unauthenticated_clients_do_not_take_slots(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir, "max_connections = 1")) as running:
        for _ in range(3):
            assert (await raw_http(running, "/", UPGRADE_HEADERS))[0] == 401
        assert running.url is not None
        async with connect(running.url, additional_headers=bearer(running)) as ws:
            await initialize(ws)


async def test_the_token_never_reaches_a_log_line(
    short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with running_daemon(make_config(short_dir)) as running:
        token = running.token
        assert running.url is not None
        await raw_http(running, f"/?token={token}", UPGRADE_HEADERS)
        await raw_http(running, "/", [*UPGRADE_HEADERS, ("Authorization", f"Bearer {token}x")])
        await raw_http(running, "/", UPGRADE_HEADERS + bearer(running), host="evil.test:1")
        await raw_http(running, "/nothing", bearer(running))
        proto = [*UPGRADE_HEADERS, ("Sec-WebSocket-Protocol", f"oma-bridge.auth.{token}")]
        await raw_http(running, "/", proto)
        async with connect(running.url, additional_headers=bearer(running)) as ws:
            await initialize(ws)
        offered = ["oma-bridge.v1", f"oma-bridge.auth.{token}"]
        async with connect(running.url, subprotocols=offered) as ws:  # type: ignore[arg-type]
            await initialize(ws)
    daemon_records = [r for r in caplog.records if not r.name.startswith("websockets.client")]
    assert any("refused" in r.getMessage() for r in daemon_records)
    formatter = logging.Formatter("%(name)s %(message)s")
    for record in daemon_records:
        assert token not in formatter.format(record)
