"""The whole daemon: listeners (:func:`~oma_bridge.server.app.serve`) plus the agent service.

:func:`run_daemon` is what ``oma-bridge serve`` runs.  Its lifecycle:

* **Start.** Reap the process groups an earlier daemon left behind (its
  state file) before anything is spawned; bind the listeners; once the
  discovery file is written, tell systemd ``READY=1`` (:mod:`.sdnotify`) and
  start feeding its watchdog from the event loop.
* **SIGHUP** (with ``handle_signals``): :class:`LiveConfig` reloads the
  profiles from the same source (``load_config(config_path)``).  Agents
  already open keep the profile they were opened with; ``initialize`` and
  ``agents/list`` show the new profiles at once; ``[server]`` (listeners,
  limits) and the other sections keep their start-up values until a
  restart.  A broken config is one log line and changes nothing.
* **Stop** (``RunningServer.stop()``, SIGTERM or SIGINT with
  ``handle_signals``): ``/readyz`` answers ``stopping`` at once and systemd
  hears ``STOPPING=1``; the connections close first (their runs are
  cancelled), then every agent (their process trees end), and the listening
  sockets last, within ``stop_grace_s`` plus a little.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from oma_bridge import telemetry
from oma_bridge.event_loop import running_loop_name
from oma_bridge.orchestration.orchestrator import OpenMultiAgent
from oma_bridge.paths import default_state_dir
from oma_bridge.private_files import NotPrivateError, make_private_folder, open_private
from oma_bridge.provider_keys import in_the_daemon
from oma_bridge.redaction import add_secrets
from oma_bridge.rpc import unwrap_single_error
from oma_bridge.server.acp.facade import AcpFacade
from oma_bridge.server.agents.service import AgentService
from oma_bridge.server.app import RunningServer, serve
from oma_bridge.server.config import EMBEDDED_SOURCE, ConfigError, ServerConfig, load_config
from oma_bridge.server.exhaustion import ConnectionRefuser
from oma_bridge.server.gateway import Gateway
from oma_bridge.server.listeners import ConnectionSlots, StartupError
from oma_bridge.server.metrics import Metrics, Recorder
from oma_bridge.server.profiles import not_ready
from oma_bridge.server.remote_profiles import check_remote_profiles
from oma_bridge.server.sdnotify import Notifier
from oma_bridge.supervision.supervisor import Supervisor, configure_supervisor, reap_leftovers

__all__ = [
    "GC_INTERVAL_S",
    "LiveConfig",
    "collect_on_a_clock",
    "default_state_dir",
    "raise_fd_limit",
    "run_daemon",
    "tune_gc",
]

logger = logging.getLogger("oma_bridge.server")

#: How often the daemon's process runs the cyclic collector (D23): a full collection.
GC_INTERVAL_S = 60.0


def tune_gc() -> None:
    """Collect cycles on a clock, not on allocation counts: ``oma-bridge serve`` calls it once.

    The automatic collector goes off; :func:`run_daemon` then runs a full
    collection every :data:`GC_INTERVAL_S` seconds (:func:`collect_on_a_clock`).
    Why (docs/internals.md D23, docs/benchmarks.md "Load"): a loaded
    daemon replaces journal entries as fast as it makes them, so the
    allocation count that triggers a young collection barely moves while
    the young generation fills with some 30,000 new tracked objects a second;
    when a collection finally came it walked 100,000-150,000 of them and
    stopped the loop for 50-130 ms, the worst of a status request's waits
    under load.  Nothing a closed agent, a departed client or a finished
    run leaves is in a cycle (tests/daemon/test_released.py,
    tests/supervision/test_child_transport.py): reference counting frees it
    at once, and the clock's collections only find what a rare path (a kept
    traceback) leaves.  A process setting, so not :func:`run_daemon`'s: a
    program that embeds the daemon keeps its own collector, and the clock
    runs only where automatic collection is off.
    """
    gc.disable()


async def collect_on_a_clock(interval_s: float = GC_INTERVAL_S) -> None:
    """A full collection every ``interval_s`` seconds, while automatic collection is off."""
    while True:
        await anyio.sleep(interval_s)
        if not gc.isenabled():
            gc.collect()


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit: ``oma-bridge serve`` calls it at start.

    Every connection, agent pipe and session file is a descriptor, and a
    soft limit of 1,024 (the usual default) is a daemon that refuses
    connections at a thousand clients while the hard limit allows far more
    (PROTOCOL §23).  An unlimited hard limit is taken as the kernel's
    ``fs.nr_open``.  Returns the soft limit before and after; a limit that
    cannot be raised stays as it is.  A process setting, so not
    :func:`run_daemon`'s: a program that embeds the daemon keeps its own.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else _nr_open()
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as error:
            logger.debug(
                "cannot raise the soft RLIMIT_NOFILE from %d to %d: %s", soft, target, error
            )
            return soft, soft
        logger.debug("raised the soft RLIMIT_NOFILE from %d to %d (the hard limit)", soft, target)
        return soft, target
    return soft, soft


def _nr_open() -> int:
    try:
        return int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        return 1 << 20


class LiveConfig:
    """The daemon's current config: the one place a reload changes it.

    It hands every new config, in one step with no await in between, to the
    parts that read it: the :class:`~.connection.Gateway` (``initialize``,
    ``agents/list``) and the :class:`~.agent_service.AgentService`
    (``agent/open``, ``oma/runAgent``).
    """

    def __init__(
        self,
        config: ServerConfig,
        service: AgentService,
        *,
        config_path: Path | str | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.current = config
        self.config_path = config_path
        self.service = service
        self.notifier = notifier or Notifier()
        self.gateway: Gateway | None = None

    def attach(self, gateway: Gateway) -> None:
        """The gateway of the started server (reloads before it are not accepted)."""
        self.gateway = gateway
        gateway.reload(self.current)

    def reload(self) -> bool:
        """Load the config again from its source and apply its profiles; ``False`` if broken."""
        self.notifier.reloading()
        try:
            loaded = load_config(self.config_path)
            check_remote_profiles(loaded)
        except ConfigError as error:
            logger.error("config reload failed; keeping the current config: %s", error)
            self.notifier.ready("config reload failed; serving the previous config")
            return False
        _redact_secrets_of(loaded)
        self._apply(loaded)
        return True

    def _apply(self, loaded: ServerConfig) -> None:
        current = self.current
        # Only the profiles change live: listeners, limits and the other
        # sections were set up at start and stay until a restart.
        kept = {name: getattr(current, name) for name in type(current).model_fields}
        del kept["agents"]
        changed = sorted(name for name, value in kept.items() if getattr(loaded, name) != value)
        applied = loaded.model_copy(update=kept)
        self.current = applied
        if self.gateway is not None:
            self.gateway.reload(applied)
        self.service.reload(applied)
        added = sorted(applied.agents.keys() - current.agents.keys())
        removed = sorted(current.agents.keys() - applied.agents.keys())
        logger.info(
            "config reloaded from %s: %d agent profiles (added: %s; removed: %s)",
            applied.source,
            len(applied.agents),
            ", ".join(added) or "none",
            ", ".join(removed) or "none",
        )
        if changed:
            logger.warning(
                "config reload: [%s] not applied: it differs from the running daemon's "
                "and applies only at a restart",
                "], [".join(changed),
            )
        self.notifier.ready(_status(applied))

    async def reload_on_sighup(
        self,
        ready: anyio.Event,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Reload at every SIGHUP until cancelled.

        The handler is installed before readiness (SIGHUP's default action
        would end the daemon); a SIGHUP during start-up is applied once ready.
        """
        with anyio.open_signal_receiver(signal.SIGHUP) as signals:
            task_status.started()
            async for _ in signals:
                await ready.wait()
                logger.info("received SIGHUP; reloading the config")
                self.reload()


