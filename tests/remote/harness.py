"""Two real daemons for the remote-agent tests, and the loopback TCP proxy between them.

``B`` (:func:`remote_daemon`) is an ``oma-bridge serve`` with TLS on its TCP
listener (the suite's test CA) and a token file: the host or pod that runs
the agents.  ``A`` (``local_daemon``) is the laptop's daemon, whose acp
profiles reach ``wss://127.0.0.1:PORT/acp/<profile>`` of B through a
:class:`TcpProxy` the test controls: it can cut every connection (an RST,
as a network that drops) and freeze them (bytes held both ways, as a peer
that stops answering).

B checks ``Host`` against the port it listens on (PROTOCOL §2), so the proxy
keeps the port: B listens on ``127.0.0.2:PORT`` (loopback still) and the
proxy on ``127.0.0.1:PORT``, the address B's certificate names.  B keeps
its port across a restart (its config is rewritten with the port it got).
Both daemons are the facade harness's (``tests/acp_facade/harness.py``),
with its profiles (``demo``, ``echo``, ...) and its clean-up.
"""

from __future__ import annotations

import contextlib
import secrets
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from acp_facade.harness import SCENARIO_AGENT, Facade, facade_daemon

__all__ = [
    "SCENARIO_AGENT",
    "Pair",
    "TcpProxy",
    "local_daemon",
    "port_of",
    "remote_daemon",
    "remote_profile",
    "token_file",
]


class TcpProxy:
    """A TCP relay on its own threads: ``127.0.0.1:port`` → ``upstream_host:port``."""

    def __init__(self, port: int, upstream_host: str = "127.0.0.2") -> None:
        self.port = port
        self.upstream = (upstream_host, port)
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.settimeout(0.1)
        #: Connections accepted so far (each is one of A's connection attempts).
        self.accepted = 0
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._frozen = threading.Event()
        self._stopped = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def cut(self) -> int:
        """Reset every open connection (both sides get an RST); how many there were."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                    sock.close()
        return len(pairs)

    def freeze(self) -> None:
        """Hold every byte both ways: the peers see a connection that stops answering."""
        self._frozen.set()

    def thaw(self) -> None:
        self._frozen.clear()

    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        self._stopped.set()
        self.cut()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=2)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            try:
                server = socket.create_connection(self.upstream, timeout=2)
            except OSError:
                client.close()  # B is down: A's attempt fails, as it would without us
                continue
            with self._lock:
                self._pairs.append((client, server))
            for source, sink in ((client, server), (server, client)):
                thread = threading.Thread(target=self._relay, args=(source, sink), daemon=True)
                thread.start()

    def _relay(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while not self._stopped.is_set():
                if self._frozen.is_set():
                    time.sleep(0.02)
                    continue
                ready, _, _ = select.select([source], [], [], 0.05)
                if not ready:
                    continue
                data = source.recv(65536)
                if not data:
                    break
                # Read while a freeze began (the select above raced it): held, not sent.
                while self._frozen.is_set() and not self._stopped.is_set():
                    time.sleep(0.02)
                sink.sendall(data)
        except (OSError, ValueError):
            # A cut closes the sockets under this thread: select() then sees a
            # descriptor of -1 (ValueError), recv() or sendall() an OSError.
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def token_file(folder: Path) -> Path:
    """A fresh token in a 0600 file: B's ``[server] token_file`` and A's profile's."""
    path = folder / "remote.token"
    path.write_text(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    return path


def remote_profile(
    name: str,
    url: str,
    *,
    token: Path | None,
    ca: Path | None,
    remote_cwd: Path | None,
    extra: str = "",
) -> str:
    """An acp profile of A that reaches ``url``."""
    lines = [f"[agents.{name}]", 'kind = "acp"', f"url = {url!r}", 'cwd = "client"']
    if token is not None:
        lines.append(f"token_file = {str(token)!r}")
    if ca is not None:
        lines.append(f"ca_file = {str(ca)!r}")
    if remote_cwd is not None:
        lines.append(f"remote_cwd = {str(remote_cwd)!r}")
    return "\n" + "\n".join(lines) + "\n" + extra


@contextlib.contextmanager
def remote_daemon(
    root: Path, tls_toml: str, token: Path, agents: str = "", server: str = ""
) -> Iterator[Facade]:
    """B: TLS on ``127.0.0.2``'s TCP listener, the token of ``token``, a port kept on restart."""
    root.mkdir(exist_ok=True)
    settings = f"{tls_toml}token_file = {str(token)!r}\n{server}"
    with facade_daemon(root, server=settings, agents=agents, tcp="127.0.0.2:0") as daemon:
        config = root / "bridge.toml"
        port = port_of(daemon)
        config.write_text(config.read_text().replace('"127.0.0.2:0"', f'"127.0.0.2:{port}"'))
        yield daemon


@contextlib.contextmanager
def local_daemon(root: Path, agents: str, server: str = "") -> Iterator[Facade]:
    """A: the facade harness's profiles plus ``agents`` (the remote ones)."""
    root.mkdir(exist_ok=True)
    with facade_daemon(root, server=server, agents=agents) as daemon:
        yield daemon


@dataclass
class Pair:
    """A, B and the proxy between them; A's profile ``remote`` is B's ``demo``."""

    a: Facade
    b: Facade
    proxy: TcpProxy
    #: The token file of B, which A's profile names.
    token: Path


def port_of(daemon: Facade) -> int:
    return int(daemon.ws_base.rsplit(":", 1)[1])
