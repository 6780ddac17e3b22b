"""systemd's notify protocol without libsystemd: :class:`Notifier`.

Under a ``Type=notify`` unit, systemd passes ``$NOTIFY_SOCKET`` (a unix
datagram socket: a path, or an abstract name written with a leading ``@``)
and, with ``WatchdogSec=``, ``$WATCHDOG_USEC`` (and ``$WATCHDOG_PID``, the
process that must feed it).  The daemon tells it, one datagram of
``KEY=VALUE`` lines each:

* ``READY=1`` once the discovery file is written (clients can connect);
* ``STATUS=...``, a line ``systemctl status`` shows;
* ``RELOADING=1`` (with ``MONOTONIC_USEC``) while a SIGHUP reload runs,
  then ``READY=1`` again;
* ``STOPPING=1`` when shutdown begins;
* ``WATCHDOG=1`` every half ``WATCHDOG_USEC``, from the event loop
  (:meth:`Notifier.feed_watchdog`): a loop that hangs stops feeding it, and
  systemd restarts the daemon.

Without ``$NOTIFY_SOCKET`` every call is a no-op, so the daemon runs the same
outside systemd.  A failed send is logged once and never stops the daemon.
The variables are read once; the children never see them (the supervisor
removes them from their environment).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

import anyio

__all__ = ["Notifier"]

logger = logging.getLogger("oma_bridge.server")


def _address(raw: str) -> str | None:
    """The socket address of ``$NOTIFY_SOCKET``; ``@name`` is the abstract ``\\0name``."""
    if raw.startswith("@"):
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    return None  # vsock and other families: not supported here


def _watchdog_interval(environ: Mapping[str, str]) -> float | None:
    """Seconds between two ``WATCHDOG=1``: half the timeout, if the watchdog is ours."""
    usec = environ.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    pid = environ.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None  # meant for another process (we were started by a wrapper)
    return int(usec) / 1_000_000 / 2


class Notifier:
    """Sends notify messages to systemd; a no-op when not started by it."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        raw = environ.get("NOTIFY_SOCKET", "")
        self.address = _address(raw) if raw else None
        if raw and self.address is None:
            logger.warning("NOTIFY_SOCKET of an unsupported kind; not notifying systemd")
        #: Seconds between two watchdog pings, or ``None`` without a watchdog.
        self.watchdog_interval = _watchdog_interval(environ) if self.address else None
        self._warned = False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; ``True`` if it was sent."""
        if self.address is None:
            return False
        message = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message, self.address)
        except OSError as error:
            if not self._warned:  # a watchdog failing every few seconds must not flood the log
                logger.warning("cannot notify systemd: %s", error)
                self._warned = True
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={_one_line(status)}")

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={_one_line(status)}")

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets Type=notify-reload (systemd 253+) match this to its SIGHUP.
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}", "STATUS=reloading the config")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1", "STATUS=stopping")

    async def feed_watchdog(self) -> None:
        """Send ``WATCHDOG=1`` every half timeout until cancelled (returns at once without one)."""
        interval = self.watchdog_interval
        if interval is None:
            return
        while True:
            self.notify("WATCHDOG=1")
            await anyio.sleep(interval)


def _one_line(text: str) -> str:
    # A newline would start a new assignment in the datagram.
    return " ".join(text.split())
