"""A child behind asyncio's subprocess transport, forked on the loop's thread or off it.

:func:`start_child` forks with ``subprocess.Popen``, then hands the pipes to
the loop and watches the exit through a pidfd, as asyncio's own
``PidfdChildWatcher`` does (``loop.subprocess_exec`` on Python 3.11 waits
for each child in a thread of its own).  Where it forks is the caller's
choice, ``off_loop``:

* **on the loop's thread** (a library caller, the default): the fastest
  single run.  A worker thread's hand-over (a wake-up each way, and the GIL
  handed back and forth) cost 0.4-1.0 ms a spawn on a 2-core VM, a
  ``cat`` run 1.6x-1.7x a bare spawn against 1.1x on the loop
  (docs/benchmarks.md, "Process backend", 2026-12-02 19:49-20:15).
* **in a worker thread** (the daemon): a fork with its pipes costs a loaded
  daemon ~1-3 ms, and one running a few hundred process runs a second
  spent a third of its loop's time there (docs/benchmarks.md, "Load")
  while every other connection waited.  ``Popen``'s C fork path lets go of
  the GIL while it forks and execs, and the loop goes on meanwhile.

:class:`ChildTransport` keeps the semantics of asyncio's subprocess
transport that :class:`~.pipes.ChildProtocol` relies on: ``connection_made``
before any pipe callback, each pipe's data and end as
``pipe_data_received`` / ``pipe_connection_lost``, ``process_exited`` once,
``connection_lost`` once the child has exited and every pipe has ended, and
``close()`` closing the pipes and killing a child still running.

Where the loop is not asyncio's (uvloop reaps its own children) or the
kernel has no pidfds, :func:`start_child` is ``loop.subprocess_exec``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import anyio.to_thread

__all__ = ["ChildTransport", "pidfd_spawn", "start_child"]


def _pidfds() -> bool:
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel before 5.3, or a seccomp filter that refuses it
        return False
    return True


_PIDFDS = _pidfds()


def pidfd_spawn(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether :func:`start_child` forks itself and watches a pidfd (asyncio's loop, pidfds)."""
    return _PIDFDS and isinstance(loop, asyncio.BaseEventLoop)


