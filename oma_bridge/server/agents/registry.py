"""The agents the daemon hosts: :class:`HostedAgent` and the idle bookkeeping of each."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from oma_bridge.agent import Agent
from oma_bridge.backends import ElicitationRequest, PermissionRequest
from oma_bridge.backends.command import CommandSettings
from oma_bridge.server.agents.journal import Entry, Journal
from oma_bridge.server.agents.watchers import Watcher, check_cursor
from oma_bridge.server.profiles import Profile
from oma_bridge.server.session import Session
from oma_bridge.wire.params import AgentOverrides, HookFlags


class PacedReader(Protocol):
    """A reader of the journal that must miss nothing: the agent's runs wait for it."""

    def would_lose(self, size: int) -> bool:
        """Whether journaling an entry of ``size`` bytes now would lose one for this reader."""

    async def keep_up(self, size: int) -> None:
        """Return once an entry of ``size`` bytes can be journaled without losing one for it."""


class AcpClient(Protocol):
    """An ACP connection attached to an agent: who can be asked to grant a tool, or to serve
    an agent's ``fs/*`` and ``terminal/*``."""

    session: Session

    def permission_params(self, request: PermissionRequest) -> dict[str, Any]:
        """``session/request_permission`` params: the agent's, in this client's session."""

    def elicitation_params(self, request: ElicitationRequest) -> dict[str, Any] | None:
        """``elicitation/create`` params, or ``None`` when this client cannot answer it."""

    def elicits(self, mode: str) -> bool:
        """Whether this client advertised elicitations of ``mode`` (``form``, ``url``)."""

    def serves(self, method: str) -> bool:
        """Whether this client advertised what ``method`` needs (``fs/*``, ``terminal/*``)."""


__all__ = ["AcpClient", "AgentSlot", "HookTarget", "HostedAgent", "PacedReader"]


@dataclass(eq=False)
class HookTarget:
    """Where an agent's hooks go: the agent, its profile, the owning connection."""

    agent_id: str
    profile_name: str
    profile: Profile
    owner: Session | None


