"""A minimal, fast ACP agent: each prompt is answered with N ``agent_message_chunk`` updates.

Hand-written (no SDK) so that the agent side costs as little as possible and
the benchmark measures the client.  N is the first word of the prompt
(default 20,000).  All updates of a turn are written in large blocks.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            result: object = {"protocolVersion": 1, "agentCapabilities": {}}
        elif method == "session/new":
            result = {"sessionId": "bench"}
        elif method == "session/prompt":
            text = message["params"]["prompt"][0]["text"]
            count = int(text.split()[-1]) if text.split()[-1].isdigit() else 20_000
            batch: list[bytes] = []
            for n in range(count):
                update = {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {
                        "sessionId": "bench",
                        "update": {
                            "sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": f"chunk {n} "},
                        },
                    },
                }
                batch.append(json.dumps(update, separators=(",", ":")).encode() + b"\n")
                if len(batch) == 500:
                    out.write(b"".join(batch))
                    batch.clear()
            out.write(b"".join(batch))
            result = {"stopReason": "end_turn"}
        elif request_id is None:
            continue
        else:
            error = {"code": -32601, "message": f"Method not found: {method}"}
            out.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode())
            out.write(b"\n")
            out.flush()
            continue
        out.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode())
        out.write(b"\n")
        out.flush()


if __name__ == "__main__":
    main()
