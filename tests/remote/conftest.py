"""Fixtures of the remote-agent tests: B, the proxy, A (see ``harness.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .harness import (
    SCENARIO_AGENT,
    Pair,
    TcpProxy,
    local_daemon,
    port_of,
    remote_daemon,
    remote_profile,
    token_file,
)

if TYPE_CHECKING:
    from conftest import TlsFiles

#: A's send_timeout_s: how soon a remote that stops answering is noticed.
A_SEND_TIMEOUT_S = 4.0


def b_agents(a_work: Path) -> str:
    """B's profile beyond the facade harness's: the scenario agent, whose fs requests go to
    B's client (A), in A's folder (the same machine: one folder for both daemons' checks)."""
    return f"""
[agents.scenario_fs]
kind = "acp"
command = "@python"
args = [{str(SCENARIO_AGENT)!r}]
cwd = {str(a_work)!r}
fs = "client"
"""


@pytest.fixture
def pair(tmp_path: Path, tls_files: TlsFiles) -> Iterator[Pair]:
    """B (TLS, a token), a proxy in front of it, and A, whose profiles reach B:

    * ``remote``: B's ``demo``, through the proxy;
    * ``remote_scenario``: B's ``scenario_fs``, its fs requests forwarded to A's editor;
    * ``wrong_token``, ``no_ca``, ``other_name``, ``no_agent``: connections that cannot work.
    """
    token = token_file(tmp_path)
    other = tmp_path / "other.token"
    other.write_text("f" * 64)
    other.chmod(0o600)
    a_work = tmp_path / "a" / "work"
    a_work.mkdir(parents=True)
    with remote_daemon(tmp_path / "b", tls_files.server_toml(), token, b_agents(a_work)) as b:
        port = port_of(b)
        proxy = TcpProxy(port)
        try:
            url = f"wss://127.0.0.1:{port}/acp"
            ca = tls_files.ca
            agents = "".join(
                (
                    remote_profile("remote", f"{url}/demo", token=token, ca=ca, remote_cwd=b.work),
                    remote_profile(
                        "remote_scenario",
                        f"{url}/scenario_fs",
                        token=token,
                        ca=ca,
                        remote_cwd=None,
                        extra='fs = "client"\n',
                    ),
                    remote_profile(
                        "wrong_token", f"{url}/demo", token=other, ca=ca, remote_cwd=None
                    ),
                    remote_profile("no_ca", f"{url}/demo", token=token, ca=None, remote_cwd=None),
                    remote_profile(
                        "other_name",
                        f"wss://127.0.0.2:{port}/acp/demo",  # B's certificate names 127.0.0.1
                        token=token,
                        ca=ca,
                        remote_cwd=None,
                    ),
                    remote_profile("no_agent", f"{url}/nope", token=token, ca=ca, remote_cwd=None),
                )
            )
            server = f"send_timeout_s = {A_SEND_TIMEOUT_S}\n"
            with local_daemon(tmp_path / "a", agents, server=server) as a:
                yield Pair(a, b, proxy, token)
        finally:
            proxy.close()
