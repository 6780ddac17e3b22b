"""LLM token streaming: ``Agent.stream`` against bare httpx on the same SSE stream.

A local server (a separate process, so its work does not share our event
loop) answers every POST with one model turn of 20,000 token deltas in the
provider's SSE format, as fast as the socket takes them.  In the same run,
for each provider format, three readers take that stream, in interleaved
rounds:

* **bare httpx** (the baseline): ``aiter_lines()``, keep ``data:`` lines,
  ``orjson.loads`` each, count the text deltas: the least a client must do;
* **LLMBackend.run**: the adapter, the shared SSE parser and the LLM loop,
  with an ``emit`` that only counts: oma-bridge without the agent's relay;
* **Agent.stream**: what a library user or the daemon reads.

A ``text`` event carries the text deltas that arrived in one network read
(``TurnBuilder.flush_text``), so the oma-bridge readers count the deltas
delivered (each ``tok<i> `` delta holds one space), not the events.

Reported: time to first text (from the start of the call, client set-up
included for every reader) and deltas per second, medians over the rounds,
and the ratio of deltas/s to the baseline (target >= 0.8).

Run: ``.venv/bin/python bench/bench_stream.py [--tokens 20000] [--rounds 9]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import anyio
import httpx
import orjson
from _util import machine, print_table

from oma_bridge import Agent
from oma_bridge.agent import AgentConfig
from oma_bridge.backends import RunContext
from oma_bridge.backends.llm import create_llm_backend
from oma_bridge.messages import text_message
from oma_bridge.results import StreamEvent

KEY_ENV = "OMA_BENCH_KEY"
_TLS = httpx.create_ssl_context()


# -- the server (runs in a child process) ------------------------------------------


def _anthropic_payload(tokens: int) -> bytes:
    def ev(kind: str, **data: object) -> bytes:
        return (
            b"event: "
            + kind.encode()
            + b"\ndata: "
            + orjson.dumps({"type": kind, **data})
            + b"\n\n"
        )

    usage = {"input_tokens": 10, "output_tokens": 1}
    parts = [
        ev(
            "message_start", message={"id": "m", "role": "assistant", "content": [], "usage": usage}
        ),
        ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    ]
    parts += [
        ev("content_block_delta", index=0, delta={"type": "text_delta", "text": f"tok{i} "})
        for i in range(tokens)
    ]
    parts += [
        ev("content_block_stop", index=0),
        ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": tokens}),
        ev("message_stop"),
    ]
    return b"".join(parts)


def _openai_payload(tokens: int) -> bytes:
    def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
        body = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return b"data: " + orjson.dumps(body) + b"\n\n"

    parts = [chunk({"role": "assistant", "content": ""})]
    parts += [chunk({"content": f"tok{i} "}) for i in range(tokens)]
    parts.append(chunk({}, "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": tokens}
    parts.append(b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


async def _serve(tokens: int) -> None:
    payloads = {
        "/v1/messages": _anthropic_payload(tokens),
        "/v1/chat/completions": _openai_payload(tokens),
    }
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                lines = request.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = next(
                    (
                        int(v)
                        for k, _, v in (x.partition(":") for x in lines)
                        if k.lower() == "content-length"
                    ),
                    0,
                )
                await reader.readexactly(length)
                payload = payloads[path]
                writer.write(head)
                # Real providers flush small pieces; 16 KiB chunks keep the
                # server from being the bottleneck while still streaming.
                for i in range(0, len(payload), 16384):
                    piece = payload[i : i + 16384]
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


# -- the two readers -------------------------------------------------------------


async def read_bare(
    url: str, body: dict[str, object], headers: dict[str, str]
) -> tuple[float, int, float]:
    """Bare httpx: time to first text delta, deltas seen, total seconds.

    A new client per call, as ``Agent`` makes one per backend; both reuse a
    TLS context built once (oma-bridge shares one per process), so neither
    pays the ~20 ms CA bundle load inside the timing.
    """
    started = time.perf_counter()
    first = 0.0
    count = 0
    async with (
        httpx.AsyncClient(verify=_TLS) as client,
        client.stream("POST", url, json=body, headers=headers) as response,
    ):
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = orjson.loads(line[6:])
            if data.get("type") == "content_block_delta" or (
                data.get("choices") and data["choices"][0]["delta"].get("content")
            ):
                count += 1
                if count == 1:
                    first = time.perf_counter() - started
    return first, count, time.perf_counter() - started


async def read_backend(provider: str, base_url: str) -> tuple[float, int, float]:
    """``LLMBackend.run`` with a counting ``emit``: the LLM layer without the agent's relay."""
    started = time.perf_counter()
    first = 0.0
    count = 0

    async def emit(event: StreamEvent) -> None:
        nonlocal count, first
        if event.type == "text":
            count += event.data.count(" ")  # token deltas delivered ("tok<i> " each)
            if not first:
                first = time.perf_counter() - started

    config = _config(provider, base_url)
    backend = create_llm_backend(config.backend, agent_name=config.name)  # type: ignore[arg-type]
    try:
        await backend.run(RunContext("r", "bench", [text_message("go")], None, emit))
    finally:
        await backend.aclose()
    return first, count, time.perf_counter() - started


