"""The refuser's reserve descriptor, lost to another thread at the limit, is taken back.

Out of descriptors, :class:`ConnectionRefuser` gives its reserve up to accept a
waiting connection and answer it ``503``, then takes it back.  If another thread
takes the descriptor just freed in that instant (a spawn's pipe, a session file),
the reserve is gone, and every later attempt to take it comes at the limit again:
the next connection at the limit would wait in the backlog with no answer.  It is
tried again on a timer until held.

Run in a Python of its own, whose ``RLIMIT_NOFILE`` it lowers: it starts at the
limit (the reserve cannot be taken), frees one descriptor, and checks that the
reserve takes it, then that a connection at the limit is answered ``503``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import asyncio, os, resource, socket, sys, tempfile

    from oma_bridge.server.exhaustion import ConnectionRefuser

    async def main() -> None:
        folder = tempfile.mkdtemp()
        path = os.path.join(folder, "s.sock")

        async def handle(reader, writer):
            writer.close()

        server = await asyncio.start_unix_server(handle, path)
        fillers = []
        open_now = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 8, open_now + 8))
        while True:
            try:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        refuser = ConnectionRefuser()
        refuser.install()
        print("at start", refuser.holds_reserve, flush=True)
        os.close(fillers.pop())  # a descriptor frees: the reserve must take it
        await asyncio.sleep(0.5)
        print("after a descriptor freed", refuser.holds_reserve, flush=True)
        os.close(fillers.pop())  # one for the client's own socket
        client = socket.socket(socket.AF_UNIX)
        client.setblocking(False)
        await asyncio.get_running_loop().sock_connect(client, path)
        await asyncio.get_running_loop().sock_sendall(client, b"GET / HTTP/1.1\\r\\n\\r\\n")
        answer = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(client, 4096), 5)
        print("answer", answer.split(b"\\r\\n")[0].decode(), flush=True)
        print("reserve after the refusal", refuser.holds_reserve, flush=True)
        refuser.uninstall()
        server.close()

    asyncio.run(main())
    """
)


def test_a_reserve_taken_by_another_is_taken_back_and_refuses_at_the_limit() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "at start False",
        "after a descriptor freed True",
        "answer HTTP/1.1 503 Service Unavailable",
        "reserve after the refusal True",
    ], done.stderr
