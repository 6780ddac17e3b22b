"""sd_notify without libsystemd: a real unix datagram socket stands in for systemd."""

from __future__ import annotations

import os
import secrets
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from oma_bridge.server.sdnotify import Notifier

from .harness import config_text, daemon_process

pytestmark = pytest.mark.anyio


class FakeSystemd:
    """The receiving end of ``$NOTIFY_SOCKET``."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(10)

    def close(self) -> None:
        self.sock.close()

    async def receive(self) -> list[str]:
        data = await anyio.to_thread.run_sync(self.sock.recv, 65536)
        return data.decode().split("\n")

    async def receive_until(self, wanted: str) -> list[list[str]]:
        """Every message up to and including the first that holds ``wanted``."""
        messages = []
        while True:
            message = await self.receive()
            messages.append(message)
            if wanted in message:
                return messages


@pytest.fixture
def abstract_systemd() -> Iterator[tuple[str, FakeSystemd]]:
    name = f"oma-bridge-test-{secrets.token_hex(6)}"
    systemd = FakeSystemd("\0" + name)
    try:
        yield "@" + name, systemd
    finally:
        systemd.close()


async def test_messages_reach_a_path_socket(folder: Path) -> None:
    systemd = FakeSystemd(str(folder / "notify.sock"))
    try:
        notifier = Notifier({"NOTIFY_SOCKET": str(folder / "notify.sock")})
        assert notifier.enabled and notifier.watchdog_interval is None
        assert notifier.ready("serving\non two lines")
        assert await systemd.receive() == ["READY=1", "STATUS=serving on two lines"]
        assert notifier.stopping()
        assert await systemd.receive() == ["STOPPING=1", "STATUS=stopping"]
        assert notifier.reloading()
        reloading = await systemd.receive()
        assert reloading[0] == "RELOADING=1" and reloading[1].startswith("MONOTONIC_USEC=")
    finally:
        systemd.close()


async def test_abstract_socket_and_watchdog(abstract_systemd: tuple[str, FakeSystemd]) -> None:
    name, systemd = abstract_systemd
    notifier = Notifier({"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "100000"})
    assert notifier.watchdog_interval == pytest.approx(0.05)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(notifier.feed_watchdog)
            for _ in range(3):
                assert await systemd.receive() == ["WATCHDOG=1"]
            tg.cancel_scope.cancel()


def test_watchdog_is_fed_only_by_the_process_it_names() -> None:
    base = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "4000000"}
    assert Notifier(base).watchdog_interval == 2.0
    assert Notifier({**base, "WATCHDOG_PID": str(os.getpid())}).watchdog_interval == 2.0
    assert Notifier({**base, "WATCHDOG_PID": "1"}).watchdog_interval is None
    assert Notifier({**base, "WATCHDOG_USEC": "0"}).watchdog_interval is None
    assert Notifier({"WATCHDOG_USEC": "4000000"}).watchdog_interval is None


def test_without_systemd_or_with_a_dead_socket_nothing_fails(folder: Path) -> None:
    outside = Notifier({})
    assert not outside.enabled and not outside.ready("x") and not outside.stopping()
    dead = Notifier({"NOTIFY_SOCKET": str(folder / "nobody-listens")})
    assert dead.enabled and not dead.notify("WATCHDOG=1") and not dead.notify("WATCHDOG=1")
    assert not Notifier({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled


ECHO = '[agents.echo]\nkind = "llm"\nprovider = "echo"\nmodel = "echo-1"\n'


async def test_a_daemon_process_notifies_systemd(
    folder: Path, abstract_systemd: tuple[str, FakeSystemd]
) -> None:
    name, systemd = abstract_systemd
    env = {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "200000"}
    async with daemon_process(folder, config_text(folder, agents=ECHO), env=env) as daemon:
        with anyio.fail_after(15):
            ready = await systemd.receive()
            # READY comes after the discovery file: clients can find the daemon then.
            assert daemon.discovery.exists()
            assert ready == ["READY=1", f"STATUS=serving 1 agent profile on {folder}/bridge.sock"]
            pings = [await systemd.receive() for _ in range(3)]
            assert pings == [["WATCHDOG=1"]] * 3
            daemon.signal(signal.SIGHUP)
            messages = await systemd.receive_until("READY=1")
            reload = [m for m in messages if m != ["WATCHDOG=1"]]
            assert reload[0][0] == "RELOADING=1" and reload[1][0] == "READY=1"
            daemon.signal(signal.SIGTERM)
            messages = await systemd.receive_until("STOPPING=1")
            assert messages[-1] == ["STOPPING=1", "STATUS=stopping"]
            assert await daemon.process.wait() == 0