def _status(config: ServerConfig) -> str:
    server = config.server
    where = [str(server.socket)] if server.socket is not None else []
    if server.tcp is not None:
        where.append(f"{server.tcp.host}:{server.tcp.port}")
    count = len(config.agents)
    profiles = "1 agent profile" if count == 1 else f"{count} agent profiles"
    return f"serving {profiles} on {' and '.join(where)}"


class _Lifecycle:
    """What happens once the server is up: readiness, watchdog, and the stop notice."""

    def __init__(
        self,
        live: LiveConfig,
        task_group: anyio.abc.TaskGroup,
        outer: anyio.abc.TaskStatus[RunningServer],
    ) -> None:
        self.live = live
        self.task_group = task_group
        self.outer = outer
        self.ready = anyio.Event()
        self.stop_announced = False

    def started(self, value: RunningServer | None = None) -> None:
        assert value is not None
        value.gateway.capabilities = self.live.service.host.profile_capabilities
        self.live.attach(value.gateway)
        notifier = self.live.notifier
        notifier.ready(_status(self.live.current))
        self.task_group.start_soon(notifier.feed_watchdog)
        self.task_group.start_soon(self._announce_stop, value)
        self.ready.set()
        self.outer.started(value)

    async def _announce_stop(self, running: RunningServer) -> None:
        await running.wait_stopping()
        self.announce_stop()

    def announce_stop(self) -> None:
        if not self.stop_announced:
            self.stop_announced = True
            self.live.notifier.stopping()


