"""One turn of an open agent, journaled: :class:`TurnRunner` and :class:`TurnJournal`.

A turn is queued by :class:`~.runs.Runs` like every run; once it runs, its
``run_start``, each of its events and its ``run_end`` go into the agent's
journal (:meth:`.HostedAgent.record`, which waits for paced readers), which
``agent/watch`` and the ACP facade follow.  An ``agent/stream`` caller is
also sent each event as ``run/event`` through its :class:`~.relay.CallerRelay`.
Every turn has its ``run_end``, whatever ends it (PROTOCOL §13.3): one that
returns a result journals it (:meth:`TurnJournal.end`); one that does not,
because its request was cancelled (its client left with ``onDisconnect:
"cancel"``, the daemon is stopping) or it was cancelled still queued, is
settled by :meth:`~.runs.Runs.serve` (:meth:`TurnJournal.settle`), which
journals it as cancelled; a run cancelled in its queue gets its
``run_start`` then, so the journal says what was asked and that it never ran.
The agent takes the prepared input as it is: it was guarded and copied once,
when the request came.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, TypeAlias

import anyio

from oma_bridge.agent import PreparedInput, PreparedPrompt
from oma_bridge.agent.stream import closing_events
from oma_bridge.backends import PermissionHandler
from oma_bridge.errors import RunCancelledError
from oma_bridge.results import AgentRunResult, StreamEvent
from oma_bridge.rpc import unwrap_single_error
from oma_bridge.server.agents.host import AgentHost
from oma_bridge.server.agents.registry import HostedAgent
from oma_bridge.server.agents.relay import CallerRelay
from oma_bridge.server.agents.remote import Remote
from oma_bridge.server.agents.runs import Runs
from oma_bridge.server.agents.turnstile import Turnstile
from oma_bridge.server.sandboxing import require_sandbox
from oma_bridge.server.session import Session

__all__ = ["TurnJournal", "TurnMode", "TurnRunner"]

#: How a turn was asked, journaled in its ``run_start``: ``agent/run`` (fresh),
#: ``agent/stream`` (fresh, with ``run/event`` to the caller), ``agent/prompt``
#: or ``session/prompt`` (a turn of the agent's history).
TurnMode: TypeAlias = Literal["agent/run", "agent/stream", "agent/prompt", "session/prompt"]


class TurnJournal:
    """What one turn writes into its agent's journal, and sends its caller when it streams."""

    def __init__(
        self,
        hosted: HostedAgent,
        run_id: str,
        turnstile: Turnstile,
        relay: CallerRelay | None,
        *,
        mode: TurnMode,
        journaled_input: Any,
        on_end: Callable[[], None],
    ) -> None:
        self.hosted = hosted
        self.run_id = run_id
        self.relay = relay
        self._turnstile = turnstile
        self._start = {
            "type": "run_start",
            "runId": run_id,
            "method": mode,
            "input": journaled_input,
        }
        #: Called once the end is journaled: the agent's session files catch up (fsync).
        self._on_end = on_end
        self.started = False
        self.ended = False

    async def start(self) -> None:
        await self.hosted.record(self._start)
        self.started = True

    async def emit(self, event: StreamEvent) -> None:
        """Journal one event of the turn (and send it to a streaming caller)."""
        hosted, relay, run_id = self.hosted, self.relay, self.run_id
        wire = event.to_wire()
        raw = event.acp_update
        if (
            relay is not None
            and raw is None
            and wire["type"] == "text"
            and not hosted.paced  # a join adds bytes no paced reader was waited for
            and relay.join(wire["data"])
        ):
            return
        # Before an entry's work (a join above costs next to nothing): many
        # streams' entries in one loop iteration would hold up every other
        # connection's reads (D23).
        if not self._turnstile.pass_now():
            await self._turnstile.turn()
        if wire["type"] == "update":  # a raw ACP update is an entry of its own (§13.3)
            entry = await hosted.record({"type": "update", "update": wire["data"]})
        elif raw is None:
            data = {"type": "event", "runId": run_id, "event": wire}
            entry = hosted.record_now(data) or await hosted.record_paced(data)
        elif wire["type"] in ("text", "reasoning"):
            # A chunk with more than its text: the entry keeps the update as
            # sent, for the ACP facade to relay unchanged (docs/acp.md).
            data = {"type": "event", "runId": run_id, "event": wire, "update": raw}
            entry = await hosted.record(data)
        else:  # a typed ACP update (D15): journaled raw as every update is, streamed typed
            entry = await hosted.record({"type": "update", "update": raw})
        if relay is not None:
            # At once to an idle connection; joined into while its socket is
            # backed up (server/agents/relay.py).  The caller's socket still
            # paces the run, and a client that stops reading is dropped by
            # the send watchdog.
            await relay.send(entry, wire)

    async def end(self, result: AgentRunResult) -> None:
        """Journal the run's result, once, and persist it (the agent's session files)."""
        if self.ended:
            return
        with anyio.CancelScope(shield=True):  # the result is the record: always journaled
            if not self.started:  # cancelled in its queue
                await self.start()
            self.ended = True
            end = {"type": "run_end", "runId": self.run_id, "result": result.to_wire()}
            await self.hosted.record(end)
            self._on_end()

    async def settle(
        self, result: AgentRunResult | None, error: BaseException | None = None
    ) -> AgentRunResult | None:
        """Journal the run's end if the turn did not: ``result`` (a run cancelled in its
        queue), else cancelled (``error`` a cancellation) or failed (``error`` a bug).

        Returns what the journal now says; ``None`` when the turn had journaled it.
        """
        if self.ended:
            return None
        if result is None:
            if isinstance(error, Exception):  # a bug, logged by whoever serves the request
                result = AgentRunResult.failed(self.run_id, error, "internal")
            else:  # a cancellation (or the daemon's own end)
                result = AgentRunResult.failed(self.run_id, RunCancelledError(), "cancelled")
        await self.end(result)
        return result

    async def relaying(self, turn: Callable[[], Awaitable[AgentRunResult]]) -> AgentRunResult:
        """Run ``turn`` with the relay's sender beside it, when the caller streams.

        The sender lives as long as the turn: every ``run/event`` has gone (or
        been dropped with the connection) before the answer.
        """
        relay = self.relay
        if relay is None:
            return await turn()
        with unwrap_single_error():
            async with anyio.create_task_group() as group:
                group.start_soon(relay.run)
                try:
                    result = await turn()
                finally:
                    relay.close()
        return result