@dataclass(eq=False)
class HostedAgent(HookTarget):
    """One open agent: the library's :class:`Agent`, its journal, its users and watchers."""

    agent: Agent
    hooks: HookFlags
    journal: Journal
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    queued: int = 0
    running: int = 0
    users: set[Session] = field(default_factory=set)
    watchers: dict[Session, Watcher] = field(default_factory=dict)
    #: ACP facade connections attached to this agent's session (``docs/acp.md``).
    acp_clients: dict[Session, AcpClient] = field(default_factory=dict)
    #: Readers the agent's runs wait for before journaling an event (ACP facade
    #: clients: an update is never trimmed from under one that keeps reading).
    paced: set[PacedReader] = field(default_factory=set)
    #: The client's overrides and the backend settings the daemon chose (an ACP
    #: client's folder, its MCP servers) it was made with: a fork is made alike.
    overrides: AgentOverrides = field(default_factory=AgentOverrides)
    backend_update: dict[str, Any] = field(default_factory=dict)
    #: What ``session/list`` shows: ``cwd``, ``title``, ``updatedAt``.
    meta: dict[str, Any] = field(default_factory=dict)
    idle_since: float | None = None
    closed: bool = False
    #: What takes back the close callback each user's connection holds (see :meth:`release`).
    _leaving: dict[Session, Callable[[], None]] = field(default_factory=dict)
    #: Its ``daemon/status`` row, made once (see :meth:`status_row`).
    _row: dict[str, Any] | None = None
    #: Told when its row changes (the daemon's :class:`~.status.AgentBoard`).
    on_change: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        # Every run's invoke_agent span names the agent as PROTOCOL §20.1 says; on the
        # ACP facade the sessionId is the agentId, so the conversation id is the same.
        self.agent.trace_attributes.update(
            {
                "gen_ai.agent.name": self.profile_name,
                "gen_ai.agent.id": self.agent_id,
                "gen_ai.conversation.id": self.agent_id,
            }
        )

    @property
    def uses_hooks(self) -> bool:
        return self.hooks.beforeRun or self.hooks.afterRun

    def busy(self) -> bool:
        return self.queued > 0 or self.running > 0

    def connected(self) -> bool:
        if self.uses_hooks:
            return self.owner is not None and not self.owner.closed
        return any(not user.closed for user in self.users)

    def use(self, session: Session) -> None:
        """``session`` works with this agent: it is not idle while that connection is open."""
        if session not in self.users and not self.closed:
            self.users.add(session)
            self._leaving[session] = session.on_close(self._left)
        self.idle_since = None

    def _left(self, session: Session) -> None:
        # A closed user counts for nothing (connected()): forgotten, so that an
        # agent many connections come back to does not keep each one.
        self.users.discard(session)
        self._leaving.pop(session, None)
        self.mark_idle()

    def release(self) -> None:
        """The agent is closed: its users' connections hold nothing of it from now on.

        Each user's connection kept a close callback that reaches this agent
        (and so its journal and backend); taken back here, a connection that
        stays open after closing thousands of agents holds none of them
        (PROTOCOL §23).
        """
        for remove in self._leaving.values():
            remove()
        self._leaving.clear()
        self.users.clear()

    def status_row(self) -> dict[str, Any]:
        """Its row of ``daemon/status``'s ``agents``: made once, its two changing fields set now.

        A status poll with thousands of agents open must not stall the
        other clients (PROTOCOL §23): what never changes (the profile, the
        kind, the sandbox it runs in, §19.1) is not worked out again at
        every poll.  The row is the agent's: callers encode it, never keep
        or change it.
        """
        row = self._row
        if row is None:
            row = self._row = {
                "agentId": self.agent_id,
                "profile": self.profile_name,
                "kind": self.agent.kind,
                "state": "",
                "queuedRuns": 0,
            }
            backend = self.agent.config.backend
            if isinstance(backend, CommandSettings):
                row["sandbox"] = backend.sandbox_info()
        # "running" from the run's start to its end, as counted here: the
        # board is told at both (changed()), while the agent's own status
        # moves inside its run, where nothing tells it.
        row["state"] = "running" if self.running else self.agent.status
        row["queuedRuns"] = self.queued
        return row

    def changed(self) -> None:
        """Its row changed (a run queued, started or ended; a reset)."""
        if self.on_change is not None:
            self.on_change()

    def mark_idle(self) -> None:
        if not self.busy() and not self.connected() and self.idle_since is None:
            self.idle_since = time.monotonic()

    async def watch(self, session: Session, after_seq: int | None) -> int:
        """``session`` follows the journal from ``after_seq`` (from now: ``None``); its cursor."""
        journal = self.journal
        cursor = journal.last_seq if after_seq is None else after_seq
        check_cursor(journal, cursor)
        self.unwatch(session)
        watcher = Watcher(session, self.agent_id, journal, cursor)
        await watcher.catch_up()
        # No await between the catch-up and the registration: nothing falls between.
        self.watchers[session] = watcher
        self.use(session)
        watcher.on_stop(session.on_close(lambda _session: self.unwatch(session)))
        session.start_soon(watcher.pump)
        return watcher.cursor

    def unwatch(self, session: Session) -> None:
        watcher = self.watchers.pop(session, None)
        if watcher is not None:
            watcher.stop()

    async def record(self, data: dict[str, Any]) -> Entry:
        """Journal ``data`` once no paced reader would lose an entry for it.

        Paced readers are ACP facade clients (``docs/acp.md``): a turn never runs
        further ahead of one that keeps reading than the journal's retention.
        """
        entry = self.record_now(data)
        return entry if entry is not None else await self.record_paced(data)

    async def record_paced(self, data: dict[str, Any]) -> Entry:
        """:meth:`record` when :meth:`record_now` could not: wait for every paced reader."""
        size = self.journal.size_of(data)
        for reader in list(self.paced):
            await reader.keep_up(size)
        return self.journal.append(data, size)

    def record_now(self, data: dict[str, Any]) -> Entry | None:
        """:meth:`record` if no paced reader has to be waited for, else ``None``.

        The common case, without a coroutine (a stream's every event).
        """
        paced, journal = self.paced, self.journal
        if not paced:
            return journal.append(data)
        size = journal.size_of(data)
        for reader in paced:
            if reader.would_lose(size):
                return None
        return journal.append(data, size)


class AgentSlot:
    """How an agent's own callbacks (hooks, elicitations, client calls) find it: weakly.

    They are made before the agent and kept in its config, which the agent
    holds: a strong reference back would make every agent a reference cycle,
    and a closed one would wait for the cyclic collector (PROTOCOL §23).  They
    are only called during the agent's runs, which hold it.
    """

    def __init__(self) -> None:
        self._ref: weakref.ref[HostedAgent] | None = None

    def bind(self, hosted: HostedAgent) -> None:
        self._ref = weakref.ref(hosted)

    def __call__(self) -> HostedAgent:
        hosted = self._ref() if self._ref is not None else None
        if hosted is None:
            raise RuntimeError("the agent of this callback is gone")
        return hosted
