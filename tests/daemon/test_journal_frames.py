"""What a journal keeps for its readers counts against its limits (PROTOCOL §23, ``journal.py``)."""

from __future__ import annotations

from oma_bridge.server.agents.journal import Entry, Journal


def text(data: str) -> dict[str, object]:
    return {"type": "event", "runId": "r", "event": {"type": "text", "data": data}}


class Encoder:
    """Counts its encodings; each frame is ``size`` bytes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.calls = 0

    def __call__(self, entry: Entry) -> bytes:
        self.calls += 1
        return b"x" * self.size


def test_the_newest_entry_is_encoded_once_for_every_reader() -> None:
    journal = Journal(max_events=100, max_bytes=1 << 20)
    newest = journal.append(text("a"))
    encode = Encoder(50)
    first = journal.shared_frame(newest, encode)
    assert journal.shared_frame(newest, encode) is first
    assert encode.calls == 1
    journal.append(text("b"))  # no longer the newest: its frame is not kept
    journal.shared_frame(newest, encode)
    journal.shared_frame(newest, encode)
    assert encode.calls == 3


def test_a_kept_frame_counts_against_the_byte_limit() -> None:
    # Three text entries of 4 characters fit (100 bytes each, with the overhead).
    journal = Journal(max_events=100, max_bytes=300)
    entries = [journal.append(text("abcd")) for _ in range(3)]
    assert len(journal) == 3
    journal.shared_frame(entries[-1], Encoder(150))
    # 300 of entries and 150 of frame: the oldest go until it fits again.
    assert [entry.seq for entry in journal.entries()] == [3]
    # The next entry releases the frame's bytes: the journal fills up again.
    journal.append(text("abcd"))
    journal.append(text("abcd"))
    assert [entry.seq for entry in journal.entries()] == [3, 4, 5]


def test_a_join_drops_the_frame_it_made_stale() -> None:
    journal = Journal(max_events=100, max_bytes=1 << 20)
    newest = journal.append(text("a"))
    encode = Encoder(10)
    journal.shared_frame(newest, encode)
    assert journal.join_text(newest, "r", "b")
    journal.shared_frame(newest, encode)
    assert encode.calls == 2
