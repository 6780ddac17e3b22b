"""Property: however stdout is chunked, the line reader yields the same lines."""

from __future__ import annotations

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from oma_bridge.backends.acp.stdio import LineReader

lines = st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"").rstrip(b"\r")))


class _Chunks:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self.chunks:
            raise anyio.EndOfStream
        return self.chunks.pop(0)


@settings(max_examples=300, deadline=None)
@given(lines, st.lists(st.integers(1, 40), min_size=1), st.booleans())
def test_chunking_never_changes_the_lines(
    expected: list[bytes], cuts: list[int], crlf: bool
) -> None:
    data = b"".join(line + (b"\r\n" if crlf else b"\n") for line in expected)
    chunks, position, k = [], 0, 0
    while position < len(data):
        size = cuts[k % len(cuts)]
        chunks.append(data[position : position + size])
        position, k = position + size, k + 1

    async def read_all() -> list[bytes]:
        reader = LineReader(_Chunks(chunks), 1024)  # type: ignore[arg-type]
        out = []
        while (line := await reader.readline()) is not None:
            out.append(line)
        return out

    assert anyio.run(read_all) == expected
