"""The token and every check made on an HTTP request before the WebSocket upgrade.

:class:`RequestPolicy` is sans-I/O: it looks at a request's target and
headers and says what to answer (:class:`Answer`), or ``None`` to let the
upgrade go on.  The order of the checks, first match wins:

1. ``GET /healthz`` → 200 ``ok`` (the process is alive) and ``GET /readyz``
   → 200 ``ready`` once every listener is bound, 503 ``stopping`` from the
   moment a stop begins (503 ``starting`` before): no authentication,
   nothing else revealed (any other method on them is a plain request: 404);
2. a ``token`` in the query string → 400, even a correct one: a token in a
   URL ends up in histories and proxy logs, so the client is told loudly
   whatever else the request is;
3. ``GET /ui``, the status page (PROTOCOL §16): on the TCP listener, once
   the ``Host`` check of 5 passed, 200 and the page (public static content:
   no token needed); on the unix socket 404;
   ``GET /metrics`` (PROTOCOL §20.3): on the TCP listener of a daemon that
   keeps metrics, once the ``Host`` check of 5 and the ``Origin`` check of 6
   passed, and the token by ``Authorization: Bearer`` (401 without it, unless
   ``metrics_public = true``; a Bearer that is presented is always checked),
   200 and the Prometheus text format; elsewhere 404;
4. not a WebSocket upgrade (not a GET with ``Upgrade: websocket``) → 404;
5. TCP only: ``Host`` must be ``127.0.0.1:PORT``, ``localhost:PORT``,
   ``[::1]:PORT``, the listener's own IP address, or a configured name, with
   the port the request came in on → else 403 (DNS rebinding);
6. ``Origin`` absent, exactly one of ``allowed_origins``, or (TCP) the
   listener's own origin, ``http://NAME:PORT`` (``https`` with TLS) for a
   NAME of the Host check and the port the request came in on, which is
   where the status page runs → else 403 (two Origin headers: 403);
7. offering ``oma-bridge.auth.<token>`` without ``oma-bridge.v1`` → 400;
8. the token, by ``Authorization: Bearer`` or by subprotocol, compared with
   :func:`hmac.compare_digest`: required on TCP, and on the unix socket when
   ``require_token_on_unix`` is set; a credential that is presented is
   always checked, even where none is required → 401;
9. an upgrade while the daemon is stopping → 503.

The connection limit (503) comes after these, in the listener, so that only
authenticated clients learn that the daemon is busy.  Rejection bodies are the
bare status phrase; the reason goes to the daemon's log, and neither ever
contains the token.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass
from http import HTTPStatus
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from websockets.datastructures import Headers
from websockets.exceptions import InvalidHeader
from websockets.headers import parse_subprotocol

from oma_bridge.server.config import ServerConfig, ServerSection
from oma_bridge.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from oma_bridge.server.private_file import open_private_file
from oma_bridge.server.ui import UI_PATH, page
from oma_bridge.wire.acp_lines import ACP_LINES_SUBPROTOCOL
from oma_bridge.wire.codes import AUTH_SUBPROTOCOL_PREFIX, SUBPROTOCOL

__all__ = [
    "MIN_TOKEN_LENGTH",
    "Answer",
    "ListenerKind",
    "Readiness",
    "RequestPolicy",
    "acp_target",
    "generate_token",
    "load_token",
    "select_subprotocol",
]

MIN_TOKEN_LENGTH = 32
HEALTHZ_PATH = "/healthz"
READYZ_PATH = "/readyz"
METRICS_PATH = "/metrics"

ListenerKind = Literal["unix", "tcp"]
#: What ``GET /readyz`` says: ``ready`` between start-up and the stop.
Readiness = Literal["starting", "ready", "stopping"]

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer instead of the upgrade: status, body, a reason for the log, headers."""

    status: HTTPStatus
    body: str
    reason: str
    #: Headers beyond the plain-text defaults (a ``Content-Type`` replaces the default one).
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def refuse(cls, status: HTTPStatus, reason: str) -> Answer:
        return cls(status, f"{status.phrase}\n", reason)


HEALTHY = Answer(HTTPStatus.OK, "ok", "health check")
#: Never cached: each scrape reads the figures of its moment.
_METRICS_HEADERS = (
    ("Content-Type", METRICS_CONTENT_TYPE),
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
)
_READINESS: dict[Readiness, Answer] = {
    "starting": Answer(HTTPStatus.SERVICE_UNAVAILABLE, "starting", "readiness check"),
    "ready": Answer(HTTPStatus.OK, "ready", "readiness check"),
    "stopping": Answer(HTTPStatus.SERVICE_UNAVAILABLE, "stopping", "readiness check"),
}


def generate_token() -> str:
    """A fresh token: 32 random bytes as hex."""
    return secrets.token_hex(32)


