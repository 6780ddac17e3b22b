"""Process-tree supervision for external agents (process runs and ACP agents).

What it guarantees, and how (``docs/processes.md`` tells the whole story):

* **No shell, no ``preexec_fn``.**  A child is exec'd directly, in its own
  session and process group (``start_new_session``, done by the fast C fork
  path), with the environment of :meth:`Supervisor.child_environment`.
* **Pipes are always drained** (:mod:`.pipes`): stdout and stdin are anyio
  byte streams for the owner; stderr goes into a bounded tail from an event
  loop callback, whether or not any task is reading.
* **Ending a tree** (:meth:`SupervisedProcess.stop`): SIGTERM to the group,
  a grace period, SIGKILL to the group, then SIGKILL to every descendant that
  left it: the ones a psutil snapshot of the tree (taken while it lived)
  names, and the ones carrying the run's tag in their environment (which
  finds double-forked escapees that the tree no longer links).
* **No orphans after a daemon crash.**  One watchdog process per supervising
  process (``watchdog.py``) holds the read end of a pipe whose only write
  end is ours.  When we die, even by SIGKILL, it reads end-of-file, SIGKILLs
  every registered group and every tagged process, and exits.  With a
  ``state_dir`` it also keeps a log of live groups there, so that if it dies
  with us, :func:`reap_leftovers` at the next start ends what was left,
  checking start times so that a recycled pid is never hit.

Why not ``PR_SET_PDEATHSIG``: it needs either ``preexec_fn`` (forbidden: the
slow fork path) or an exec wrapper such as ``setpriv --pdeathsig KILL``,
which costs one more exec per run (measured +0.6 ms on a ~1 ms run; a
Python ``prctl`` shim costs 14 ms); it fires when the *thread* that forked
dies rather than the process; and it reaches only the direct child, not the
grandchildren.  The watchdog costs one small pipe write per run, and covers
the grandchildren.

The supervisor runs on asyncio (the pipes use its subprocess protocol),
which is what the daemon and the test-suite run on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import signal
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

import anyio
import anyio.lowlevel
import anyio.to_thread
import psutil

from oma_bridge.observe import report
from oma_bridge.supervision import watchdog as _watchdog
from oma_bridge.supervision.child_transport import start_child
from oma_bridge.supervision.exits import exit_parts
from oma_bridge.supervision.leftovers import reap_leftovers
from oma_bridge.supervision.pipes import (
    DEFAULT_STDERR_TAIL_BYTES,
    ChildProtocol,
    ChildStdin,
    ChildStdout,
    StderrTail,
)
from oma_bridge.supervision.sandbox import BWRAP, Bubblewrap, Sandbox, sandbox_info
from oma_bridge.supervision.watchdog import TAG_VARIABLE
from oma_bridge.supervision.watchdog_link import WatchdogLink
from oma_bridge.telemetry import child_environment

__all__ = [
    "DEFAULT_STDERR_TAIL_BYTES",
    "EXIT_LINGER_S",
    "KILL_WAIT_S",
    "SERVICE_VARIABLES",
    "TAG_VARIABLE",
    "ChildStdin",
    "ChildStdout",
    "LiveProcess",
    "StderrTail",
    "SupervisedProcess",
    "Supervisor",
    "configure_supervisor",
    "default_supervisor",
    "reap_leftovers",
]

logger = logging.getLogger(__name__)

#: How long a tree gets to vanish after the final SIGKILL.
KILL_WAIT_S = 2.0
#: After the child exits, how long escaped descendants may hold our pipes open.
EXIT_LINGER_S = 1.0
_POLL_S = 0.02

#: Variables of the daemon's service manager and wire, never passed on:
#: systemd's notify/watchdog/socket-activation handshakes, the daemon's token,
#: and a supervisor tag inherited from an outer supervisor.
SERVICE_VARIABLES: frozenset[str] = frozenset(
    {
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
        "OMA_BRIDGE_TOKEN",
        TAG_VARIABLE,
    }
)


_TAG_KEY = TAG_VARIABLE.encode()


class _Inherited(NamedTuple):
    """The environment every child inherits, and what it was built from."""

    raw: dict[object, object]
    hidden: frozenset[str]
    text: dict[str, str]
    encoded: dict[bytes, bytes]


class LiveProcess(NamedTuple):
    """One live process of a supervised tree, as :meth:`Supervisor.processes` lists it."""

    pid: int
    #: The labels of the child it is (or descends from), as given to :meth:`Supervisor.spawn`.
    labels: Mapping[str, str]
    rss_bytes: int


class Supervisor:
    """Spawns supervised children.  One per process: see :func:`default_supervisor`.

    ``state_dir`` (the daemon passes ``$XDG_STATE_HOME/oma-bridge/``) is where
    the watchdog logs live groups for :func:`reap_leftovers`; ``None`` keeps
    no file, and the watchdog still guards against our death.
    ``hidden_variables`` are removed from every child's environment on top
    of :data:`SERVICE_VARIABLES` (the daemon's secrets, say).  ``bwrap``
    names the bubblewrap binary of sandboxed children (:class:`Bubblewrap`);
    ``hidden_folders`` (and ``state_dir``) are never shown inside a sandbox.
    """

    def __init__(
        self,
        *,
        state_dir: Path | None = None,
        hidden_variables: Iterable[str] = (),
        bwrap: str | None = None,
        hidden_folders: Iterable[str | Path] = (),
        fork_off_loop: bool = False,
    ) -> None:
        self.owner = secrets.token_hex(8)
        #: Fork in a worker thread rather than on the loop's (``child_transport.py``):
        #: the daemon's choice, whose loop has other connections to serve.
        self.fork_off_loop = fork_off_loop
        self.hidden_variables = SERVICE_VARIABLES | frozenset(hidden_variables)
        hidden = [*hidden_folders, *([state_dir] if state_dir is not None else [])]
        #: How sandboxed children are run (PROTOCOL §19.1).
        self.bubblewrap = Bubblewrap(bwrap, hidden=hidden)
        self._watchdog = WatchdogLink(self.owner, state_dir)
        self._runs = itertools.count(1)
        self._live: dict[int, SupervisedProcess] = {}
        #: What os.environ held, the hidden set, and the environment built from
        #: them, as text and as the bytes a spawn hands to the fork.
        self._inherited: _Inherited | None = None

    @property
    def watchdog_pid(self) -> int | None:
        """The watchdog's pid, once a first child was spawned."""
        return self._watchdog.pid

    def live(self) -> list[SupervisedProcess]:
        """Every child spawned and not yet stopped."""
        return list(self._live.values())

    async def processes(self) -> list[LiveProcess]:
        """Every live process of our children's trees, with its child's labels.

        For ``daemon/status``: each child, then the descendants carrying its
        tag (grandchildren, and the ones that left its group or tree), found
        by the one ``/proc`` scan the watchdog would run, in a worker thread.
        A descendant that scrubbed its environment is not listed: nothing
        but a cgroup finds it (``docs/processes.md``).
        """
        listed = self.processes_now()
        if listed is not None:
            return listed
        return await anyio.to_thread.run_sync(_list_processes, self.owner, self.live())

    def processes_now(self) -> list[LiveProcess] | None:
        """:meth:`processes` when the scan is small enough for the loop's thread, else ``None``.

        A small scan costs the loop about a millisecond.  In a worker thread
        the same scan waits for the GIL at each file it reads while the loop
        is busy (a convoy: ~100 ms for a daemon relaying 200 streams), and a
        status request would wait with it.
        """
        children = self.live()
        if not children:
            return []
        if len(os.listdir("/proc")) <= _SCAN_ON_LOOP:  # noqa: PTH208 (names only)
            return _list_processes(self.owner, children)
        return None

    def child_environment(self, overlay: Mapping[str, str] | None = None) -> dict[str, str]:
        """Our environment minus :attr:`hidden_variables`, with ``overlay`` on top.

        A new dict on every call (the caller adds the run's tag to it).
        """
        env = self._inherited_environment().text.copy()
        if overlay:
            env.update(overlay)
        return env

    def _spawn_environment(self, overlay: Mapping[str, str] | None, tag: str) -> dict[bytes, bytes]:
        """:meth:`child_environment` with the tag, encoded: what ``Popen`` would encode.

        ``Popen`` encodes every variable of a ``str`` environment on each
        spawn (~25 µs for some 40 variables); the inherited part is encoded
        once with the cache, so only the overlay and the tag are per spawn.
        """
        env = self._inherited_environment().encoded.copy()
        # The current run's span as TRACEPARENT/TRACESTATE (PROTOCOL §20.2; empty when
        # tracing is off), under the profile's own variables, which win.
        for key, value in child_environment().items():
            if (not overlay or key not in overlay) and key not in self.hidden_variables:
                env[os.fsencode(key)] = os.fsencode(value)
        if overlay:
            for key, value in overlay.items():
                env[os.fsencode(key)] = os.fsencode(value)
        env[_TAG_KEY] = tag.encode()
        return env

    def _inherited_environment(self) -> _Inherited:
        """``os.environ`` minus the hidden variables, built again only when either changed.

        Decoding ``os.environ`` costs most of a spawn's own work (~16 µs for
        some 40 variables); comparing its raw ``bytes`` mapping with the copy
        taken when the result was built costs about 1 µs.  ``os.environ``
        keeps that mapping in ``_data`` (every CPython since 3.2); without it
        the environment is built every time.
        """
        raw = getattr(os.environ, "_data", None)
        hidden = self.hidden_variables
        cached = self._inherited
        if cached is not None and cached.hidden is hidden and raw == cached.raw:
            return cached
        text = {key: value for key, value in os.environ.items() if key not in hidden}
        encoded = {os.fsencode(key): os.fsencode(value) for key, value in text.items()}
        built = _Inherited(dict(raw) if isinstance(raw, dict) else {}, hidden, text, encoded)
        if isinstance(raw, dict):
            self._inherited = built
        return built

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stdin: bool = True,
        stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES,
        merge_stderr: bool = False,
        labels: Mapping[str, str] | None = None,
        sandbox: Sandbox | None = None,
    ) -> SupervisedProcess:
        """Start ``argv`` (exec'd directly, no shell) in a new session.

        ``env`` is the profile's overlay on :meth:`child_environment`.
        Without ``stdin`` the child's stdin is ``/dev/null``.  With
        ``merge_stderr`` stderr goes into stdout, interleaved as a terminal
        shows them (and :attr:`SupervisedProcess.stderr` stays empty).
        ``labels`` say whose the child is (``{"agentId": ...}``, say); they
        stay on the handle and :meth:`processes` lists them, the child's
        environment never sees them.  With a ``sandbox`` the command runs
        under bubblewrap (:mod:`.sandbox`); one that cannot be applied raises
        :class:`~oma_bridge.errors.SandboxUnavailableError` and spawns
        nothing.  A caller already cancelled spawns nothing; once the fork is
        under way it finishes shielded, so the caller always gets the handle
        to stop.  Raises ``OSError`` when the command cannot start,
        ``ValueError`` for a NUL byte in ``argv`` or ``env``.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        command = argv[0]
        if sandbox is not None:
            await self.bubblewrap.check(sandbox.network)
            argv = self.bubblewrap.argv(argv, sandbox=sandbox, cwd=os.fspath(cwd) if cwd else None)
        tag = f"{self.owner}.{next(self._runs)}"
        child_env = self._spawn_environment(env, tag)
        protocol = ChildProtocol(StderrTail(stderr_tail_bytes))
        with anyio.CancelScope(shield=True):
            # On the loop's thread or off it, as the owner chose (child_transport.py).
            transport = await start_child(
                protocol,
                argv,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                cwd=cwd,
                env=child_env,
                off_loop=self.fork_off_loop,
            )
        pid = transport.get_pid()
        self._watchdog.register(pid)
        logger.debug("spawned %s as pid %d (tag %s)", command, pid, tag)
        sandboxed = sandbox is not None
        process = SupervisedProcess(
            self, transport, protocol, tag, stdin=stdin, labels=labels, sandboxed=sandboxed
        )
        shown = sandbox_info(BWRAP, sandbox.network) if sandbox else sandbox_info("none", True)
        report("spawn", pid=pid, command=command, sandbox=shown, **_audited(labels))
        self._live[pid] = process
        return process

    def released(self, pgid: int) -> None:
        """The child of group ``pgid`` is gone and its transport closed: forget it."""
        self._live.pop(pgid, None)
        self._watchdog.unregister(pgid)

    def close(self) -> None:
        """Stop the watchdog (at shutdown, after every child was stopped).

        Blocks until the watchdog is gone: some tens of milliseconds.
        """
        self._watchdog.close()


class SupervisedProcess:
    """A running child and its process group, as :meth:`Supervisor.spawn` made it.

    :attr:`stdin` / :attr:`stdout` are anyio byte streams (``stdin`` is
    ``None`` without a pipe); :attr:`stderr` holds the tail of stderr, drained
    as it comes.  Always finish with :meth:`stop` (idempotent), shielded when
    it runs in a ``finally``.
    """

    def __init__(
        self,
        supervisor: Supervisor,
        transport: asyncio.SubprocessTransport,
        protocol: ChildProtocol,
        tag: str,
        *,
        stdin: bool,
        labels: Mapping[str, str] | None = None,
        sandboxed: bool = False,
    ) -> None:
        self._supervisor = supervisor
        self._transport = transport
        self._protocol = protocol
        #: This run's value of :data:`TAG_VARIABLE` in the child's environment.
        self.tag = tag
        #: Whose child this is, as :meth:`Supervisor.spawn` was told (read-only).
        self.labels: Mapping[str, str] = MappingProxyType(dict(labels or {}))
        #: The child's pid, which is also its process group and session id.
        self.pid: int = transport.get_pid()
        #: Whether the child is bubblewrap's launcher, the command running inside.
        self.sandboxed = sandboxed
        self.stdin: ChildStdin | None = protocol.stdin if stdin else None
        self.stdout: ChildStdout = protocol.stdout
        self.stderr: StderrTail = protocol.stderr
        self._released = False
        self._linger: asyncio.TimerHandle | None = None
        protocol.on_exit = self._on_exit

    @property
    def returncode(self) -> int | None:
        """The exit code, ``-N`` for signal N, ``None`` while it runs."""
        return self._transport.get_returncode()

    async def wait(self) -> int:
        """Wait for the direct child to exit and return its :attr:`returncode`."""
        await self._protocol.exited.wait()
        code = self._transport.get_returncode()
        assert code is not None
        return code

    async def wait_closed(self) -> None:
        """Wait until the child exited and its stdout and stderr reached their end."""
        await self._protocol.closed.wait()

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the child's process group (an empty group: nothing)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    async def stop(self, grace_s: float, *, close_stdin_first: bool = False) -> None:
        """End the child and its whole tree, then release every resource.

        The sequence: when ``close_stdin_first``, stdin is closed and the
        child gets part of the grace (half, at most 1 s) to leave on its own;
        then SIGTERM to the group and the rest of ``grace_s`` for the tree to
        exit; then SIGKILL to the group and to every escapee, and up to
        :data:`KILL_WAIT_S` for them to vanish.  So it returns within
        ``grace_s`` + :data:`KILL_WAIT_S` (docs/contract.md §11.36).  A child that
        already exited only gets its group swept with SIGKILL: the run is
        over, and whatever it left would hold our pipes.
        """
        if self._released:
            return
        was_running = running = self.returncode is None
        tree = self._snapshot_tree() if running else []
        finished = False
        try:
            if running and close_stdin_first and self.stdin is not None:
                eof_grace = min(1.0, grace_s / 2)
                grace_s -= eof_grace
                await self.stdin.aclose()
                running = not await self._wait_gone(eof_grace, tree)
            if running:
                logger.debug("pid %d: SIGTERM to its group", self.pid)
                self._terminate(tree)
                running = not await self._wait_gone(grace_s, tree)
                if running:
                    logger.info("pid %d: still running after %.1f s: SIGKILL", self.pid, grace_s)
            self._kill_tree(tree)
            # Escapees: when we ended a live child, or when something still
            # holds the pipes of one that is gone.
            if was_running or not self._protocol.closed.is_set():
                if escapees := await anyio.to_thread.run_sync(self.kill_escapees):
                    logger.info("pid %d: killed %d escaped descendant(s)", self.pid, escapees)
                await self._wait_gone(KILL_WAIT_S, tree)
            finished = True
        finally:
            if not finished:
                # A cancellation that pierced the caller's shield (a native
                # ``task.cancel()``): no more waiting, but the tree still goes.
                self._kill_tree(tree)
                self.kill_escapees()
            self._release()

    def _terminate(self, tree: list[psutil.Process]) -> None:
        """SIGTERM to the group; in a sandbox, to what runs inside it.

        bubblewrap's launcher (our child) dies of a SIGTERM, and with it,
        through ``--die-with-parent``, everything in the sandbox at once: the
        command's grace would be lost.  So the command and its descendants
        get the SIGTERM, and the launcher leaves when the command has (its
        exit status is the command's, a signal ``N`` as code 128+N).  The
        sandbox's init ignores it (a namespace's init takes only the signals
        it handles).  A sandbox whose command has not started yet has nothing
        to give grace to: it is killed.
        """
        if not self.sandboxed:
            self.signal_group(signal.SIGTERM)
            return
        if not tree:
            self.signal_group(signal.SIGKILL)
        for member in tree:
            with contextlib.suppress(psutil.Error):
                member.terminate()  # psutil checks the start time: no recycled pid

    def _kill_tree(self, tree: list[psutil.Process]) -> None:
        """SIGKILL to the group and to every process of the snapshot."""
        self.signal_group(signal.SIGKILL)
        for member in tree:
            with contextlib.suppress(psutil.Error):
                member.kill()  # psutil checks the start time: no recycled pid

    def _on_exit(self) -> None:
        """The child is gone: end what it left in its group, then, later, its escapees.

        The exit is reported to the observers (the daemon's audit log) first.

        Left running, they could hold our pipes open forever (``sh -c 'sleep
        99 & echo hi'``).  The group goes at once; a descendant that left the
        group gets :data:`EXIT_LINGER_S` to close our pipes before the tag
        scan ends it.  Callbacks, not a task: this costs a normal run one
        ``killpg`` and nothing else.
        """
        code = self.returncode
        signal_name = describe_signal(code)
        report(
            "exit",
            pid=self.pid,
            returncode=code if signal_name is None else None,
            signal=signal_name,
            **_audited(self.labels),
        )
        self.signal_group(signal.SIGKILL)
        if not self._protocol.closed.is_set():
            loop = asyncio.get_running_loop()
            self._linger = loop.call_later(EXIT_LINGER_S, self._kill_lingering_escapees)

    def _kill_lingering_escapees(self) -> None:
        self._linger = None
        if not self._protocol.closed.is_set():
            self.kill_escapees()  # blocks the loop a few milliseconds, on this rare path

    def kill_escapees(self) -> int:
        """SIGKILL every process still carrying this run's tag; returns how many.

        Blocking (a ``/proc`` scan of a few milliseconds).
        """
        return _watchdog.kill_tagged(self.tag, exact=True)

    def _snapshot_tree(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []

    async def _wait_gone(self, within: float, tree: list[psutil.Process]) -> bool:
        with anyio.move_on_after(within):
            await self._protocol.exited.wait()
            # Descendants are not our children: nothing to await but their absence.
            while any(_alive(member) for member in tree):  # noqa: ASYNC110
                await anyio.sleep(_POLL_S)
            return True
        return False

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._linger is not None:
            self._linger.cancel()
        self._transport.close()  # closes the pipes; SIGKILLs a child that outlived it all
        self._supervisor.released(self.pid)


#: ``/proc`` entries (processes and a few dozen others) up to which
#: :meth:`Supervisor.processes` scans on the event loop rather than in a thread.
_SCAN_ON_LOOP = 512


def _list_processes(owner: str, children: list[SupervisedProcess]) -> list[LiveProcess]:
    """:meth:`Supervisor.processes` off the event loop: ``children`` is its snapshot."""
    by_tag = {child.tag: child for child in children}
    descendants: dict[str, list[int]] = {child.tag: [] for child in children}
    for pid, tag in _watchdog.tagged(owner + ".").items():
        child = by_tag.get(tag)
        if child is not None and pid != child.pid:
            descendants[tag].append(pid)
    listed: list[LiveProcess] = []
    for child in children:
        # A child that exited is listed no more; what it left still is, until stopped.
        pids = [child.pid] if child.returncode is None else []
        for pid in pids + sorted(descendants[child.tag]):
            rss = _rss_of(pid)
            if rss is not None:  # else gone meanwhile
                listed.append(LiveProcess(pid, child.labels, rss))
    return listed


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _rss_of(pid: int) -> int | None:
    """A process's resident set in bytes, as psutil's ``memory_info().rss`` reads it on Linux.

    One read of ``/proc/PID/statm``: a ``psutil.Process`` reads the
    process's start time first, twice the cost for each child a loaded
    daemon's status lists (docs/benchmarks.md, "Load").
    """
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return None


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


_default: Supervisor | None = None
_default_lock = threading.Lock()


def default_supervisor() -> Supervisor:
    """The process-wide supervisor that backends spawn with."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Supervisor()
        return _default


def configure_supervisor(
    *,
    state_dir: Path | None = None,
    hidden_variables: Iterable[str] = (),
    bwrap: str | None = None,
    hidden_folders: Iterable[str | Path] = (),
    fork_off_loop: bool = False,
) -> Supervisor:
    """Install a new process-wide supervisor (the daemon does this once, at start).

    Call :func:`reap_leftovers` on the same ``state_dir`` first.  Children of
    the previous default supervisor, if any, stay under its watchdog until
    they are stopped; without children it is closed at once.
    """
    global _default
    supervisor = Supervisor(
        state_dir=state_dir,
        hidden_variables=hidden_variables,
        bwrap=bwrap,
        hidden_folders=hidden_folders,
        fork_off_loop=fork_off_loop,
    )
    with _default_lock:
        previous, _default = _default, supervisor
    if previous is not None and not previous.live():
        previous.close()
    return supervisor


def _audited(labels: Mapping[str, str] | None) -> dict[str, str]:
    """The labels an audit record carries (``agentId``, ``runId``)."""
    return {key: value for key, value in (labels or {}).items() if key in ("agentId", "runId")}


def describe_signal(returncode: int | None) -> str | None:
    """The signal's name when ``returncode`` says a signal ended the child."""
    if returncode is None or returncode >= 0:
        return None
    return exit_parts(returncode)[1]
