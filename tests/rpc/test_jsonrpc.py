"""The JSON-RPC core (sans-I/O) and the async Peer over in-memory streams."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest

from oma_bridge.errors import WireError
from oma_bridge.rpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosedError,
    Peer,
    RpcCore,
)

# ---------------------------------------------------------------- the core


def test_requests_count_from_zero_and_match_exact_id_type() -> None:
    core = RpcCore()
    first, message = core.request("a", {"x": 1})
    assert first == 0 and message == {"jsonrpc": "2.0", "id": 0, "method": "a", "params": {"x": 1}}
    second, _ = core.request("b")
    assert second == 1
    # "0" is not 0: a string id never answers an integer one.
    assert core.receive({"jsonrpc": "2.0", "id": "0", "result": 1}).kind == "unmatched"
    event = core.receive({"jsonrpc": "2.0", "result": {"ok": True}, "id": 0})
    assert (event.kind, event.id, event.result) == ("result", 0, {"ok": True})
    # A duplicate answer is reported, not raised.
    assert core.receive({"jsonrpc": "2.0", "id": 0, "result": 2}).kind == "unmatched"
    event = core.receive({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "auth"}})
    assert event.kind == "error" and event.error is not None
    assert (event.error.rpc_code, event.error.message) == (-32000, "auth")
    assert core.pending_outgoing == []


def test_null_result_is_passed_through_unchanged() -> None:
    core = RpcCore()
    request_id, _ = core.request("fs/write_text_file")
    event = core.receive({"jsonrpc": "2.0", "id": request_id, "result": None})
    assert event.kind == "result" and event.result is None


@pytest.mark.parametrize(
    ("raw", "code", "reply_id"),
    [
        (b"{not json", PARSE_ERROR, None),
        (b"[]", INVALID_REQUEST, None),
        (b'[{"jsonrpc":"2.0","method":"a","id":1}]', INVALID_REQUEST, None),
        (b'"text"', INVALID_REQUEST, None),
        (b'{"method":"a","id":3}', INVALID_REQUEST, 3),
        (b'{"jsonrpc":"1.0","method":"a","id":"x"}', INVALID_REQUEST, "x"),
        (b'{"jsonrpc":"2.0","method":"a","id":1.5}', INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","method":"a","id":true}', INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","method":"a","id":{}}', INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","method":7,"id":2}', INVALID_REQUEST, 2),
        (b'{"jsonrpc":"2.0","method":"a","params":3,"id":2}', INVALID_REQUEST, 2),
        (b'{"jsonrpc":"2.0","id":2}', INVALID_REQUEST, 2),
    ],
)
def test_bad_envelopes_get_error_answers(raw: bytes, code: int, reply_id: Any) -> None:
    event = RpcCore().receive_bytes(raw)
    assert event.kind == "invalid"
    assert event.reply is not None
    assert event.reply["error"]["code"] == code
    assert event.reply["id"] == reply_id


def test_a_batch_is_refused_with_the_sdk_wording() -> None:
    event = RpcCore().receive([{"jsonrpc": "2.0", "method": "a"}])
    assert event.reply is not None
    assert event.reply["error"]["data"]["detail"] == "JSON-RPC batches are not supported"


def test_broken_responses_are_never_answered() -> None:
    core = RpcCore()
    assert core.receive({"jsonrpc": "1.0", "id": 9, "result": 1}).reply is None
    assert core.receive({"jsonrpc": "2.0", "result": 1}).reply is None
    # A broken answer to a pending request fails that request instead of hanging it.
    request_id, _ = core.request("x")
    event = core.receive({"jsonrpc": "2.0", "id": request_id, "error": "nope"})
    assert event.kind == "error" and event.reply is None
    assert core.pending_outgoing == []


def test_incoming_requests_are_answered_once() -> None:
    core = RpcCore()
    event = core.receive({"jsonrpc": "2.0", "id": "r1", "method": "fs/read_text_file"})
    assert (event.kind, event.id, event.method) == ("request", "r1", "fs/read_text_file")
    assert core.respond("r1", {"content": ""}) == {
        "jsonrpc": "2.0",
        "id": "r1",
        "result": {"content": ""},
    }
    assert core.respond("r1", {}) is None
    assert core.respond_error("nope", -1, "x") is None


def test_cancel_request_both_ways() -> None:
    core = RpcCore()
    request_id, _ = core.request("session/prompt")
    assert core.cancel(request_id) == {
        "jsonrpc": "2.0",
        "method": "$/cancel_request",
        "params": {"requestId": request_id},
    }
    # A late answer to a withdrawn request is only reported.
    assert core.receive({"jsonrpc": "2.0", "id": request_id, "result": {}}).kind == "unmatched"
    core.receive({"jsonrpc": "2.0", "id": 5, "method": "session/request_permission"})
    for params in ({"requestId": 5}, {"id": 5}):
        event = core.receive({"jsonrpc": "2.0", "method": "$/cancel_request", "params": params})
        assert (event.kind, event.request_id) == ("cancel", 5)
    stray = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 6}}
    assert core.receive(stray).kind == "unmatched"
    assert RpcCore(cancel_param="id").cancel(3)["params"] == {"id": 3}


# ---------------------------------------------------------------- the peer


class Pipe:
    """Two in-memory peers wired back to back."""

    def __init__(self) -> None:
        self.a_to_b_send, self.a_to_b_recv = anyio.create_memory_object_stream[bytes | None](100)
        self.b_to_a_send, self.b_to_a_recv = anyio.create_memory_object_stream[bytes | None](100)

    def ends(self) -> tuple[Any, Any, Any, Any]:
        async def send_a(data: bytes) -> None:
            await self.a_to_b_send.send(data)

        async def send_b(data: bytes) -> None:
            await self.b_to_a_send.send(data)

        async def recv_a() -> bytes | None:
            try:
                return await self.b_to_a_recv.receive()
            except anyio.EndOfStream:
                return None

        async def recv_b() -> bytes | None:
            try:
                return await self.a_to_b_recv.receive()
            except anyio.EndOfStream:
                return None

        return send_a, recv_a, send_b, recv_b


@pytest.mark.anyio
async def test_peer_round_trip_and_concurrent_slow_handler() -> None:
    send_a, recv_a, send_b, recv_b = Pipe().ends()
    release = anyio.Event()
    seen: list[Any] = []

    async def serve(method: str, params: Any) -> Any:
        if method == "slow":
            await release.wait()
            return "slow done"
        if method == "fail":
            raise WireError(-32002, "not found", {"path": "x"})
        if method == "boom":
            raise RuntimeError("bug")
        return {"echo": params}

    async def on_note(method: str, params: Any) -> None:
        seen.append(params)

    async with (
        Peer(send_a, recv_a) as client,
        Peer(send_b, recv_b, on_request=serve, on_notification=on_note) as server,
    ):
        async with anyio.create_task_group() as tg:
            results: list[Any] = []

            async def slow() -> None:
                results.append(await client.request("slow"))

            tg.start_soon(slow)
            # The slow handler does not block the others.
            assert await client.request("echo", {"n": 1}) == {"echo": {"n": 1}}
            for n in range(50):
                await client.notify("note", {"n": n})
            assert await client.request("echo", [1]) == {"echo": [1]}
            with pytest.raises(WireError) as info:
                await client.request("fail")
            # Every error answer carries its message as data.details (PROTOCOL §18.3).
            error = info.value
            assert (error.rpc_code, error.data) == (-32002, {"path": "x", "details": error.message})
            with pytest.raises(WireError) as info:
                await client.request("boom")
            assert info.value.rpc_code == -32603
            release.set()
        assert results == ["slow done"]
        assert seen == [{"n": n} for n in range(50)]
        assert server.pending_requests() == {}


@pytest.mark.anyio
async def test_cancelled_request_is_withdrawn_and_handler_answers_32800() -> None:
    pipe = Pipe()
    send_a, recv_a, send_b, recv_b = pipe.ends()
    started = anyio.Event()
    handler_cancelled = anyio.Event()
    answers: list[Any] = []
    answered = anyio.Event()

    async def serve(method: str, params: Any) -> Any:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            handler_cancelled.set()

    async def spy_send_b(data: bytes) -> None:
        answers.append(orjson.loads(data))
        answered.set()
        await send_b(data)

    async with (
        Peer(send_a, recv_a) as client,
        Peer(spy_send_b, recv_b, on_request=serve),
    ):
        with anyio.move_on_after(10):
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    await client.request("wait")

                tg.start_soon(ask)
                await started.wait()
                tg.cancel_scope.cancel()
            with anyio.fail_after(5):
                await handler_cancelled.wait()
                await answered.wait()
        assert answers[0]["error"]["code"] == REQUEST_CANCELLED
        assert client.core.pending_outgoing == []


@pytest.mark.anyio
async def test_eof_fails_every_pending_request() -> None:
    pipe = Pipe()
    send_a, recv_a, _send_b, recv_b = pipe.ends()
    async with Peer(send_a, recv_a) as client:
        async with anyio.create_task_group() as tg:
            errors: list[BaseException] = []

            async def ask(n: int) -> None:
                try:
                    await client.request("never", {"n": n})
                except ConnectionClosedError as exc:
                    errors.append(exc)

            for n in range(3):
                tg.start_soon(ask, n)
            for _ in range(3):
                await recv_b()
            await pipe.b_to_a_send.aclose()
        assert len(errors) == 3
        assert client.closed.is_set()
        with pytest.raises(ConnectionClosedError):
            await client.request("after")


@pytest.mark.anyio
async def test_garbage_gets_answers_and_reader_continues() -> None:
    pipe = Pipe()
    send_a, recv_a, send_b, recv_b = pipe.ends()
    invalid: list[str] = []
    async with Peer(send_b, recv_b, on_invalid=lambda e: invalid.append(e.kind)):
        await send_a(b"{oops")
        await send_a(b"[1,2]")
        assert orjson.loads(await recv_a())["error"]["code"] == PARSE_ERROR
        assert orjson.loads(await recv_a())["error"]["code"] == INVALID_REQUEST
        await send_a(b'{"jsonrpc":"2.0","id":1,"method":"x"}')
        assert orjson.loads(await recv_a())["error"]["code"] == -32601
    assert invalid == ["invalid", "invalid"]


@pytest.mark.anyio
async def test_a_failing_notification_handler_does_not_end_the_connection() -> None:
    send_a, recv_a, send_b, recv_b = Pipe().ends()

    async def bad(method: str, params: Any) -> None:
        raise RuntimeError("handler bug")

    async def serve(method: str, params: Any) -> Any:
        return "still here"

    async with (
        Peer(send_a, recv_a) as client,
        Peer(send_b, recv_b, on_request=serve, on_notification=bad),
    ):
        await client.notify("boom")
        assert await client.request("ping") == "still here"


@pytest.mark.anyio
async def test_inline_methods_are_served_by_the_reader_in_wire_order() -> None:
    send_a, recv_a, send_b, recv_b = Pipe().ends()
    order: list[str] = []

    async def serve(method: str, params: Any) -> Any:
        order.append(f"start {method} {params[0]}")
        await anyio.lowlevel.checkpoint()  # a handler in its own task could interleave here
        order.append(f"end {method} {params[0]}")
        if method == "bad":
            raise WireError(-32602, "Invalid params")
        return params[0]

    async with (
        Peer(send_a, recv_a) as client,
        Peer(send_b, recv_b, on_request=serve, inline_methods={"quick", "bad"}),
    ):
        calls = [await client.start_request("quick", [n]) for n in range(3)]
        assert [await call.wait() for call in calls] == [0, 1, 2]
        with pytest.raises(WireError) as info:
            await client.request("bad", [9])
        assert info.value.rpc_code == -32602
    served = [("quick", 0), ("quick", 1), ("quick", 2), ("bad", 9)]
    assert order == [f"{step} {m} {n}" for m, n in served for step in ("start", "end")]


@pytest.mark.anyio
async def test_when_settled_runs_at_the_answer_or_at_once_and_at_a_failure() -> None:
    pipe = Pipe()
    send_a, recv_a, send_b, recv_b = pipe.ends()

    async def serve(method: str, params: Any) -> Any:
        return method

    async with Peer(send_a, recv_a) as client, Peer(send_b, recv_b, on_request=serve):
        settled: list[str] = []
        call = await client.start_request("first")
        call.when_settled(lambda: settled.append("first"))
        with anyio.fail_after(5):
            assert await call.wait() == "first"
        assert settled == ["first"]  # run by the reader as the answer came
        call.when_settled(lambda: settled.append("again"))  # settled already: at once
        assert settled == ["first", "again"]
        never = await client.start_request("never")
        never.when_settled(lambda: settled.append("withdrawn"))
        await never.withdraw()
        assert settled[-1] == "withdrawn"
    failed = await _started_then_closed()
    assert failed == ["closed"]


async def _started_then_closed() -> list[str]:
    """A call still pending when its peer ends: the failure settles it, callbacks run."""
    pipe = Pipe()
    send_a, recv_a, _send_b, _recv_b = pipe.ends()
    seen: list[str] = []
    async with Peer(send_a, recv_a) as client:
        call = await client.start_request("never")
        call.when_settled(lambda: seen.append("closed"))
    return seen
