"""Property tests: the JSON-RPC core never crashes and never mismatches answers."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from oma_bridge.rpc import Peer, RpcCore, id_key

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
ids = (
    st.none()
    | st.integers(-5, 20)
    | st.text(max_size=2)
    | st.floats(allow_nan=False)
    | st.booleans()
)

envelope_keys = st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"])
garbage_envelopes = st.dictionaries(
    envelope_keys,
    st.one_of(
        st.just("2.0"),
        ids,
        st.text(max_size=4),
        json_values,
        st.fixed_dictionaries({"code": st.integers() | st.text(), "message": json_values}),
    ),
    max_size=6,
)
garbage = st.one_of(json_values, garbage_envelopes, st.lists(garbage_envelopes, max_size=2))


@settings(max_examples=400, deadline=None)
@given(st.lists(garbage, max_size=20))
def test_garbage_never_crashes_and_replies_are_well_formed(messages: list[Any]) -> None:
    core = RpcCore()
    for message in messages:
        event = core.receive(message)
        if event.reply is not None:
            reply = event.reply
            assert reply["jsonrpc"] == "2.0"
            assert isinstance(reply["error"]["code"], int)
            # A response (result/error without method) is never answered.
            assert not (
                isinstance(message, dict)
                and "method" not in message
                and ("result" in message or "error" in message)
            )


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40) | st.text(max_size=40))
def test_raw_bytes_never_crash(data: bytes | str) -> None:
    RpcCore().receive_bytes(data)


@st.composite
def interleavings(draw: st.DrawFn) -> tuple[int, list[tuple[str, Any]]]:
    """Requests sent, then a shuffled mix of answers, duplicates, unknown ids and junk."""
    count = draw(st.integers(1, 12))
    answers: list[tuple[str, Any]] = []
    for request_id in range(count):
        for _ in range(draw(st.integers(0, 2))):  # 0: never answered, 2: duplicate
            kind = draw(st.sampled_from(["result", "error"]))
            answers.append((kind, request_id))
    extras = draw(st.lists(st.integers(-3, 40) | st.text(max_size=2), max_size=5))
    answers += [("result", extra) for extra in extras]
    answers += [("junk", j) for j in draw(st.lists(garbage_envelopes, max_size=4))]
    return count, draw(st.permutations(answers))


@settings(max_examples=300, deadline=None)
@given(interleavings())
def test_each_request_resolves_at_most_once_and_only_by_its_own_id(
    case: tuple[int, list[tuple[str, Any]]],
) -> None:
    count, answers = case
    core = RpcCore()
    sent = [core.request("m", {"n": n})[0] for n in range(count)]
    resolved: dict[Any, int] = {}
    for kind, value in answers:
        if kind == "junk":
            event = core.receive(value)
        elif kind == "result":
            event = core.receive({"jsonrpc": "2.0", "id": value, "result": {"for": value}})
        else:
            error = {"code": -1, "message": str(value)}
            event = core.receive({"jsonrpc": "2.0", "id": value, "error": error})
        if event.kind in ("result", "error"):
            assert id_key(event.id) in {id_key(s) for s in sent}
            resolved[id_key(event.id)] = resolved.get(id_key(event.id), 0) + 1
            if event.kind == "result" and kind == "result":
                assert event.result == {"for": event.id}
    assert all(times == 1 for times in resolved.values())
    # Whatever was not resolved is still pending, and nothing else is.
    pending = {id_key(i) for i in core.pending_outgoing}
    assert pending == {id_key(s) for s in sent} - set(resolved)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 8),
    st.randoms(use_true_random=False),
    st.lists(garbage_envelopes, max_size=4),
)
def test_peer_resolves_each_request_with_its_own_answer(
    count: int, rng: Any, junk: list[Any]
) -> None:
    """Answers in any order, with duplicates, unknown ids and junk between them."""

    async def scenario() -> None:
        sent: list[dict[str, Any]] = []
        inbox = anyio.create_memory_object_stream[object](100)

        async def send(data: bytes) -> None:
            sent.append(orjson.loads(data))

        async def receive() -> object:
            return await inbox[1].receive()

        async with Peer(send, receive) as peer:
            results: dict[int, Any] = {}

            async def ask(n: int) -> None:
                results[n] = await peer.request("m", {"n": n})

            async with anyio.create_task_group() as group:
                for n in range(count):
                    group.start_soon(ask, n)
                while len([m for m in sent if m.get("method") == "m"]) < count:
                    await anyio.lowlevel.checkpoint()
                requests = [m for m in sent if m.get("method") == "m"]
                answers: list[object] = [
                    {"jsonrpc": "2.0", "id": m["id"], "result": m["params"]["n"]} for m in requests
                ]
                answers += [dict(a) for a in rng.sample(answers, k=len(answers) // 2)]  # dups
                answers += [{"jsonrpc": "2.0", "id": 10_000 + i, "result": 0} for i in range(2)]
                # Junk never forges an answer: an integer id could name a real request.
                answers += [j for j in junk if not isinstance(j.get("id"), int)]
                rng.shuffle(answers)
                for answer in answers:
                    await inbox[0].send(answer)
            assert results == {n: n for n in range(count)}

    anyio.run(scenario)