async def read_agent(provider: str, base_url: str) -> tuple[float, int, float]:
    """``Agent.stream``: time to first ``text`` event, text events, total seconds."""
    started = time.perf_counter()
    first = 0.0
    count = 0
    async with Agent(_config(provider, base_url)) as agent:
        async for event in agent.stream("go"):
            if event.type == "text":
                count += event.data.count(" ")
                if not first:
                    first = time.perf_counter() - started
            elif event.type == "done" and not event.data.success:
                raise RuntimeError(event.data.output)
    return first, count, time.perf_counter() - started


def _config(provider: str, base_url: str) -> AgentConfig:
    return AgentConfig(
        name="bench", provider=provider, model="m", base_url=base_url, api_key_env=KEY_ENV
    )


# -- the run ---------------------------------------------------------------------

Reader = Callable[[], Awaitable[tuple[float, int, float]]]


async def measure(
    readers: dict[str, Reader], tokens: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Per reader: median time to first event (ms) and median events/s.

    Rounds interleave the readers, so that a busy neighbour on a shared
    machine slows them alike instead of skewing one of them.
    """
    firsts: dict[str, list[float]] = {name: [] for name in readers}
    rates: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(rounds):
        for name, reader in readers.items():
            first, count, total = await reader()
            if count != tokens:
                raise RuntimeError(f"{name}: expected {tokens} text events, saw {count}")
            firsts[name].append(first * 1000)
            rates[name].append(count / total)
    return {
        name: (statistics.median(firsts[name]), statistics.median(rates[name])) for name in readers
    }


def _readers(provider: str, root: str) -> dict[str, Reader]:
    if provider == "anthropic":
        base_url, url = root, f"{root}/v1/messages"
        body = {"model": "m", "max_tokens": 4096, "stream": True, "messages": []}
        headers = {"x-api-key": "bench-key", "anthropic-version": "2023-06-01"}
    else:
        base_url, url = f"{root}/v1", f"{root}/v1/chat/completions"
        body = {"model": "m", "stream": True, "messages": []}
        headers = {"authorization": "Bearer bench-key"}
    return {
        "bare httpx": lambda: read_bare(url, body, headers),
        "LLMBackend.run": lambda: read_backend(provider, base_url),
        "Agent.stream": lambda: read_agent(provider, base_url),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    os.environ[KEY_ENV] = "bench-key"

    server = await anyio.open_process([sys.executable, __file__, "--serve", str(args.tokens)])
    try:
        assert server.stdout is not None
        port = int((await server.stdout.receive()).decode().split()[0])
        root = f"http://127.0.0.1:{port}"
        print(f"LLM streaming: {args.tokens:,} token deltas, median of {args.rounds} rounds")
        print(f"machine: {machine()}\n")
        rows: list[list[object]] = []
        for provider in ("anthropic", "openai"):
            readers = _readers(provider, root)
            for reader in readers.values():  # warm-up: imports, connections, caches
                await reader()
            results = await measure(readers, args.tokens, args.rounds)
            baseline = results["bare httpx"][1]
            for name, (first, rate) in results.items():
                rows.append(
                    [provider, name, f"{first:.1f}", f"{rate:,.0f}", f"{rate / baseline:.2f}"]
                )
        print_table(["provider", "path", "first event (ms)", "deltas/s", "ratio"], rows)
    finally:
        server.terminate()
        await server.wait()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(_serve(int(sys.argv[2])))
    else:
        anyio.run(main)
