"""The status probe of ``bench/bench_load.py``: a process of its own, as a status client is.

``python bench/_status_probe.py SOCKET TOKEN INTERVAL_S``: connects over the
daemon's unix socket with raw ``websockets`` (``orjson``), sends
``initialize``, prints ``ready`` on a line, then sends one ``daemon/status``
every ``INTERVAL_S`` seconds (one request at a time: the next is sent
``INTERVAL_S`` after the last answer came) until its stdin reaches its end.
It then prints one JSON line, ``{"samples": [seconds, ...]}``, the round
trips, and exits.

Why a process: what users meet is a status client of its own (``oma-bridge
status``, an editor, the status page).  A probe in the bench's event loop
also waits behind the load clients' frames in that loop (websockets parsing
thousands of frames a second), which is the bench's queueing, not the
daemon's.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time

import orjson
from websockets.asyncio.client import unix_connect


async def main(socket: str, token: str, interval_s: float) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def wait_for_eof() -> None:
        # A blocking read holds no GIL: the thread costs the probe nothing while it waits.
        sys.stdin.buffer.read()
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=wait_for_eof, daemon=True).start()
    samples: list[float] = []
    async with unix_connect(
        socket,
        "ws://localhost/",
        additional_headers={"Authorization": f"Bearer {token}"},
        compression=None,
        max_size=None,
        open_timeout=60,
    ) as ws:
        ids = iter(range(1, 1 << 62))

        async def call(method: str, params: object) -> dict[str, object]:
            request_id = next(ids)
            request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            await ws.send(orjson.dumps(request).decode())
            while True:
                message = orjson.loads(await ws.recv())
                if message.get("id") == request_id:
                    assert "result" in message, message
                    return message  # type: ignore[no-any-return]

        info = {"name": "probe", "version": "0"}
        await call("initialize", {"protocolVersion": 1, "clientInfo": info})
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        while not stop.is_set():
            start = time.perf_counter()
            await call("daemon/status", {})
            samples.append(time.perf_counter() - start)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
    sys.stdout.write(orjson.dumps({"samples": samples}).decode() + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
