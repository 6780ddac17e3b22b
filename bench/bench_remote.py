"""A remote ACP agent against the same agent started locally (issue 28, 5).

Two daemons in subprocesses on this machine, as ``bench_daemon.py`` starts
them:

* **B** serves its ``chunks`` profile (``tests/agents/acp_chunk_agent.py``)
  at ``wss://127.0.0.1:PORT/acp/chunks``: TLS with a CA made for this run
  (``openssl``, as the suite's certificates), a token file;
* **A** has the same ``chunks`` profile and ``remote_chunks``, an acp profile
  with ``url`` = B's, ``token_file`` and ``ca_file`` (PROTOCOL §21).

A raw websockets client on A's unix socket opens both agents and streams a
turn of each in alternating rounds (so a noisy neighbour hits both alike):

* **first text**: seconds from sending ``agent/stream`` to the first ``text``
  event, in a short turn (``--short`` chunks);
* **chunks/s**: ``agent_message_chunk`` texts per second that reach the
  client in a long turn (``--chunks``), counted as text.

Each agent keeps its process and session across rounds (spawn and the
WebSocket handshake are not measured; the warm-up turn pays them).  The
ratio is remote over local: below 1.00x for chunks/s, above for latency,
is what the extra hop costs.

Run: ``.venv/bin/python bench/bench_remote.py [--rounds 9] [--chunks 20000]``
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from itertools import count
from pathlib import Path

import anyio
import orjson
from _util import machine, print_table
from bench_daemon import WS_OPTIONS, alternate, daemon, initialized
from websockets.asyncio.client import ClientConnection, unix_connect

_SERVER_EXTENSIONS = """\
subjectAltName = IP:127.0.0.1
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
"""


def make_tls(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed: (ca, cert, key)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    for key in ("ca.key", "server.key"):
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key)
        (folder / key).chmod(0o600)
    openssl(
        *("req", "-x509", "-new", "-key", "ca.key", "-out", "ca.pem", "-days", "1"),
        *("-subj", "/CN=bench CA", "-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )
    (folder / "server.ext").write_text(_SERVER_EXTENSIONS)
    openssl("req", "-new", "-key", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    openssl(
        *("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key"),
        *("-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "server.ext"),
    )
    return folder / "ca.pem", folder / "server.pem", folder / "server.key"


class Client:
    """One connection to A: requests by id, and a turn read to its answer."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = count(1)

    async def call(self, method: str, params: dict[str, object]) -> dict[str, object]:
        request_id = next(self.ids)
        frame = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        await self.ws.send(orjson.dumps(frame).decode())
        while True:
            message = orjson.loads(await self.ws.recv())
            if message.get("id") == request_id:
                assert "result" in message, message
                result: dict[str, object] = message["result"]
                return result

    async def turn(self, agent_id: str, chunks: int) -> tuple[float, float]:
        """(seconds to the first text event, seconds to the answer) of one turn."""
        request_id = next(self.ids)
        params = {"agentId": agent_id, "input": f"go {chunks}"}
        frame = {"jsonrpc": "2.0", "id": request_id, "method": "agent/stream", "params": params}
        expected = len("".join(f"chunk {n} " for n in range(chunks)))
        start = time.perf_counter()
        await self.ws.send(orjson.dumps(frame).decode())
        first = 0.0
        seen = 0
        while True:
            message = orjson.loads(await self.ws.recv())
            if message.get("id") == request_id:
                assert message["result"]["success"], message
                break
            event = message["params"]["event"]
            if event["type"] == "text":
                if not seen:
                    first = time.perf_counter() - start
                seen += len(event["data"])
        assert seen == expected, (seen, expected)
        return first, time.perf_counter() - start


def measures(
    client: Client, agent_id: str, short: int, chunks: int
) -> tuple[Callable[[], Awaitable[float]], Callable[[], Awaitable[float]]]:
    async def first_text() -> float:
        first, _ = await client.turn(agent_id, short)
        return first

    async def rate() -> float:
        _, total = await client.turn(agent_id, chunks)
        return chunks / total

    return first_text, rate


async def main(rounds: int, chunks: int, short: int) -> None:
    with tempfile.TemporaryDirectory(prefix="omab-bench-tls-") as name:
        folder = Path(name)
        ca, cert, key = make_tls(folder)
        token = folder / "remote.token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        b_server = (
            f'tls_cert = "{cert}"\ntls_key = "{key}"\ntoken_file = "{token}"\n'
            'workspace_roots = ["{folder}"]'
        )
        async with daemon(server=b_server) as b:
            port = int(b.url.rsplit(":", 1)[1].split("/")[0])
            remote = (
                '\n[agents.remote_chunks]\nkind = "acp"\n'
                f'url = "wss://127.0.0.1:{port}/acp/chunks"\n'
                f'token_file = "{token}"\nca_file = "{ca}"\nremote_cwd = "{b.folder}"\n'
            )
            async with (
                daemon(agents=remote) as a,
                await unix_connect(a.socket, "ws://localhost/", **WS_OPTIONS) as ws,
            ):
                client = Client(await initialized(ws))
                local_id = str((await client.call("agent/open", {"profile": "chunks"}))["agentId"])
                remote_id = str(
                    (await client.call("agent/open", {"profile": "remote_chunks"}))["agentId"]
                )
                local_first, local_rate = measures(client, local_id, short, chunks)
                remote_first, remote_rate = measures(client, remote_id, short, chunks)
                firsts = await alternate([local_first, remote_first], rounds)
                rates = await alternate([local_rate, remote_rate], rounds)
    lf, rf = (statistics.median(s) for s in firsts)
    lr, rr = (statistics.median(s) for s in rates)
    print(f"{machine()}; {rounds} alternating rounds per pair; both daemons in subprocesses")
    print()
    print_table(
        ["measurement (median)", "local profile", "remote profile (A -> wss -> B)", "ratio"],
        [
            [
                f"first text event, turn of {short} chunks",
                f"{lf * 1e3:.2f} ms",
                f"{rf * 1e3:.2f} ms",
                f"{rf / lf:.2f}x",
            ],
            [
                f"text chunks/s, turn of {chunks:,} chunks",
                f"{lr:,.0f}/s",
                f"{rr:,.0f}/s",
                f"{rr / lr:.2f}x",
            ],
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--short", type=int, default=10, help="chunks of the first-text turn")
    arguments = parser.parse_args()
    anyio.run(main, arguments.rounds, arguments.chunks, arguments.short)