def load_token(config: ServerConfig) -> str:
    """The token of this start: from ``token_file`` when set, else a fresh one.

    The file must belong to the daemon's user and be readable by nobody else
    (mode 0600 or 0400); its content, stripped, is the token: at least 32
    visible ASCII characters.  Any problem is a :class:`ConfigError` about
    ``server.token_file``; the content is never part of a message.
    """
    path = config.server.token_file
    if path is None:
        return generate_token()
    key = "server.token_file"
    with open_private_file(path, config, key) as fd, os.fdopen(fd, "rb", closefd=False) as file:
        raw = file.read(64 * 1024)
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise config.error(key, "the token must be ASCII") from None
    if len(token) < MIN_TOKEN_LENGTH:
        raise config.error(key, f"the token must have at least {MIN_TOKEN_LENGTH} characters")
    if not all("!" <= char <= "~" for char in token):
        raise config.error(key, "the token must not contain spaces or control characters")
    return token


ACP_PATH = "/acp"


def acp_target(path: str) -> str | None:
    """``""`` for ``/acp``, the profile for ``/acp/<profile>``, ``None`` for any other path."""
    route = path.split("?", 1)[0]
    if route == ACP_PATH or route == ACP_PATH + "/":
        return ""
    if route.startswith(ACP_PATH + "/"):
        return unquote(route[len(ACP_PATH) + 1 :])
    return None


#: The subprotocol of the ACP facade (ACP's WebSocket transport).
ACP_SUBPROTOCOL = "acp.v1"


def select_subprotocol(offered: list[str] | tuple[str, ...], path: str = "/") -> str | None:
    """The protocol's own name when offered (``acp.v1`` on ``/acp``), else none.

    On ``/acp``, the shim's ``oma-bridge.acp-lines`` comes first when offered:
    frames of several messages on that connection only (D24); a client that
    offers ``acp.v1`` alone gets ``acp.v1``'s one message per frame.  The
    auth entry (``oma-bridge.auth.<token>``) is never selected, so the token
    is never echoed.
    """
    if acp_target(path) is not None:
        if ACP_LINES_SUBPROTOCOL in offered:
            return ACP_LINES_SUBPROTOCOL
        wanted = ACP_SUBPROTOCOL
    else:
        wanted = SUBPROTOCOL
    return wanted if wanted in offered else None


def _same(presented: str, token: bytes) -> bool:
    try:
        candidate = presented.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(candidate, token)


