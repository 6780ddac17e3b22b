"""The stderr tail: cut at a whole line, so a secret split by the cut does not leak its end."""

from __future__ import annotations

from oma_bridge.supervision.pipes import StderrTail


def test_a_cut_tail_starts_at_its_first_whole_line() -> None:
    tail = StderrTail(limit=24)
    tail.feed(b"debug: the key is Zq7vN2pL9wXc4RtY8mKd\nlast words\n")
    # The cut fell inside the key: "RtY8mKd" alone would be told from nothing.
    assert tail.text() == "last words"


def test_a_cut_tail_without_a_whole_line_keeps_what_it_has() -> None:
    tail = StderrTail(limit=8)
    tail.feed(b"x" * 20 + b" end")
    assert tail.text() == "xxxx end"
