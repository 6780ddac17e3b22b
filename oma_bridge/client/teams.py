"""Team runs on the daemon (docs/contract.md §15, docs/teams.md): params, results, handle."""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Protocol, TypeAlias

import anyio

from oma_bridge.client.errors import client_error
from oma_bridge.client.handles import new_run_id
from oma_bridge.client.routes import Channel, Route
from oma_bridge.errors import WireError
from oma_bridge.results import AgentRunResult, TokenUsage
from oma_bridge.rpc import PendingCall
from oma_bridge.waiting import Handover

__all__ = [
    "OnDisconnect",
    "RemoteTeamRun",
    "TaskLike",
    "TeamResult",
    "TeamTaskResult",
    "tasks_params",
    "team_params",
    "team_request",
]

#: How long leaving a run's block with an error waits for its cancel.
_STOP_GRACE_S = 5.0

#: What a run does when its connection closes (``onDisconnect``).
OnDisconnect: TypeAlias = Literal["cancel", "continue"]


#: A task of ``run_tasks``: a :class:`~oma_bridge.TaskSpec` or its wire mapping
#: (``{"id"?, "title", "description", "assignee": <profile>, "dependsOn"?, "maxRetries"?}``).
class _TaskObject(Protocol):
    """A :class:`~oma_bridge.TaskSpec` as the client sees it (no import of the library)."""

    def to_wire(self) -> dict[str, Any]: ...


TaskLike: TypeAlias = _TaskObject | Mapping[str, Any]


@dataclass(frozen=True)
class TeamTaskResult:
    """One task of a team run as the daemon answered it.

    ``status`` is ``completed``, ``failed``, ``skipped`` or ``cancelled``;
    ``result`` is the last attempt's (``None`` for a task that never ran).
    """

    id: str
    title: str
    assignee: str
    status: str
    result: AgentRunResult | None = None


@dataclass(frozen=True)
class TeamResult:
    """The answer of ``oma/runTasks`` / ``oma/runTeam`` (``TeamRunResult``, docs/contract.md §15).

    ``output`` is the combined output of the tasks (``run_tasks``) or the
    coordinator's synthesis (``run_team``), as docs/teams.md says; ``wire``
    keeps the answer as it came.
    """

    run_id: str
    success: bool
    output: str
    tasks: tuple[TeamTaskResult, ...]
    token_usage: TokenUsage
    wire: dict[str, Any]

    def task(self, title_or_id: str) -> TeamTaskResult:
        """The task with this id, or else this title; ``KeyError`` if none."""
        for task in self.tasks:
            if task.id == title_or_id:
                return task
        for task in self.tasks:
            if task.title == title_or_id:
                return task
        raise KeyError(title_or_id)

    @classmethod
    def from_wire(cls, wire: Any) -> TeamResult:
        """Parse the answer; ``ValueError`` when it is not the §15 shape."""
        if not isinstance(wire, dict) or not isinstance(wire.get("tasks"), list):
            raise ValueError("a TeamRunResult must be an object with a tasks list")
        usage = wire.get("tokenUsage")
        if not isinstance(usage, dict):
            usage = {}
        tasks = []
        for task in wire["tasks"]:
            if not isinstance(task, dict):
                raise ValueError("each task of a TeamRunResult must be an object")
            result = task.get("result")
            tasks.append(
                TeamTaskResult(
                    id=str(task.get("id", "")),
                    title=str(task.get("title", "")),
                    assignee=str(task.get("assignee", "")),
                    status=str(task.get("status", "")),
                    result=AgentRunResult.from_wire(result) if result is not None else None,
                )
            )
        return cls(
            run_id=str(wire.get("runId", "")),
            success=wire.get("success") is True,
            output=str(wire.get("output", "")),
            tasks=tuple(tasks),
            token_usage=TokenUsage(
                int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
            ),
            wire=wire,
        )