class TurnRunner:
    """Queues and runs the turns of open agents; see the module docstring."""

    def __init__(self, host: AgentHost, runs: Runs, remote: Remote, turnstile: Turnstile) -> None:
        self.host = host
        self.runs = runs
        self.remote = remote
        #: Every run's events pass it: a bounded share of each loop iteration (D23).
        self.turnstile = turnstile

    async def turn(
        self,
        session: Session,
        hosted: HostedAgent,
        mode: TurnMode,
        prepared: PreparedInput | PreparedPrompt,
        *,
        journaled_input: Any,
        run_id: str | None = None,
        detach: bool = False,
        meta: Mapping[str, Any] | None = None,
    ) -> AgentRunResult:
        """Queue and run one turn of ``prepared`` on ``hosted`` for ``session``, journaled.

        ``prepared`` is a :class:`PreparedPrompt` (the user turn) for the
        prompt modes.  ``detach``: the turn outlives its request.  ``meta``:
        the request's ``_meta`` for the agent (never journaled).
        """
        agent = hosted.agent
        await require_sandbox(agent.config)  # -32015 before anything is queued (§19.1)
        run = self.runs.new(run_id, hosted.agent_id, mode, session)
        permission = self.remote.permission_handler(session, hosted)
        hosted.use(session)
        relay = (
            CallerRelay(session, hosted.journal, run.run_id, joins=self.host.settings.join_text)
            if mode == "agent/stream"
            else None
        )
        journal = TurnJournal(
            hosted,
            run.run_id,
            self.turnstile,
            relay,
            mode=mode,
            journaled_input=journaled_input,
            on_end=lambda: self.host.save(hosted),
        )

        async def execute() -> AgentRunResult:
            await journal.start()
            return await journal.relaying(lambda: self._run(journal, prepared, permission, meta))

        # Not a closure over the run: the run would hold itself (a cycle, PROTOCOL §23).
        run.cancel = functools.partial(agent.cancel, run.run_id)
        return await self.runs.serve(run, hosted, execute, detach=detach, record=journal)

    async def _run(
        self,
        journal: TurnJournal,
        prepared: PreparedInput | PreparedPrompt,
        permission: PermissionHandler,
        meta: Mapping[str, Any] | None,
    ) -> AgentRunResult:
        hosted = journal.hosted
        agent = hosted.agent
        run_id, emit = journal.run_id, journal.emit
        if isinstance(prepared, PreparedPrompt):
            result = await agent.prompt(
                prepared, run_id=run_id, on_event=emit, permission_handler=permission, meta=meta
            )
        else:
            result = await agent.run(
                prepared, run_id=run_id, on_event=emit, permission_handler=permission, meta=meta
            )
        if journal.relay is not None:
            # The stream's events as Agent.stream gives them, but emitted from
            # the run itself: each is journaled and sent before the next is
            # made (the caller's socket paces the run), with no hand-over
            # between two tasks, which cost more than the relay's own work.
            # A hook failure is a result like any other here; its closing
            # events are the stream's (``error`` alone).
            for event in closing_events(result):
                await journal.emit(event)
        await journal.end(result)  # and the agent's session files catch up
        return result
