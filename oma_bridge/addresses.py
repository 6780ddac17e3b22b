"""Which host names stay on this machine: one test, for the listeners and the remote agents.

A TCP listener on a loopback address needs no ``allow_remote`` (docs/contract.md
§1), and a remote ACP agent reached over plain ``ws://`` must be on one
(PROTOCOL §21): whatever is sent to a loopback address never crosses a network.
The standard library only, and the lowest layer.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback_host"]


def is_loopback_host(host: str) -> bool:
    """``localhost``, or an IPv4/IPv6 loopback literal (``127.0.0.0/8``, ``::1``; brackets allowed).

    Any other name is not loopback, whatever it resolves to today: a name can
    be pointed elsewhere later, an address literal cannot.
    """
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
