"""The agents the daemon hosts: :class:`AgentHost`, the one owner of who is open.

It holds the open agents, the sessions read back at start that wait for an
``agent/open`` with ``resume`` (or an ACP ``session/load``), and the session
store they persist to.  It opens an agent from a declared profile plus the
client's overrides (:mod:`.overrides`), brings a persisted one back with its
history, journal and downstream session, closes one (``forget`` also deletes
its files), forks one (:mod:`.fork`), and saves what a finished turn
changed.  It does not run turns: :class:`~.runs.Runs` queues them and
``turns`` runs them.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from oma_bridge.agent import Agent
from oma_bridge.errors import InvalidMessageError, WireError
from oma_bridge.results import AgentRunResult
from oma_bridge.server.agents.capabilities import ProfileCapabilities
from oma_bridge.server.agents.client_calls import client_forwarder
from oma_bridge.server.agents.fork import fork_hosted
from oma_bridge.server.agents.journal import Entry, Journal
from oma_bridge.server.agents.overrides import agent_config
from oma_bridge.server.agents.registry import AgentSlot, HostedAgent
from oma_bridge.server.agents.remote import Remote
from oma_bridge.server.agents.runs import Runs
from oma_bridge.server.agents.status import AGENT_ID_LABEL, AgentBoard
from oma_bridge.server.agents.store import PersistedSession, SessionStore
from oma_bridge.server.config import ServerConfig, ServerSection
from oma_bridge.server.fixes import no_such_profile
from oma_bridge.server.profiles import Profile
from oma_bridge.server.session import Session
from oma_bridge.server.worktrees import AgentWorktrees, is_worktree_profile, unforked_worktree
from oma_bridge.wire.codes import RUN_IN_PROGRESS, invalid_message, invalid_params, not_found
from oma_bridge.wire.params import AgentOverrides, HookFlags

__all__ = ["STOPPED_DURING_RUN", "AgentHost", "check_declared_hooks", "new_agent_id"]

logger = logging.getLogger("oma_bridge.server")

#: The status message of a run a daemon's death cut short (``docs/sessions.md``).
STOPPED_DURING_RUN = "daemon stopped during the run"


class _Interrupted(Exception):
    """Stands for the daemon's death in the result of a run it cut short."""

    def __str__(self) -> str:
        return STOPPED_DURING_RUN


