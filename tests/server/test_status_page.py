"""``GET /ui`` (PROTOCOL §16) and the Origin rule that lets the page talk to its daemon.

The page in a real browser is tested in ``tests/ui``; here: what the daemon
answers to plain HTTP and to websocket upgrades from the page's origin.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from oma_bridge._version import __version__
from oma_bridge.client import client_ssl_context
from oma_bridge.server import RunningServer

from .helpers import (
    UPGRADE_HEADERS,
    http_exchange,
    initialize,
    make_config,
    raw_http,
    running_daemon,
)

if TYPE_CHECKING:
    from conftest import TlsFiles

pytestmark = pytest.mark.anyio


def _csp_hash(body: str, tag: str) -> str:
    (source,) = re.findall(rf"<{tag}>(.*?)</{tag}>", body, flags=re.DOTALL)
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


def _directives(policy: str) -> dict[str, str]:
    pairs = (item.strip().partition(" ") for item in policy.split(";"))
    return {name: value for name, _, value in pairs}


async def test_the_page_is_served_on_tcp_without_a_token_with_strict_headers(
    short_dir: Path,
) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        status, headers, body = await http_exchange(running, "/ui")
        assert status == 200
        assert headers["content-type"] == ["text/html; charset=utf-8"]
        assert headers["x-content-type-options"] == ["nosniff"]
        assert headers["referrer-policy"] == ["no-referrer"]
        assert headers["cache-control"] == ["no-store"]
        (policy,) = headers["content-security-policy"]
        csp = _directives(policy)
        assert csp["default-src"] == "'none'"
        # The one script and the one style, by hash: nothing inline beyond them runs.
        assert csp["script-src"] == _csp_hash(body, "script")
        assert csp["style-src"] == _csp_hash(body, "style")
        assert csp["connect-src"] == f"'self' ws://127.0.0.1:{running.port}"
        assert csp["frame-ancestors"] == "'none'"
        assert csp["require-trusted-types-for"] == "'script'"
        # Self-contained, and no secret in it.
        assert body.startswith("<!doctype html>")
        assert running.token not in body and running.token not in str(headers)
        assert f'content="{__version__}"' in body
        assert not re.search(r"""(src|href)\s*=\s*["'](?!data:)""", body)
        assert "http://" not in body and "https://" not in body
        assert " style=" not in body  # a style attribute would need 'unsafe-inline'


async def test_the_page_takes_the_host_check_and_only_get_on_tcp(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        port = running.port
        status, headers, _ = await http_exchange(running, "/ui", host=f"localhost:{port}")
        assert status == 200
        assert f"connect-src 'self' ws://localhost:{port}" in headers["content-security-policy"][0]
        assert (await raw_http(running, "/ui", host=f"[::1]:{port}"))[0] == 200
        assert (await raw_http(running, "/ui", host=f"evil.test:{port}"))[0] == 403
        assert (await raw_http(running, "/ui", host="127.0.0.1"))[0] == 403
        assert (await raw_http(running, "/ui", host=None))[0] == 403
        assert (await raw_http(running, "/ui", method="POST"))[0] == 404
        assert (await raw_http(running, "/ui/"))[0] == 404
        assert (await raw_http(running, "/ui/index.html"))[0] == 404
        # The token belongs in the fragment: in the query it is refused as anywhere.
        assert (await raw_http(running, f"/ui?token={running.token}"))[0] == 400


async def test_the_unix_socket_has_no_page(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        status, body = await raw_http(running, "/ui", via="unix")
        assert (status, body) == (404, "Not Found\n")


def _subprotocols(running: RunningServer) -> list[str]:
    return ["oma-bridge.v1", f"oma-bridge.auth.{running.token}"]


async def test_the_listeners_own_origin_is_accepted_for_the_websocket(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        assert running.url is not None
        port = running.port
        for origin in (
            f"http://127.0.0.1:{port}",
            f"http://localhost:{port}",
            f"http://[::1]:{port}",
        ):
            async with connect(
                running.url,
                origin=origin,  # type: ignore[arg-type]
                subprotocols=_subprotocols(running),  # type: ignore[arg-type]
            ) as ws:
                assert ws.subprotocol == "oma-bridge.v1"
                await initialize(ws)
        # The Origin rule does not stand in for the token.
        headers = [*UPGRADE_HEADERS, ("Origin", f"http://127.0.0.1:{port}")]
        assert (await raw_http(running, "/", headers))[0] == 401


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.test:{port}",
        "http://127.0.0.1:{other}",
        "http://127.0.0.1",
        "https://127.0.0.1:{port}",
        "ws://127.0.0.1:{port}",
        "http://127.0.0.1:{port}/",
        "HTTP://127.0.0.1:{port}",
        "null",
    ],
)
async def test_a_foreign_origin_is_still_403(short_dir: Path, origin: str) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        assert running.port is not None
        value = origin.format(port=running.port, other=running.port + 1)
        bearer = ("Authorization", f"Bearer {running.token}")
        headers = [*UPGRADE_HEADERS, bearer, ("Origin", value)]
        assert (await raw_http(running, "/", headers))[0] == 403, value
        # Two Origin headers, one of them the daemon's own: still 403.
        own = ("Origin", f"http://127.0.0.1:{running.port}")
        assert (await raw_http(running, "/", [*UPGRADE_HEADERS, bearer, own, own]))[0] == 403


async def test_the_tcp_origin_means_nothing_on_the_unix_socket(short_dir: Path) -> None:
    async with running_daemon(make_config(short_dir)) as running:
        headers = [*UPGRADE_HEADERS, ("Origin", f"http://127.0.0.1:{running.port}")]
        assert (await raw_http(running, "/", headers, via="unix"))[0] == 403
        assert (await raw_http(running, "/", UPGRADE_HEADERS, via="unix"))[0] == 101


async def test_with_tls_the_page_and_its_origin_are_https(
    short_dir: Path, tls_files: TlsFiles
) -> None:
    async with running_daemon(make_config(short_dir, tls_files.server_toml())) as running:
        assert running.url is not None and running.url.startswith("wss://")
        context = client_ssl_context(tls_files.ca)
        port = running.port
        async with httpx.AsyncClient(verify=context) as http:
            answer = await http.get(f"https://127.0.0.1:{port}/ui")
        assert answer.status_code == 200
        assert (
            f"connect-src 'self' wss://127.0.0.1:{port};"
            in answer.headers["content-security-policy"]
        )
        async with connect(
            running.url,
            ssl=context,
            origin=f"https://127.0.0.1:{port}",  # type: ignore[arg-type]
            subprotocols=_subprotocols(running),  # type: ignore[arg-type]
        ) as ws:
            await initialize(ws)
        with pytest.raises(InvalidStatus) as refused:
            await connect(
                running.url,
                ssl=context,
                origin=f"http://127.0.0.1:{port}",  # type: ignore[arg-type]
                subprotocols=_subprotocols(running),  # type: ignore[arg-type]
            )
        assert refused.value.response.status_code == 403