class RequestPolicy:
    """The pre-upgrade checks of one daemon (see the module docstring for the order)."""

    def __init__(self, token: str, settings: ServerSection) -> None:
        #: Set by the server: ``ready`` once every listener is bound,
        #: ``stopping`` from the moment a stop begins.
        self.readiness: Readiness = "starting"
        #: The declared profiles, for ``/acp/<profile>`` (404 for another name).
        self.profiles: Callable[[], Collection[str]] | None = None
        #: ``GET /metrics``: the figures in the Prometheus text format (404 without).
        self.metrics: Callable[[], str] | None = None
        self._token = token.encode("ascii")
        self._settings = settings
        self._origins = frozenset(settings.allowed_origins)
        # The listener's own address is a fine Host: an IP literal cannot be rebound.
        extra = list(settings.allowed_hosts)
        if settings.tcp is not None:
            try:
                address = ipaddress.ip_address(settings.tcp.host)
            except ValueError:
                pass
            else:
                if not address.is_unspecified:
                    extra.append(f"[{address}]" if address.version == 6 else str(address))
        self._host_names = frozenset((*_LOOPBACK_NAMES, *extra))

    def check(
        self,
        target: str,
        headers: Headers,
        listener: ListenerKind,
        port: int | None,
        method: str = "GET",
    ) -> Answer | None:
        """What to answer to a ``method`` request for ``target``; ``None`` lets the upgrade go on.

        ``port`` is the local port the request arrived on (TCP only).
        """
        url = urlsplit(target)
        if method == "GET" and url.path == HEALTHZ_PATH:
            return HEALTHY
        if method == "GET" and url.path == READYZ_PATH:
            return _READINESS[self.readiness]
        if any(name == "token" for name, _ in parse_qsl(url.query, keep_blank_values=True)):
            return Answer.refuse(HTTPStatus.BAD_REQUEST, "token in the query string")
        if method == "GET" and url.path == UI_PATH and not _is_upgrade(headers):
            return self._status_page(headers, listener, port)
        if method == "GET" and url.path == METRICS_PATH and not _is_upgrade(headers):
            return self._metrics(headers, listener, port)
        if method != "GET" or not _is_upgrade(headers):
            return Answer.refuse(HTTPStatus.NOT_FOUND, "not a WebSocket upgrade")
        if listener == "tcp" and not self._host_ok(headers, port):
            return Answer.refuse(HTTPStatus.FORBIDDEN, "Host not allowed")
        origins = headers.get_all("Origin")
        if len(origins) > 1 or (origins and not self._origin_ok(origins[0], listener, port)):
            return Answer.refuse(HTTPStatus.FORBIDDEN, "Origin not allowed")
        acp = acp_target(url.path)
        refused = self._check_credentials(headers, listener, acp=acp is not None)
        if refused is None and acp and self.profiles is not None and acp not in self.profiles():
            # Only after the credentials: the profile names are not for strangers.
            return Answer.refuse(HTTPStatus.NOT_FOUND, f"no agent profile named {acp!r}")
        if refused is None and self.readiness == "stopping":
            # Only a client that passed every check learns why (as for the connection limit).
            return Answer.refuse(HTTPStatus.SERVICE_UNAVAILABLE, "the daemon is stopping")
        return refused

    def _status_page(self, headers: Headers, listener: ListenerKind, port: int | None) -> Answer:
        if listener != "tcp":
            return Answer.refuse(HTTPStatus.NOT_FOUND, "the status page is on the TCP listener")
        if not self._host_ok(headers, port):
            return Answer.refuse(HTTPStatus.FORBIDDEN, "Host not allowed")
        body, extra = page(headers["Host"], tls=self._settings.tls_cert is not None)
        return Answer(HTTPStatus.OK, body, "status page", extra)

    def _metrics(self, headers: Headers, listener: ListenerKind, port: int | None) -> Answer:
        render = self.metrics
        if listener != "tcp" or render is None:
            return Answer.refuse(HTTPStatus.NOT_FOUND, "the metrics are on the TCP listener")
        if not self._host_ok(headers, port):
            return Answer.refuse(HTTPStatus.FORBIDDEN, "Host not allowed")
        origins = headers.get_all("Origin")
        if len(origins) > 1 or (origins and not self._origin_ok(origins[0], listener, port)):
            return Answer.refuse(HTTPStatus.FORBIDDEN, "Origin not allowed")
        presented = _bearer(headers)
        if isinstance(presented, Answer):
            return presented
        if presented is None and not self._settings.metrics_public:
            return Answer.refuse(HTTPStatus.UNAUTHORIZED, "no token")
        if presented is not None and not _same(presented, self._token):
            return Answer.refuse(HTTPStatus.UNAUTHORIZED, "wrong token")
        return Answer(HTTPStatus.OK, render(), "metrics", _METRICS_HEADERS)

    def _origin_ok(self, origin: str, listener: ListenerKind, port: int | None) -> bool:
        """One of ``allowed_origins``, or the TCP listener's own: its status page (§16)."""
        if origin in self._origins:
            return True
        if listener != "tcp" or port is None:
            return False
        scheme = "https" if self._settings.tls_cert is not None else "http"
        return any(origin == f"{scheme}://{name}:{port}" for name in self._host_names)

    def _host_ok(self, headers: Headers, port: int | None) -> bool:
        hosts = headers.get_all("Host")
        if len(hosts) != 1 or port is None:
            return False
        name, sep, host_port = hosts[0].rpartition(":")
        if not sep or not host_port.isdigit() or int(host_port) != port:
            return False  # no port at all (an IPv6 literal alone ends in "]")
        return name.lower() in self._host_names

    def _check_credentials(
        self, headers: Headers, listener: ListenerKind, *, acp: bool = False
    ) -> Answer | None:
        try:
            offered = [
                p
                for value in headers.get_all("Sec-WebSocket-Protocol")
                for p in parse_subprotocol(value)
            ]
        except InvalidHeader:
            return Answer.refuse(HTTPStatus.BAD_REQUEST, "malformed Sec-WebSocket-Protocol")
        presented = [
            p[len(AUTH_SUBPROTOCOL_PREFIX) :]
            for p in offered
            if p.startswith(AUTH_SUBPROTOCOL_PREFIX)
        ]
        if presented and SUBPROTOCOL not in offered and not (acp and ACP_SUBPROTOCOL in offered):
            return Answer.refuse(HTTPStatus.BAD_REQUEST, "auth subprotocol without oma-bridge.v1")
        bearer = _bearer(headers)
        if isinstance(bearer, Answer):
            return bearer
        if bearer is not None:
            presented.append(bearer)
        if not presented:
            if listener == "tcp" or self._settings.require_token_on_unix:
                return Answer.refuse(HTTPStatus.UNAUTHORIZED, "no token")
            return None
        # Every presented credential must be right: a wrong one is never ignored.
        if not all(_same(candidate, self._token) for candidate in presented):
            return Answer.refuse(HTTPStatus.UNAUTHORIZED, "wrong token")
        return None


def _bearer(headers: Headers) -> str | Answer | None:
    """The credential of the ``Authorization: Bearer`` header, if any; a malformed one: 401."""
    authorization = headers.get_all("Authorization")
    if len(authorization) > 1:
        return Answer.refuse(HTTPStatus.UNAUTHORIZED, "several Authorization headers")
    if not authorization:
        return None
    scheme, _, credential = authorization[0].strip().partition(" ")
    if scheme.lower() != "bearer":
        return Answer.refuse(HTTPStatus.UNAUTHORIZED, "not a Bearer Authorization")
    return credential.strip()


def _is_upgrade(headers: Headers) -> bool:
    upgrade = ",".join(headers.get_all("Upgrade")).lower()
    return "websocket" in upgrade
