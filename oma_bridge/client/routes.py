"""Where the daemon's messages to one connection go, and what a handle uses of that connection.

The daemon sends a connection notifications (a stream's ``run/event``, a
team run's ``oma/progress``, a watched journal's ``agent/event``) and
requests (``hook/*``, ``permission/request``, ``elicitation/request``).
:class:`Routes` is the table that says who takes each: a handle registers
a :class:`Route` for what it waits for and closes it when done, so no
handle writes another object's maps.  :class:`Channel` is the connection
as a handle sees it (a :class:`~oma_bridge.client.Client` is one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from oma_bridge.callbacks import invoke
from oma_bridge.errors import WireError
from oma_bridge.results import AgentRunResult, StreamEvent
from oma_bridge.rpc import PendingCall
from oma_bridge.wire.codes import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND

if TYPE_CHECKING:  # the backends package (and the messages it brings) is not for clients
    from oma_bridge.backends import ElicitationHandler, PermissionHandler

__all__ = ["Channel", "Hooks", "Route", "Routes"]


#: Takes a stream event of one run.
RunSink = Callable[[StreamEvent], Awaitable[None]]
#: Takes a journal entry of one agent: its ``seq`` and the entry.
JournalSink = Callable[[int, dict[str, Any]], Awaitable[None]]
#: Sees an ``oma/progress`` event of one run (a plain callable or a coroutine function).
ProgressSink = Callable[[Any], Any]


class Hooks(Protocol):
    """Who serves an agent's hooks on this connection (a ``RemoteAgent``), read at each call."""

    before_run: Callable[..., Any] | None
    after_run: Callable[..., Any] | None


class Route:
    """One entry of a :class:`Routes` table; :meth:`close` (or the end of a ``with``) removes it.

    Closing a route that a newer one of the same key replaced leaves the newer one.
    """

    __slots__ = ("_key", "_table", "_value")

    def __init__(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        self._table, self._key, self._value = table, key, value
        table[key] = value

    def close(self) -> None:
        if self._table.get(self._key) is self._value:
            del self._table[self._key]

    def __enter__(self) -> Route:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class Routes:
    """Who takes each message the daemon sends to one connection."""

    def __init__(
        self,
        permission_handler: PermissionHandler | None = None,
        elicitation_handler: ElicitationHandler | None = None,
    ) -> None:
        self.permission_handler = permission_handler
        self.elicitation_handler = elicitation_handler
        self._runs: dict[str, RunSink] = {}
        self._progress: dict[str, ProgressSink] = {}
        self._journals: dict[str, JournalSink] = {}
        self._hooks: dict[str, Hooks] = {}

    def run_events(self, run_id: str, sink: RunSink) -> Route:
        """``run/event`` of ``run_id`` to ``sink``, in wire order."""
        return Route(self._runs, run_id, sink)

    def progress(self, run_id: str, sink: ProgressSink) -> Route:
        """``oma/progress`` of ``run_id`` to ``sink``; an error in it is ignored."""
        return Route(self._progress, run_id, sink)

    def journal(self, agent_id: str, sink: JournalSink) -> Route:
        """``agent/event`` of ``agent_id`` to ``sink``, in wire order."""
        return Route(self._journals, agent_id, sink)

    def hooks(self, agent_id: str, hooks: Hooks) -> Route:
        """Serve ``hook/beforeRun`` and ``hook/afterRun`` of ``agent_id`` with ``hooks``."""
        return Route(self._hooks, agent_id, hooks)

    # -- the peer's handlers ----------------------------------------------------

    async def notification(self, method: str, params: Any) -> None:
        """Hand a notification to whoever waits for it; nobody: it is dropped."""
        if not isinstance(params, Mapping):
            return
        run_id = params.get("runId")
        if method == "run/event" and run_id in self._runs:
            event = params.get("event") or {}
            data = event.get("data")
            if event.get("type") == "done":
                data = AgentRunResult.from_wire(data)
            await self._runs[run_id](StreamEvent(str(event.get("type")), data))  # type: ignore[arg-type]  # the daemon's word
        elif method == "agent/event" and params.get("agentId") in self._journals:
            entry, seq = params.get("entry"), params.get("seq")
            if isinstance(entry, dict) and isinstance(seq, int):
                await self._journals[str(params["agentId"])](seq, entry)
        elif method == "oma/progress" and run_id in self._progress:
            with contextlib.suppress(Exception):
                await invoke(self._progress[run_id], params.get("event"))

    async def request(self, method: str, params: Any) -> Any:
        """Answer a request of the daemon: a hook, a permission prompt, an elicitation."""
        if not isinstance(params, Mapping):
            raise WireError(INVALID_PARAMS, "params must be an object")
        if method == "permission/request":
            return await self._answer_permission(params)
        if method == "elicitation/request" and self.elicitation_handler is not None:
            from oma_bridge.backends import ElicitationRequest

            asked = {k: v for k, v in params.items() if k not in ("agentId", "runId")}
            run_id = params.get("runId")
            request = ElicitationRequest(
                str(params.get("agentId", "")), run_id if isinstance(run_id, str) else None, asked
            )
            return dict(await self.elicitation_handler(request))
        hooks = self._hooks.get(str(params.get("agentId")))
        if method == "hook/beforeRun" and hooks is not None and hooks.before_run is not None:
            answer = await invoke(hooks.before_run, params.get("context"))
            if not isinstance(answer, Mapping):
                raise WireError(INTERNAL_ERROR, "the beforeRun hook returned no object")
            return {k: answer[k] for k in ("prompt", "messages") if k in answer}
        if method == "hook/afterRun" and hooks is not None and hooks.after_run is not None:
            result = await invoke(hooks.after_run, AgentRunResult.from_wire(params.get("result")))
            return {"result": result.to_wire()}
        raise WireError(METHOD_NOT_FOUND, f"this client does not serve {method}")

    async def _answer_permission(self, params: Mapping[str, Any]) -> Any:
        if self.permission_handler is None:
            return {"outcome": {"outcome": "cancelled"}}
        from oma_bridge.backends import PermissionOption, PermissionRequest

        request = PermissionRequest(
            agent_name=str(params.get("agentId", "")),
            run_id=str(params.get("runId", "")),
            tool_call=dict(params.get("toolCall") or {}),
            options=tuple(
                PermissionOption(str(o.get("optionId")), str(o.get("name")), str(o.get("kind")))
                for o in params.get("options") or ()
                if isinstance(o, Mapping)
            ),
        )
        choice = await self.permission_handler(request)
        if choice is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": choice}}


class Channel(Protocol):
    """What a handle uses of its connection: a :class:`~oma_bridge.client.Client` is one."""

    @property
    def routes(self) -> Routes:
        """Where this connection's notifications and requests go."""
        ...

    @property
    def closed(self) -> anyio.Event:
        """Set once the connection has ended."""
        ...

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its result; an error answer raises a client error."""
        ...

    async def start_request(self, method: str, params: Any = None) -> PendingCall:
        """Send a request; its answer comes later, through the handle returned."""
        ...

    def start_soon(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``work`` in the background of the connection's block (it ends with the block)."""
        ...

    def reconnect(self) -> AbstractAsyncContextManager[Channel]:
        """A connection of its own to the same daemon, made as this one was."""
        ...