class AgentHost:
    """The open agents, the restorable sessions and their store; see the module docstring."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        store: SessionStore,
        runs: Runs,
        remote: Remote,
        capabilities: ProfileCapabilities,
        worktrees: AgentWorktrees,
    ) -> None:
        self.config = config
        #: The git worktrees of ``cwd = "worktree"`` agents (PROTOCOL §19.2).
        self.worktrees = worktrees
        self.store = store
        self.runs = runs
        self.remote = remote
        #: What each acp profile's agents said they can do (PROTOCOL §22.2).
        self.capabilities = capabilities
        self.agents: dict[str, HostedAgent] = {}
        #: ``daemon/status``'s agents, kept up to date (PROTOCOL §23).
        self.board = AgentBoard(self.agents)
        #: Sessions read back at start, waiting for an ``agent/open`` with ``resume``.
        self.restorable: dict[str, PersistedSession] = {}

    @property
    def settings(self) -> ServerSection:
        return self.config.server

    def reload(self, config: ServerConfig) -> None:
        """New profiles for new agents; open agents keep the profile they have."""
        self.capabilities.forget_changed(self.config.agents, config.agents)
        self.config = config

    def restore(self) -> int:
        """Read the persisted sessions back (runs the daemon's death cut short ended); how many."""
        for session in self.store.load():
            self._restore_interrupted(session)
            self.restorable[session.agent_id] = session
        return len(self.restorable)

    def profile_capabilities(self) -> dict[str, dict[str, Any]]:
        """What each acp profile's agents said they can do, the open agents heard now."""
        return self.capabilities.read()

    # -- finding -----------------------------------------------------------------

    def profile(self, name: str) -> Profile:
        """The declared profile ``name``; -32011 when there is none."""
        profile = self.config.agents.get(name)
        if profile is None:
            raise not_found(no_such_profile(name, self.config.agents))  # and the nearest
        return profile

    def get(self, agent_id: str) -> HostedAgent:
        """The open agent ``agent_id``; -32011 when there is none."""
        hosted = self.agents.get(agent_id)
        if hosted is None or hosted.closed:
            raise not_found(f'no open agent with id "{agent_id}"')
        return hosted

    def result_of(self, run_id: str) -> dict[str, Any]:
        """``run/result``: the wire result of the finished run ``run_id``, from any journal."""
        if run_id in self.runs.live:
            raise WireError(RUN_IN_PROGRESS, f'Run in progress: "{run_id}"', {"running": True})
        journals = [[e.data for e in hosted.journal.entries()] for hosted in self.agents.values()]
        # A session read back at start answers too, before anyone resumes it.
        journals += [[data for _seq, data in s.entries] for s in self.restorable.values()]
        for journal in journals:
            for data in reversed(journal):
                if data["type"] == "run_end" and data["runId"] == run_id:
                    return data["result"]  # type: ignore[no-any-return]
        finished = self.runs.finished.get(run_id)
        if finished is not None:
            return finished.to_wire()
        raise not_found(f'no finished run with id "{run_id}" in any journal')

    def attach(self, session: Session, agent_id: str) -> None:
        """``agent/attach``: ``session`` uses the agent, and owns its hooks when it has any."""
        hosted = self.get(agent_id)
        check_declared_hooks(session, hosted.hooks)
        hosted.owner = session if hosted.uses_hooks else hosted.owner
        hosted.use(session)

    # -- opening -----------------------------------------------------------------

    async def open_in(
        self, session: Session, profile_name: str, overrides: AgentOverrides, cwd: str | None
    ) -> tuple[HostedAgent, dict[str, Any]]:
        """``agent/open``: :meth:`open` in its folder, the client's ``cwd`` or a git worktree
        of its repository (``worktrees.py``); the agent and what the answer adds."""
        agent_id, profile = new_agent_id(), self.profile(profile_name)
        opening = await self.worktrees.opening(agent_id, profile_name, profile, cwd)
        try:
            hosted = self.open(
                session,
                profile_name,
                overrides,
                backend_update=opening.backend_update,
                meta=opening.meta,
                agent_id=agent_id,
            )
        except BaseException:
            await self.worktrees.discard(agent_id)
            raise
        return hosted, dict(opening.answer)

    def open(
        self,
        session: Session,
        profile_name: str,
        overrides: AgentOverrides,
        *,
        backend_update: dict[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        agent_id: str | None = None,
    ) -> HostedAgent:
        """A new agent of ``profile_name`` used by ``session``, persisted with ``meta``.

        ``agent_id``: one made before (:func:`new_agent_id`; its worktree's name).
        """
        agent_id = agent_id or new_agent_id()
        hosted = self._host(
            session, agent_id, profile_name, overrides, backend_update=backend_update
        )
        self.store.create(agent_id, profile_name, overrides.model_dump(exclude_none=True))
        if meta:
            hosted.meta.update(meta)
            self.store.write(agent_id, {"meta": dict(meta)})
        return hosted

    def resume(self, session: Session, agent_id: str, profile_name: str) -> HostedAgent:
        """The agent ``agent_id`` used by ``session``: the open one, or its persisted session
        brought back (history, journal, downstream session, folder)."""
        live = self.agents.get(agent_id)
        if live is not None and not live.closed:
            _same_profile(agent_id, live.profile_name, profile_name)
            live.use(session)
            return live
        persisted = self.restorable.get(agent_id)
        if persisted is None:
            raise not_found(f'no agent or persisted session with id "{agent_id}"')
        _same_profile(agent_id, persisted.profile, profile_name)
        try:
            overrides = AgentOverrides(**persisted.overrides)
        except ValueError:
            raise not_found(f'the persisted session "{agent_id}" cannot be read') from None
        backend_update: dict[str, Any] = {}
        profile = self.profile(persisted.profile)
        if profile.kind == "acp" and persisted.acp_session is not None:
            backend_update["resume_session"] = persisted.acp_session
        client_cwd = getattr(profile, "cwd", None) == "client"
        if profile.kind != "llm" and client_cwd and "cwd" in persisted.meta:
            backend_update["cwd"] = persisted.meta["cwd"]
        if is_worktree_profile(profile):  # found again from its record
            tree = self.worktrees.resumed(agent_id)
            backend_update.update(self.worktrees.backend_update(profile, tree))
        hosted = self._host(
            session,
            agent_id,
            persisted.profile,
            overrides,
            history=persisted.history,
            backend_update=_typed_cwd(profile.kind, backend_update),
        )
        hosted.meta.update(persisted.meta)
        hosted.journal.restore(persisted.entries)
        del self.restorable[agent_id]
        logger.info("agent %s resumed (profile %s) by %s", agent_id, persisted.profile, session.id)
        return hosted

    async def fork(self, session: Session, parent: HostedAgent) -> HostedAgent:
        """A fork of ``parent`` used by ``session``, persisted (PROTOCOL §22.4: :mod:`.fork`)."""

        def host(agent_id: str, history: list[Any], backend_update: dict[str, Any]) -> HostedAgent:
            return self._host(
                session,
                agent_id,
                parent.profile_name,
                parent.overrides,
                history=history,
                backend_update=backend_update,
            )

        if is_worktree_profile(parent.profile):
            raise unforked_worktree(parent.agent_id, parent.profile_name)
        known = self.profile_capabilities().get(parent.profile_name)
        return await fork_hosted(parent, host, self.store, known)

    def _host(
        self,
        session: Session,
        agent_id: str,
        profile_name: str,
        overrides: AgentOverrides,
        *,
        history: list[Any] | None = None,
        backend_update: dict[str, Any] | None = None,
    ) -> HostedAgent:
        flags = overrides.hooks or HookFlags()
        check_declared_hooks(session, flags)
        profile = self.profile(profile_name)
        target = AgentSlot()  # bound once the agent exists; its callbacks run only then
        try:
            config = agent_config(
                profile_name,
                profile,
                self.settings,
                overrides,
                {AGENT_ID_LABEL: agent_id},
                history=history,
                backend_update=backend_update,
            )
            config = config.model_copy(update=self.remote.hooks(target, flags))
        except InvalidMessageError as error:
            raise invalid_message(error) from None
        run_session = self.runs.session_of
        hosted = HostedAgent(
            agent_id=agent_id,
            profile_name=profile_name,
            profile=profile,
            agent=Agent(
                config,
                elicitation_handler=self.remote.elicitation_handler(target, run_session),
                elicitation_complete_handler=self.remote.elicitation_complete_handler(target),
                client_forwarder=client_forwarder(target, run_session),
            ),
            hooks=flags,
            owner=session if flags.beforeRun or flags.afterRun else None,
            journal=self._journal(agent_id),
            overrides=overrides,
            backend_update=dict(backend_update or {}),
            on_change=self.board.changed,
        )
        target.bind(hosted)
        self.capabilities.opened(profile_name, hosted.agent)
        self.agents[agent_id] = hosted
        self.board.changed()
        hosted.use(session)
        return hosted

    def _journal(self, agent_id: str) -> Journal:
        store = self.store

        def persist(entry: Entry, joined: str | None) -> None:
            # Stream events are batched; a run's start and end (and every
            # other entry) go to the writer at once, with what came before.
            streamed = entry.data["type"] == "event"
            if joined is None:
                store.write(agent_id, {"seq": entry.seq, "entry": entry.data}, batch=streamed)
            else:
                store.write(agent_id, {"seq": entry.seq, "append": joined}, batch=True)

        return Journal(
            max_events=self.settings.journal_max_events,
            max_bytes=self.settings.journal_max_bytes,
            on_append=persist if store.enabled else None,
        )

    def _restore_interrupted(self, session: PersistedSession) -> None:
        """Record as ended every run the daemon's death cut short (and persist that)."""
        ended = {data.get("runId") for _seq, data in session.entries if data["type"] == "run_end"}
        seq = session.entries[-1][0] if session.entries else 0
        for _seq, data in list(session.entries):
            if data["type"] == "run_start" and data.get("runId") not in ended:
                result = AgentRunResult.failed(data["runId"], _Interrupted(), "internal")
                seq += 1
                entry = {"type": "run_end", "runId": data["runId"], "result": result.to_wire()}
                session.entries.append((seq, entry))
                self.store.write(session.agent_id, {"seq": seq, "entry": entry})

    # -- what changes ------------------------------------------------------------

    def update_meta(self, hosted: HostedAgent, meta: Mapping[str, Any]) -> None:
        """What ``session/list`` shows of the agent (``title``...), kept and persisted."""
        hosted.meta.update(meta)
        self.store.write(hosted.agent_id, {"meta": dict(meta)})

    def reset(self, hosted: HostedAgent) -> None:
        """Empty the agent's history, in its persisted session too."""
        hosted.agent.reset()
        hosted.changed()
        if self.store.enabled:
            self.store.write(hosted.agent_id, {"history": []})

    def save(self, hosted: HostedAgent) -> None:
        """Persist what a finished turn changed: history, ``updatedAt``, the downstream session."""
        hosted.meta["updatedAt"] = time.time()
        if self.store.enabled:
            self.store.write(hosted.agent_id, {"history": hosted.agent.get_history()})
            # session/list orders by it, after a restart too.
            self.store.write(hosted.agent_id, {"meta": {"updatedAt": hosted.meta["updatedAt"]}})
            downstream = getattr(hosted.agent.backend, "session_id", None)
            if isinstance(downstream, str) and downstream != hosted.meta.get("acpSession"):
                hosted.meta["acpSession"] = downstream
                self.store.write(hosted.agent_id, {"acpSession": downstream})
            self.store.sync(hosted.agent_id)

    # -- closing -----------------------------------------------------------------

    async def close(self, hosted: HostedAgent, *, forget: bool) -> dict[str, Any] | None:
        """End the agent (its processes gone); ``forget`` also deletes its session files.

        Forgotten, its worktree is ended too (removed unless it changed):
        what became of it, as ``agent/close`` answers it (``None``: it had none).
        """
        hosted.closed = True
        self.agents.pop(hosted.agent_id, None)
        self.board.changed()
        for watcher in list(hosted.watchers.values()):
            watcher.stop()
        hosted.watchers.clear()
        hosted.release()  # its connections, open or not, hold nothing of it (§23)
        self.runs.cancel_agent(hosted.agent_id)
        # Its last word on what it can do outlives it.
        self.capabilities.note_agent(hosted.profile_name, hosted.agent)
        with anyio.CancelScope(shield=True):
            # Kept (not forgotten): its downstream session too, to continue after a restart.
            await hosted.agent.close(end_session=forget)
        worktree = await self.worktrees.close(hosted.agent_id, hosted.journal) if forget else None
        if forget:
            self.store.remove(hosted.agent_id)
        logger.info("agent %s closed", hosted.agent_id)
        return worktree

    async def close_all(self) -> None:
        """Close every agent at once, keeping their sessions (the daemon stops)."""
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for hosted in list(self.agents.values()):
                    tg.start_soon(self._keep_and_close, hosted)

    async def _keep_and_close(self, hosted: HostedAgent) -> None:
        await self.close(hosted, forget=False)

    async def reap_idle(self, *, interval_s: float | None = None) -> None:
        """Close agents idle for ``agent_idle_ttl_s``; runs until cancelled."""
        ttl = self.settings.agent_idle_ttl_s
        interval = interval_s if interval_s is not None else max(0.05, min(ttl / 4, 30.0))
        while True:
            await anyio.sleep(interval)
            now = time.monotonic()
            for hosted in list(self.agents.values()):
                hosted.mark_idle()
                if hosted.idle_since is not None and now - hosted.idle_since >= ttl:
                    if hosted.busy() or hosted.connected():
                        hosted.idle_since = None
                        continue
                    logger.info("agent %s idle for %.0fs: closing it", hosted.agent_id, ttl)
                    await self.close(hosted, forget=True)


def new_agent_id() -> str:
    """A fresh agent id (``agt_`` and 16 hex digits)."""
    return "agt_" + secrets.token_hex(8)


def check_declared_hooks(session: Session, flags: HookFlags) -> None:
    """-32602 when ``flags`` ask for a hook ``session`` did not declare in ``initialize``."""
    declared = set(session.capabilities.hooks)
    missing = [
        name for name in ("beforeRun", "afterRun") if getattr(flags, name) and name not in declared
    ]
    if missing:
        raise invalid_params(
            [
                {
                    "loc": ["config", "hooks", name],
                    "msg": f"hook {name} was not declared in initialize",
                }
                for name in missing
            ]
        )


def _typed_cwd(kind: str, update: dict[str, Any]) -> dict[str, Any]:
    """``cwd`` as each backend config holds it: a ``Path`` for ACP, a ``str`` for a process."""
    if "cwd" in update:
        update = {**update, "cwd": Path(update["cwd"]) if kind == "acp" else str(update["cwd"])}
    return update


def _same_profile(agent_id: str, theirs: str, asked: str) -> None:
    if theirs != asked:
        raise invalid_params(
            [
                {
                    "loc": ["profile"],
                    "msg": f'agent "{agent_id}" is of profile "{theirs}", not "{asked}"',
                    "type": "value_error",
                }
            ]
        )