async def start_child(
    protocol: asyncio.SubprocessProtocol,
    argv: Sequence[str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[bytes, bytes] | Mapping[str, str],
    off_loop: bool = False,
) -> asyncio.SubprocessTransport:
    """Start ``argv`` in a new session, its pipes on ``protocol``; returns once connected.

    ``stdin``/``stdout``/``stderr`` are ``subprocess.PIPE``, ``DEVNULL`` or
    ``STDOUT`` (stderr); ``off_loop`` forks in a worker thread (see the
    module docstring).  Raises ``OSError`` when the command cannot start.
    """
    loop = asyncio.get_running_loop()
    if not pidfd_spawn(loop):
        transport, _ = await loop.subprocess_exec(
            lambda: protocol,
            *argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        return transport

    def fork() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=env,
            start_new_session=True,
            bufsize=0,
        )

    popen = await anyio.to_thread.run_sync(fork) if off_loop else fork()
    transport = ChildTransport(loop, protocol, popen)
    try:
        await transport.connect()
    except BaseException:
        transport.close()
        raise
    return transport


class _PipeProtocol(asyncio.Protocol):
    """One pipe of the child: its events go to the transport, tagged with the pipe's fd."""

    def __init__(self, owner: ChildTransport, fd: int) -> None:
        #: Dropped at the pipe's end: neither keeps the other (no cycle, PROTOCOL §23).
        self._owner: ChildTransport | None = owner
        self.fd = fd
        self.pipe: asyncio.BaseTransport | None = None
        self.disconnected = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.pipe = transport

    def data_received(self, data: bytes) -> None:
        if self._owner is not None:
            self._owner.deliver("pipe_data_received", self.fd, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.disconnected = True
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.deliver("pipe_connection_lost", self.fd, exc)
            owner.try_finish()

    def pause_writing(self) -> None:
        if self._owner is not None:
            self._owner.deliver("pause_writing")

    def resume_writing(self) -> None:
        if self._owner is not None:
            self._owner.deliver("resume_writing")


class ChildTransport(asyncio.SubprocessTransport):
    """A started ``Popen`` on the loop: its pipes connected, its exit watched (a pidfd)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol: asyncio.SubprocessProtocol,
        popen: subprocess.Popen[bytes],
    ) -> None:
        super().__init__()
        self._loop = loop
        #: Dropped once told ``connection_lost`` (as asyncio's transport does: no cycle).
        self._protocol: asyncio.SubprocessProtocol | None = protocol
        self._popen = popen
        self._pid = popen.pid
        self._returncode: int | None = None
        pipes = ((0, popen.stdin), (1, popen.stdout), (2, popen.stderr))
        self._pipes = {fd: _PipeProtocol(self, fd) for fd, pipe in pipes if pipe is not None}
        #: Calls for the protocol made before ``connection_made`` (until :meth:`connect`).
        self._pending: list[tuple[str, tuple[Any, ...]]] | None = []
        self._closed = False
        self._finished = False
        self._pidfd = os.pidfd_open(self._pid)
        loop.add_reader(self._pidfd, self._exited)

    async def connect(self) -> None:
        """Hand the child's pipes to the loop, then tell the protocol (``connection_made``)."""
        loop, popen, pipes = self._loop, self._popen, self._pipes
        if popen.stdin is not None:
            await loop.connect_write_pipe(functools.partial(pipes.__getitem__, 0), popen.stdin)
        for fd, pipe in ((1, popen.stdout), (2, popen.stderr)):
            if pipe is not None:
                await loop.connect_read_pipe(functools.partial(pipes.__getitem__, fd), pipe)
        pending, self._pending = self._pending, None
        # Now, not soon: the caller writes to stdin as soon as this returns.
        self._dispatch("connection_made", (self,))
        for name, args in pending or ():
            loop.call_soon(self._dispatch, name, args)

    # -- asyncio.SubprocessTransport ------------------------------------------------

    def get_pid(self) -> int:
        return self._pid

    def get_returncode(self) -> int | None:
        return self._returncode

    def get_pipe_transport(self, fd: int) -> asyncio.BaseTransport | None:
        pipe = self._pipes.get(fd)
        return pipe.pipe if pipe is not None else None

    def send_signal(self, signal: int) -> None:
        self._popen.send_signal(signal)

    def terminate(self) -> None:
        self._popen.terminate()

    def kill(self) -> None:
        self._popen.kill()

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the pipes; kill the child if it still runs (as asyncio's transport does)."""
        if self._closed:
            return
        self._closed = True
        for pipe in self._pipes.values():
            if pipe.pipe is not None:
                pipe.pipe.close()
        if self._returncode is None and self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.kill()

    # -- events -----------------------------------------------------------------------

    def deliver(self, name: str, *args: Any) -> None:
        """Call the protocol's ``name`` soon, in order, after ``connection_made``."""
        if self._pending is not None:
            self._pending.append((name, args))
        else:
            self._loop.call_soon(self._dispatch, name, args)

    def _dispatch(self, name: str, args: tuple[Any, ...]) -> None:
        protocol = self._protocol
        if protocol is None:
            return
        if name == "connection_lost":
            self._protocol = None
        getattr(protocol, name)(*args)

    def _exited(self) -> None:
        """The pidfd is readable: the child exited; reap it (``Popen`` keeps the code)."""
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._returncode = self._popen.wait()  # a zombie now: returns at once
        self.deliver("process_exited")
        self.try_finish()

    def try_finish(self) -> None:
        """``connection_lost`` once the child exited and every pipe has ended."""
        if self._finished or self._returncode is None:
            return
        if all(pipe.disconnected for pipe in self._pipes.values()):
            self._finished = True
            self.deliver("connection_lost", None)