def _read_gauges(metrics: Metrics, service: AgentService, supervisor: Supervisor) -> None:
    """The gauges of ``GET /metrics`` (PROTOCOL §20.3), read from their owners at each scrape."""
    runs = service.runs
    metrics.gauge(
        "oma_bridge_runs_in_flight",
        "Runs the daemon holds: running or queued (docs/observability.md).",
        lambda: len(runs.live),
    )
    metrics.gauge(
        "oma_bridge_runs_queued", "Runs waiting for their agent or a slot.", lambda: runs.queued
    )
    metrics.gauge(
        "oma_bridge_connections",
        "Connections counted against max_connections.",
        lambda: service.connections(),
    )
    metrics.gauge(
        "oma_bridge_child_processes",
        "Processes the daemon started for its agents and has not reaped yet.",
        lambda: len(supervisor.live()),
    )
    metrics.gauge(
        "oma_bridge_journal_bytes",
        "Bytes the open agents' journals hold.",
        lambda: sum(hosted.journal.retained_bytes for hosted in service.host.agents.values()),
    )


def _configure_tracing(config: ServerConfig) -> None:
    """``[server] otel`` and ``otel_content`` (docs/observability.md); refused without the extra."""
    try:
        telemetry.configure(enabled=config.server.otel, content=config.server.otel_content)
    except RuntimeError as error:
        raise StartupError(f"[server] otel = true: {error}") from None


def _redact_secrets_of(config: ServerConfig) -> None:
    """Let redaction blank the values of ``config``'s key variables (docs/security.md)."""
    add_secrets(variables=config.redacted_variables(), values=config.redacted_values())


def _check_state_dir(state_dir: Path) -> None:
    """Refuse to start when the state folder is not private or cannot take a byte.

    The folder (and each folder above it the daemon makes) is created 0700;
    one that exists must be the user's and 0700 (``private_files``), since
    the crash records, sessions and audit log in it are trusted at the next
    start.  A full disk is found here too: the crash watchdog records live
    process groups there at the first spawn, and finding out then would be
    too late to say it plainly.
    """
    probe = state_dir / f".probe-{os.getpid()}"
    try:
        make_private_folder(state_dir)
        with os.fdopen(open_private(probe, os.O_WRONLY | os.O_EXCL), "wb") as handle:
            handle.write(b"x")
            handle.flush()
            os.fsync(handle.fileno())
    except NotPrivateError as error:
        raise StartupError(f"the state folder is not private: {error}") from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise StartupError(f"cannot write to the state folder {state_dir}: {reason}") from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def _warn_not_ready(config: ServerConfig) -> None:
    """One warning per profile whose runs would fail for want of a key (PROTOCOL §18.3)."""
    for name, profile in config.agents.items():
        reason = not_ready(profile)
        if reason is not None:
            logger.warning(
                'agent profile "%s" is not ready: %s; its runs fail until it is set '
                "and the daemon restarted",
                name,
                reason,
            )


