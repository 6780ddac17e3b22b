"""A hand-written stdio ACP agent that misbehaves on purpose (argv[1] picks how).

Modes:
  noise       non-JSON lines (and a JSON number) on stdout around every message, CRLF endings
  flood       answers initialize, then prints 500 non-JSON lines and waits
  unknown     sends update kinds newer than the SDK (notice, compaction, a vendor kind)
  immortal    ignores stdin EOF and SIGTERM, and leaves a grandchild in a new session
  longline    answers the prompt with one line over the client's ceiling
  eof         closes stdout in the middle of a turn but keeps running
  late        sends a chunk 50 ms after answering each prompt
  slowinit    answers initialize after 30 s if the file named by ACP_SLOW_INIT exists
              (and removes it)
  withdraw    asks for permission, then withdraws the request with $/cancel_request
  legacymodel offers no config options; serves session/set_model
  drip        sends three chunks 100 ms apart, then a burst of three
  orphan      asks for permission and ends the turn without waiting for the answer;
              the next turn reports the answer it got
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "noise"


def send(message: dict[str, object]) -> None:
    data = json.dumps(message)
    end = "\r\n" if MODE == "noise" else "\n"
    if MODE == "noise":
        sys.stdout.write("log: this is not JSON\n")
        sys.stdout.write("42\n")
    sys.stdout.write(data + end)
    sys.stdout.flush()


def update(session_id: str, body: dict[str, object]) -> None:
    send(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": session_id, "update": body},
        }
    )


def chunk(session_id: str, text: str) -> None:
    update(
        session_id,
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}},
    )


state: dict[str, Any] = {"turns": 0, "model": None}


def main() -> None:
    if MODE == "immortal":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # A grandchild that leaves the process group: only the escapee sweep finds it.
        grandchild = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import signal as s, time; s.signal(s.SIGTERM, s.SIG_IGN); time.sleep(600)",
            ],
            start_new_session=True,
        )
        sys.stderr.write(f"grandchild {grandchild.pid}\n")
        sys.stderr.flush()
    while line := sys.stdin.readline():
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method == "initialize":
            marker = os.environ.get("ACP_SLOW_INIT")
            if MODE == "slowinit" and marker and Path(marker).exists():
                Path(marker).unlink()
                time.sleep(30)
            send({"jsonrpc": "2.0", "id": request_id, "result": {"protocolVersion": 1}})
            if MODE == "flood":
                for n in range(500):
                    sys.stdout.write(f"garbage {n}\n")
                sys.stdout.flush()
        elif method == "session/new":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"sessionId": "fault-1"}})
        elif method == "session/set_model":
            state["model"] = params.get("modelId")
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif method == "session/prompt":
            sid = params["sessionId"]
            state["turns"] += 1
            if MODE == "late":
                chunk(sid, f"turn {state['turns']}")
                send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})
                time.sleep(0.05)
                chunk(sid, "LATE")
                continue
            if MODE == "orphan":
                if state["turns"] == 1:
                    ask = {"sessionId": sid, "toolCall": {"toolCallId": "o1"}, "options": []}
                    send(
                        {
                            "jsonrpc": "2.0",
                            "id": 700,
                            "method": "session/request_permission",
                            "params": ask,
                        }
                    )
                    chunk(sid, "asked")
                else:
                    chunk(sid, f"orphan answer: {json.dumps(state.get('orphan'))}")
                send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})
                continue
            if MODE == "drip":
                for text in ("a", "b", "c"):
                    chunk(sid, text)
                    time.sleep(0.1)
                burst = [
                    {
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {
                            "sessionId": sid,
                            "update": {
                                "sessionUpdate": "agent_message_chunk",
                                "content": {"type": "text", "text": text},
                            },
                        },
                    }
                    for text in ("x", "y", "z")
                ]
                burst.append(
                    {"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}}
                )
                sys.stdout.write("".join(json.dumps(m) + "\n" for m in burst))  # one write
                sys.stdout.flush()
                continue
            if MODE == "legacymodel":
                chunk(sid, f"model={state['model']}")
                send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})
                continue
            if MODE == "withdraw":
                ask = {"sessionId": sid, "toolCall": {"toolCallId": "w1"}, "options": []}
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": 900,
                        "method": "session/request_permission",
                        "params": ask,
                    }
                )
                time.sleep(0.2)
                send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 900}})
                answer = json.loads(sys.stdin.readline())
                chunk(sid, f"withdrawn:{answer.get('id')}:{answer.get('error', {}).get('code')}")
                send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})
                continue
            if MODE == "unknown":
                update(sid, {"sessionUpdate": "notice", "severity": "warning", "title": "heads up"})
                update(
                    sid,
                    {
                        "sessionUpdate": "compaction_update",
                        "compactionId": "c1",
                        "status": "completed",
                    },
                )
                update(sid, {"sessionUpdate": "_vendor.example/thing", "payload": [1, 2, 3]})
                update(
                    sid,
                    {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "image", "data": "AA==", "mimeType": "image/png"},
                    },
                )
            if MODE == "longline":
                sys.stdout.write("[" + "1," * 400_000 + "1]\n")
                sys.stdout.flush()
            if MODE == "eof":
                chunk(sid, "half")
                os.close(1)
                time.sleep(600)
            chunk(sid, f"ok from {MODE}")
            send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})
        elif method is None and request_id == 700:
            state["orphan"] = message.get("result")
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "nope"}})
    if MODE == "immortal":
        while True:  # stdin EOF is ignored
            time.sleep(1)


if __name__ == "__main__":
    main()
