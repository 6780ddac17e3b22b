"""Messages: the shape guard plus the copy, against ``copy.deepcopy`` of the same data.

What every structured input pays before a run starts is ``checked_copy(m)``:
``validate_messages(m)`` followed by ``copy_messages(m)``, in one walk.  The
baseline is ``copy.deepcopy(m)`` of the same list, timed in the same run, in
alternating rounds (see ``_util.time_interleaved``).  A diagnostic row times
the two reference functions one after the other, as callers paid before
``checked_copy``.  Targets: the chat at most 0.30x deepcopy; the 1,000
messages with a 1 MiB image at most 0.45x at first sight (an image string
the guard has never seen: the full base64 scan) and 0.35x seen before (the
same string again, as every later turn of a conversation passes it).

Two inputs, both built here from a fixed seed:

* **1,000-message conversation, one 1 MB image**: user and assistant turns in
  alternation, each with one text block of 40-400 characters; every tenth
  assistant turn also calls a tool (``tool_use`` with a small nested input) and
  the next user turn carries its ``tool_result`` (string content); the first
  user turn also holds an ``image`` block of 1 MiB of random bytes
  (1,398,104 base64 characters, checked by the guard as canonical base64).
* **50-message chat**: the same generator, 50 messages, no image.

Run: ``.venv/bin/python bench/bench_messages.py [--rounds 15] [--breakdown]``;
``--breakdown`` adds the parts of guard+copy on the first input.  Ratios are
given of the medians and of the best rounds (on a shared machine the best
round is the steadier figure: a neighbour's burst only ever slows).
"""

from __future__ import annotations

import argparse
import base64
import copy
import os
import random
from collections.abc import Callable
from typing import Any

from _util import machine, print_table, time_interleaved

from oma_bridge.messages import (
    checked_copy,
    copy_messages,
    is_canonical_base64,
    validate_messages,
)

_TEXT = (
    "the agent reads a file then writes a patch and runs the tests again until they pass "
    "while the user waits for a short answer about what changed and why it matters"
)
_WORDS = _TEXT.split()


def _sentence(rng: random.Random) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 80)))
    return text[: rng.randint(40, 400)]


def conversation(n_messages: int, image_bytes: int, seed: int = 7) -> list[dict[str, Any]]:
    """A conversation as an agent builds it (see the module docstring)."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = []
    for i in range(n_messages):
        role = "user" if i % 2 == 0 else "assistant"
        blocks: list[dict[str, Any]] = []
        if role == "user" and i % 20 == 0 and i > 0:
            blocks.append(
                {"type": "tool_result", "tool_use_id": f"call_{i - 1}", "content": _sentence(rng)}
            )
        blocks.append({"type": "text", "text": _sentence(rng)})
        if role == "assistant" and i % 20 == 19:
            tool_input = {"path": f"src/module_{i}.py", "lines": [1, rng.randint(2, 500)]}
            blocks.append(
                {"type": "tool_use", "id": f"call_{i}", "name": "read_file", "input": tool_input}
            )
        messages.append({"role": role, "content": blocks})
    if image_bytes:
        data = base64.b64encode(rng.randbytes(image_bytes)).decode("ascii")
        image = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": data},
        }
        messages[0]["content"].append(image)
    return messages


def two_passes(messages: list[dict[str, Any]]) -> None:
    """The reference functions one after the other (what callers paid before)."""
    validate_messages(messages)
    copy_messages(messages)


def compare(
    messages: list[dict[str, Any]],
    rounds: int,
    target: float | None,
    *,
    guard: Callable[[list[dict[str, Any]]], object] = checked_copy,
    fresh_image: bool = False,
) -> list[str]:
    """One table row's figures: ``guard`` against deepcopy, medians and best rounds.

    With ``fresh_image`` every call sees an image string it has never seen
    (from a pool larger than the guard's memo of validated payloads), so the
    row measures the first sight of an image: the full base64 scan.
    """
    source = image_source(messages) if fresh_image else None
    pool = distinct_images(source["data"], 64) if source is not None else []
    turn = iter(range(1 << 62))

    def ours() -> None:
        if source is not None:
            source["data"] = pool[next(turn) % len(pool)]
        guard(messages)

    assert checked_copy(messages) == messages
    mine, baseline = time_interleaved([ours, lambda: copy.deepcopy(messages)], rounds=rounds)
    ratio, best_ratio = mine.median / baseline.median, mine.best / baseline.best
    if target is None:
        verdict = "(diagnostic)"
    else:
        verdict = f"<= {target:.2f}x" + ("" if ratio <= target else " (missed)")
    return [
        f"{mine.median_us:,.1f}",
        f"{baseline.median_us:,.1f}",
        f"{ratio:.2f}x",
        f"{best_ratio:.2f}x",
        verdict,
    ]


def image_source(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return next(
        block["source"]
        for message in messages
        for block in message["content"]
        if block["type"] == "image"
    )


def distinct_images(data: str, count: int) -> list[str]:
    """``count`` valid base64 strings of the same size, all different."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    return [alphabet[i] * 4 + data[4:] for i in range(count)]


def breakdown(messages: list[dict[str, Any]], rounds: int) -> None:
    """The parts of guard+copy, each timed alone (medians, same rounds)."""
    image = next(
        block["source"]["data"]
        for message in messages
        for block in message["content"]
        if block["type"] == "image"
    )
    parts: list[tuple[str, Callable[[], object]]] = [
        ("checked_copy (guard + copy, one walk)", lambda: checked_copy(messages)),
        ("validate_messages (whole guard)", lambda: validate_messages(messages)),
        ("is_canonical_base64 (the image)", lambda: is_canonical_base64(image)),
        ("copy_messages", lambda: copy_messages(messages)),
        ("copy.deepcopy", lambda: copy.deepcopy(messages)),
    ]
    timings = time_interleaved([fn for _, fn in parts], rounds=rounds)
    print_table(
        ["part (first input)", "median (µs)", "best (µs)"],
        [
            [name, f"{t.median_us:,.1f}", f"{t.best_us:,.1f}"]
            for (name, _), t in zip(parts, timings, strict=True)
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--breakdown", action="store_true")
    args = parser.parse_args()

    big, chat = conversation(1000, 1 << 20), conversation(50, 0)
    rows = [
        ["1,000 messages + 1 MB image, seen before", *compare(big, args.rounds, 0.35)],
        [
            "1,000 messages + 1 MB image, first sight",
            *compare(conversation(1000, 1 << 20), args.rounds, 0.45, fresh_image=True),
        ],
        ["50-message chat", *compare(chat, args.rounds, 0.30)],
        [
            "two passes: 1,000 + image, seen before",
            *compare(big, args.rounds, None, guard=two_passes),
        ],
        [
            "two passes: 1,000 + image, first sight",
            *compare(
                conversation(1000, 1 << 20), args.rounds, None, guard=two_passes, fresh_image=True
            ),
        ],
        ["two passes: 50-message chat", *compare(chat, args.rounds, None, guard=two_passes)],
    ]
    print(f"# machine: {machine()}; load average {os.getloadavg()[0]:.2f} at the start")
    print(f"# {args.rounds} interleaved rounds, per call, gc off during timing")
    headers = ["case", "ours (µs)", "deepcopy (µs)", "ratio (median)", "ratio (best)", "target"]
    print_table(headers, rows)
    if args.breakdown:
        print()
        breakdown(big, args.rounds)


if __name__ == "__main__":
    main()