async def run_daemon(
    config: ServerConfig,
    *,
    config_path: Path | str | None = None,
    state_dir: Path | None = None,
    handle_signals: bool = False,
    orchestrator: OpenMultiAgent | None = None,
    notifier: Notifier | None = None,
    metrics: Recorder | None = None,
    task_status: anyio.abc.TaskStatus[RunningServer] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until stopped (``RunningServer.stop()``, or SIGTERM/SIGINT with ``handle_signals``).

    With ``handle_signals``, SIGHUP loads the config again with
    ``load_config(config_path)`` (see the module docstring).  Without
    ``config_path``, that is the file ``config`` was loaded from, or the
    default search order when it is the embedded default (so a user config
    created since is picked up).  ``notifier`` defaults to systemd's, from the
    environment (a no-op outside systemd).  ``metrics`` is the daemon's
    recorder (PROTOCOL §20.3), a fresh :class:`Metrics` by default; another
    recorder (``NO_METRICS``, the baseline of ``bench/bench_metrics.py``)
    records what it will, and the daemon then serves no ``/metrics``.
    """
    if config_path is None and config.source != EMBEDDED_SOURCE:
        config_path = config.source
    _redact_secrets_of(config)
    in_the_daemon()  # "... is not set in the daemon's environment" (PROTOCOL §18.3)
    _warn_not_ready(config)
    state_dir = state_dir or default_state_dir()
    _check_state_dir(state_dir)
    reaped = reap_leftovers(state_dir)
    if reaped:
        logger.warning("reaped the processes of %d earlier daemon(s) that died", reaped)
    _configure_tracing(config)
    logger.info("event loop: %s", running_loop_name())
    supervisor = configure_supervisor(
        state_dir=state_dir,
        hidden_variables=config.secret_variables(),
        bwrap=config.server.bwrap,
        hidden_folders=(config.server.discovery_dir,),
        # Spawns off the loop: a loaded daemon's forks took a third of its loop.
        fork_off_loop=True,
    )
    slots = ConnectionSlots(config.server.max_connections)
    recorder = Metrics() if metrics is None else metrics
    service = AgentService(
        config,
        orchestrator=orchestrator,
        state_dir=state_dir,
        connections=slots.__len__,
        metrics=recorder,
    )
    render = None
    if isinstance(recorder, Metrics):
        _read_gauges(recorder, service, supervisor)
        render = recorder.render
    live = LiveConfig(config, service, config_path=config_path, notifier=notifier)
    refuser = ConnectionRefuser()  # out of fds: 503 to new connections, not a hang
    refuser.install()
    try:
        # A start-up failure (ConfigError, StartupError) leaves as itself, not in a group.
        with unwrap_single_error():
            async with anyio.create_task_group() as tg:
                lifecycle = _Lifecycle(live, tg, task_status)
                started: Any = lifecycle
                await tg.start(service.run)
                if not gc.isenabled():  # tune_gc: the collector runs on a clock
                    tg.start_soon(collect_on_a_clock)
                if handle_signals:
                    await tg.start(live.reload_on_sighup, lifecycle.ready)
                try:
                    await serve(
                        config,
                        methods=service.methods(),
                        handle_signals=handle_signals,
                        drain=service.aclose,  # while /readyz still says "stopping"
                        acp=AcpFacade(service.host, service.runs, service.turns),
                        slots=slots,
                        metrics=render,
                        task_status=started,
                    )
                finally:
                    lifecycle.announce_stop()
                    # A no-op when serve drained; needed when it failed before it could.
                    with anyio.CancelScope(shield=True):
                        await service.aclose()
                    # Every child is gone: the crash watchdog can go too.
                    await anyio.to_thread.run_sync(supervisor.close)
                    await anyio.to_thread.run_sync(telemetry.flush)  # the last runs' spans
                    tg.cancel_scope.cancel()
    finally:
        refuser.uninstall()
