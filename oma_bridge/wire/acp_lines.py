"""The shim's own framing on the ACP WebSocket door: several messages to a frame (D24).

PROTOCOL §12 fixes one JSON-RPC message per text frame on ``/acp``, and
every client but ours keeps that.  ``oma-bridge acp`` relays bytes (frames
in, lines of stdout out), and parsing a frame costs it more than the line
it carries (docs/benchmarks.md, "ACP facade"), so it offers the
subprotocol :data:`ACP_LINES_SUBPROTOCOL` before ``acp.v1``.  A daemon that
selects it sends, on that connection only, text frames of one or more
messages, **each followed by** ``\\n``: the frame's bytes are the lines the
shim writes, as they are.  Messages keep their order and are never split
across frames; a frame holds at most :data:`ACP_LINES_FRAME_MAX` bytes
unless one message alone is larger.  The other direction (client to daemon)
stays one message per frame, without the newline.  A daemon that does not
know the name selects ``acp.v1``, and the shim then writes each frame as one
line, as before.

A module of its own with no imports: the shim reads the name without the
rest of ``wire/`` (it starts fast, docs/internals.md D24).
"""

from __future__ import annotations

__all__ = ["ACP_LINES_FRAME_MAX", "ACP_LINES_SUBPROTOCOL"]

#: The subprotocol ``oma-bridge acp`` offers on ``/acp`` (before ``acp.v1``).
ACP_LINES_SUBPROTOCOL = "oma-bridge.acp-lines"
#: The most bytes a frame of joined messages holds (one larger message goes alone).
ACP_LINES_FRAME_MAX = 1 << 20
