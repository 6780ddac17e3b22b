"""A stdlib-only stdio ACP agent that crashes in the middle of every turn.

It answers ``initialize`` and ``session/new`` (and ``session/load``) as an
agent should, then, on ``session/prompt``, sends one ``agent_message_chunk``,
writes a line on stderr and exits with code 3 without answering.  Standard
library only, so a storm of restarts stays cheap.
"""

from __future__ import annotations

import json
import os
import sys


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    request = json.loads(line)
    method, ident = request.get("method"), request.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": ident, "result": {"protocolVersion": 1}})
    elif method in ("session/new", "session/load"):
        send({"jsonrpc": "2.0", "id": ident, "result": {"sessionId": "crash-1"}})
    elif method == "session/prompt":
        chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hm"}}
        params = {"sessionId": "crash-1", "update": chunk}
        send({"jsonrpc": "2.0", "method": "session/update", "params": params})
        os.write(2, b"fatal: crashed mid-turn\n")
        os._exit(3)
    elif ident is not None:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no"}})
