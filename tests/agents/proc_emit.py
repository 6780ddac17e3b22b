"""A process agent that writes exactly what its arguments ask, for the stream tests.

``split-utf8``: the two bytes of "é" in two flushed writes, 50 ms apart.
``flood <bytes>``: that many bytes of "x" on stdout, as fast as it can.
``stderr-flood <bytes>``: that many bytes on stderr, then ``small`` on stdout.
``argv``: the last argument and what stdin held, as ``<arg>|<stdin>``.
"""

from __future__ import annotations

import sys
import time

out = sys.stdout.buffer
mode = sys.argv[1]
if mode == "split-utf8":
    for part in (b"caf\xc3", b"\xa9!"):
        out.write(part)
        out.flush()
        time.sleep(0.05)
elif mode in ("flood", "stderr-flood"):
    target = out if mode == "flood" else sys.stderr.buffer
    block = b"x" * 65536
    remaining = int(sys.argv[2])
    while remaining > 0:
        target.write(block[:remaining])
        remaining -= len(block)
    target.flush()
    if mode == "stderr-flood":
        out.write(b"small\n")
elif mode == "argv":
    out.write(f"{sys.argv[-1]}|{sys.stdin.read()}".encode())
