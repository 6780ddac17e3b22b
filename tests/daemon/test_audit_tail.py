"""``daemon/audit`` (extension): the newest records of the audit log, for the status page."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from oma_bridge.client import DaemonError, connect
from oma_bridge.server.audit import AuditLog

from .conftest import daemon


def _write(path: Path, records: int, *, tail: bytes = b"") -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a state folder is 0700
    lines = (
        orjson.dumps({"ts": "t", "event": "spawn", "agentId": None, "n": n}) for n in range(records)
    )
    path.write_bytes(b"\n".join(lines) + b"\n" + tail)


def test_tail_is_the_newest_records_oldest_first(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    _write(path, 5)
    log = AuditLog(path)
    assert [r["n"] for r in log.tail(3)] == [2, 3, 4]
    assert [r["n"] for r in log.tail(100)] == [0, 1, 2, 3, 4]
    # A line cut short by a crash, and a line that is no object, are skipped.
    _write(path, 5, tail=b'[1]\n{"ts": "t", "ev')
    assert [r["n"] for r in log.tail(2)] == [3, 4]
    assert AuditLog(None).tail(10) == []
    assert AuditLog(tmp_path / "none.jsonl").tail(10) == []


def test_tail_reads_blocks_backwards_and_at_most_4_mib(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    padding = "x" * 1000
    with path.open("wb") as file:
        for n in range(6000):  # about 6 MB
            record = {"ts": "t", "event": "spawn", "agentId": None, "n": n, "pad": padding}
            file.write(orjson.dumps(record) + b"\n")
    log = AuditLog(path)
    newest = log.tail(1000)
    assert [r["n"] for r in newest] == list(range(5000, 6000))
    # More than 4 MiB back is not read: fewer records than asked, the newest ones.
    everything = log.tail(6000)
    assert 3000 < len(everything) < 6000
    assert everything[-1]["n"] == 5999
    assert [r["n"] for r in everything] == list(range(6000 - len(everything), 6000))


@pytest.mark.anyio
async def test_daemon_audit_over_the_wire(short_dir: Path) -> None:
    _write(short_dir / "state" / "audit.jsonl", 1500)
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        records = (await client.request("daemon/audit", {"limit": 2}))["records"]
        assert [r["n"] for r in records] == [1498, 1499]
        assert len((await client.request("daemon/audit"))["records"]) == 100
        # A larger limit is cut to 1000.
        records = (await client.request("daemon/audit", {"limit": 5000}))["records"]
        assert [r["n"] for r in records] == list(range(500, 1500))
        for bad in ({"limit": 0}, {"limit": "3"}, {"limit": 2, "agent": "x"}):
            with pytest.raises(DaemonError) as refused:
                await client.request("daemon/audit", bad)
            assert refused.value.rpc_code == -32602


@pytest.mark.anyio
async def test_daemon_audit_with_the_log_turned_off(short_dir: Path) -> None:
    _write(short_dir / "state" / "audit.jsonl", 3)
    async with (
        daemon(short_dir, "audit_log = false"),
        connect(discovery_dir=short_dir) as client,
    ):
        assert await client.request("daemon/audit") == {"records": []}