class RemoteTeamRun:
    """A team run in flight: its progress as an async iterator, then its result.

    An async context manager, made by :meth:`Client.tasks_run` /
    :meth:`Client.team_run`: entering sends the request.  Leaving the block
    normally waits for the run's answer; leaving it with an error (or a
    cancel) cancels the run (``run/cancel``: its tasks end ``cancelled`` /
    ``skipped``, their processes ended) and stops waiting.  An error answer
    the block never asked for with :meth:`result` is raised when it ends,
    so a refused run cannot pass unnoticed.  No task waits for the answer:
    the connection's reader hands the progress over and closes it when the
    answer comes (the daemon sends every event before its answer).
    """

    def __init__(self, client: Channel, method: str, params: dict[str, Any]) -> None:
        self.client = client
        self.run_id: str = params["runId"]
        self._method = method
        self._params = params
        self._events: Handover[dict[str, Any]] = Handover(math.inf)
        self._call: PendingCall | None = None
        self._route: Route | None = None
        self._asked = False

    async def progress(self) -> AsyncIterator[dict[str, Any]]:
        """Each ``oma/progress`` event (``{"type", "agent", "task"?, "data"}``), in order.

        It ends when the run has answered (the daemon sends every event before
        its answer); a run refused at once (-32010, -32602) has no events.
        """
        while True:
            try:
                event = await self._events.get()
            except anyio.EndOfStream:
                return
            yield event

    async def result(self) -> TeamResult:
        """The run's answer; raises :class:`InvalidMessageError` or :class:`DaemonError`."""
        self._asked = True
        return await self._answer()

    async def cancel(self) -> bool:
        """``run/cancel``: the running tasks end ``cancelled``, the rest ``skipped``."""
        return bool((await self.client.request("run/cancel", {"runId": self.run_id}))["cancelled"])

    async def _answer(self) -> TeamResult:
        if self._call is None:
            raise RuntimeError("a team run answers inside its async with block")
        try:
            answer = await self._call.wait()
        except WireError as error:
            raise client_error(error) from None
        return TeamResult.from_wire(answer)

    async def __aenter__(self) -> RemoteTeamRun:
        if self._route is not None:
            raise RuntimeError("a team run is entered once")
        self._route = self.client.routes.progress(self.run_id, self._events.put)
        try:
            self._call = await self.client.start_request(self._method, self._params)
        except BaseException:
            self._route.close()
            raise
        self._call.when_settled(self._events.close)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        call = self._call
        assert call is not None and self._route is not None
        try:
            if exc is None and self._asked:
                with contextlib.suppress(WireError):  # the block had the answer to handle
                    await call.wait()
            elif exc is None:
                await self._answer()
            elif not call.settled:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_STOP_GRACE_S):
                    with contextlib.suppress(Exception):
                        await self.cancel()
                    await call.withdraw()
        finally:
            self._route.close()
            self._events.close(discard=True)


async def team_request(
    client: Channel,
    method: str,
    params: dict[str, Any],
    on_progress: Callable[[dict[str, Any]], Any] | None,
) -> TeamResult:
    """``oma/runTasks`` or ``oma/runTeam`` answered whole; its progress to ``on_progress``."""
    with client.routes.progress(params["runId"], on_progress) if on_progress else nullcontext():
        return TeamResult.from_wire(await client.request(method, params))


def tasks_params(
    tasks: Sequence[TaskLike],
    max_concurrency: int | None,
    run_id: str | None,
    metadata: Mapping[str, Any] | None,
    on_disconnect: OnDisconnect,
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "tasks": [dict(task) if isinstance(task, Mapping) else task.to_wire() for task in tasks],
        "runId": run_id or new_run_id(),
        "onDisconnect": on_disconnect,
    }
    if max_concurrency is not None:
        params["maxConcurrency"] = max_concurrency
    if metadata is not None:
        params["metadata"] = dict(metadata)
    return params


def team_params(
    agents: Sequence[str],
    coordinator: str,
    goal: str,
    run_id: str | None,
    on_disconnect: OnDisconnect,
) -> dict[str, Any]:
    return {
        "team": {"agents": list(agents), "coordinator": coordinator},
        "goal": goal,
        "runId": run_id or new_run_id(),
        "onDisconnect": on_disconnect,
    }
