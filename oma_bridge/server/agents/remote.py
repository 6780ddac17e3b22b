"""Hooks and permission prompts as requests from the daemon to its clients.

Hooks go to the agent's hook owner (the opener, or the last ``agent/attach``)
and fail the run when nobody answers in ``hook_timeout_s``.  A permission
request of a run goes to the run's own connection while it is open and
declared ``permissions``; otherwise to the agent's watchers that declared
them and its ACP facade clients, where the first valid answer wins and the
others are withdrawn with ``$/cancel_request``; with nobody to ask, the
least-privilege reject.  An ACP agent's elicitation goes the same way (the
capability is ``elicitation``), with ``cancel`` as the answer of nobody; its
``elicitation/complete`` (a URL-mode one done) goes to the ACP clients that
were asked that elicitation.
Every decision goes to the audit log with who made it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import anyio

from oma_bridge.backends import (
    ElicitationCompleteHandler,
    ElicitationHandler,
    ElicitationRequest,
    PermissionHandler,
    PermissionRequest,
)
from oma_bridge.backends.elicitation import CANCEL, valid_answer
from oma_bridge.backends.permissions import choose_option, option_from_answer
from oma_bridge.errors import CallbackError, WireError
from oma_bridge.results import AgentRunResult
from oma_bridge.rpc import ConnectionClosedError
from oma_bridge.server.agents.registry import HookTarget, HostedAgent
from oma_bridge.server.audit import AuditLog, decided_by_client
from oma_bridge.server.config import ServerSection
from oma_bridge.server.profiles import agent_profile_info
from oma_bridge.server.session import Session
from oma_bridge.wire.params import HookFlags

__all__ = ["Remote"]


#: Whom to ask, with which method and params.
_Ask = tuple[Session, str, dict[str, Any]]
#: How much of an elicitation's message the audit log keeps.
_MESSAGE_LIMIT = 200
#: URL-mode elicitations whose ACP clients are remembered for ``elicitation/complete``.
_URL_ELICITATIONS_KEPT = 256


def _answers(answer: Any, request: PermissionRequest) -> bool:
    """Whether ``answer`` is a valid choice: a cancel, or an option that was offered."""
    outcome = answer.get("outcome") if isinstance(answer, Mapping) else None
    if not isinstance(outcome, Mapping):
        return False
    if outcome.get("outcome") == "cancelled":
        return True
    chosen = outcome.get("optionId")
    return outcome.get("outcome") == "selected" and any(
        option.option_id == chosen for option in request.options
    )


class Remote:
    """Builds the hooks and permission handlers that ask clients; see the module docstring."""

    def __init__(self, settings: ServerSection, audit: AuditLog) -> None:
        self.settings = settings
        self.audit = audit
        #: (agentId, elicitationId) -> the ACP clients sent that URL-mode elicitation.
        self._url_asked: dict[tuple[str, str], list[Session]] = {}

    # -- hooks ---------------------------------------------------------------

    def hooks(self, target: Callable[[], HookTarget], flags: HookFlags) -> dict[str, Any]:
        """The agent's ``before_run`` / ``after_run``, served by ``target().owner``."""
        timeout = self.settings.hook_timeout_s

        async def ask(method: str, params: dict[str, Any]) -> Any:
            hosted = target()
            owner = hosted.owner
            if owner is None or owner.closed:
                raise CallbackError(
                    f'the hook owner of agent "{hosted.agent_id}" is disconnected; '
                    "reconnect and call agent/attach"
                )
            try:
                with anyio.fail_after(timeout):
                    return await owner.request(method, params)
            except TimeoutError:
                raise CallbackError(f"{method} got no answer within {timeout:g}s") from None
            except ConnectionClosedError:
                raise CallbackError(f"the hook owner disconnected during {method}") from None
            except WireError as error:
                raise CallbackError(f"{method} failed: {error.message}") from None

        async def before_run(context: dict[str, Any]) -> Any:
            hosted = target()
            answer = await ask(
                "hook/beforeRun",
                {
                    "agentId": hosted.agent_id,
                    "runId": context.get("runId"),
                    "context": {
                        "prompt": context["prompt"],
                        "messages": context["messages"],
                        "agent": agent_profile_info(hosted.profile_name, hosted.profile),
                    },
                },
            )
            if not isinstance(answer, Mapping):
                raise CallbackError("hook/beforeRun answered something other than an object")
            return answer

        async def after_run(result: AgentRunResult) -> AgentRunResult:
            hosted = target()
            answer = await ask(
                "hook/afterRun",
                {"agentId": hosted.agent_id, "runId": result.run_id, "result": result.to_wire()},
            )
            try:
                if not isinstance(answer, Mapping):
                    raise ValueError("the answer is not an object")
                return AgentRunResult.from_wire(answer.get("result"))
            except ValueError as error:
                raise CallbackError(f"hook/afterRun answered a malformed result: {error}") from None

        hooks: dict[str, Any] = {}
        if flags.beforeRun:
            hooks["before_run"] = before_run
        if flags.afterRun:
            hooks["after_run"] = after_run
        return hooks

    # -- permissions ---------------------------------------------------------

    def permission_handler(self, session: Session, hosted: HostedAgent | None) -> PermissionHandler:
        """Answers the permission requests of one run started by ``session``."""
        agent_id = hosted.agent_id if hosted is not None else None

        async def ask(request: PermissionRequest) -> str | None:
            params = {
                "agentId": agent_id,
                "runId": request.run_id,
                "toolCall": dict(request.tool_call),
                "options": [
                    {"optionId": o.option_id, "name": o.name, "kind": o.kind}
                    for o in request.options
                ],
            }
            # The run's own connection first; when it cannot answer (it never
            # declared permissions, or it is gone), everyone attached to the
            # agent who can: watchers that declared permissions, ACP clients.
            stages: list[list[_Ask]] = []
            if session.capabilities.permissions:
                stages.append([(session, "permission/request", params)])
            if hosted is not None:
                stages.append(
                    [
                        (w.session, "permission/request", params)
                        for w in hosted.watchers.values()
                        if w.session.capabilities.permissions
                    ]
                    + [
                        (client.session, "session/request_permission", acp_params)
                        for client in hosted.acp_clients.values()
                        if (acp_params := client.permission_params(request))
                    ]
                )
            decided = await self._decide(stages, lambda answer: _answers(answer, request))
            if isinstance(decided, tuple):
                winner, answer = decided
                chosen = option_from_answer(answer, request.options)
                self._record_permission(agent_id, request, chosen, decided_by_client(winner))
                return chosen
            chosen = choose_option(request.options, "reject")
            self._record_permission(agent_id, request, chosen, decided)
            return chosen

        return ask

    # -- elicitations --------------------------------------------------------

    def elicitation_handler(
        self, target: Callable[[], HostedAgent], run_session: Callable[[str | None], Session | None]
    ) -> ElicitationHandler:
        """Answers the elicitations of an agent's ACP agent (``docs/acp.md``, "Elicitations").

        Routed as permission requests are: the run's own connection first when
        it declared ``elicitation``, then everyone attached who can answer
        (watchers that declared ``elicitation``, ACP clients that advertised
        the request's mode); the first valid answer wins; nobody: ``cancel``.
        """

        async def ask(request: ElicitationRequest) -> Mapping[str, Any]:
            hosted = target()
            own = run_session(request.run_id)
            params = {"agentId": hosted.agent_id, "runId": request.run_id, **request.params}
            stages: list[list[_Ask]] = []
            if own is not None and own.capabilities.elicitation:
                stages.append([(own, "elicitation/request", params)])
            stages.append(
                [
                    (w.session, "elicitation/request", params)
                    for w in hosted.watchers.values()
                    if w.session.capabilities.elicitation and w.session is not own
                ]
                + [
                    (client.session, "elicitation/create", client_params)
                    for client in hosted.acp_clients.values()
                    if (client_params := client.elicitation_params(request)) is not None
                ]
            )
            self._remember_url(hosted.agent_id, request, stages[-1])
            decided = await self._decide(stages, lambda answer: valid_answer(answer) is not None)
            answer: dict[str, Any] = CANCEL
            by: Any = decided
            if isinstance(decided, tuple):
                answer, by = valid_answer(decided[1]) or CANCEL, decided_by_client(decided[0])
            self.audit.record(
                "elicitation",
                hosted.agent_id,
                runId=request.run_id,
                mode=request.mode,
                message=str(request.params.get("message", ""))[:_MESSAGE_LIMIT],
                toolCallId=request.params.get("toolCallId"),
                action=answer["action"],
                decidedBy=by,
            )
            return answer

        return ask

    def _remember_url(self, agent_id: str, request: ElicitationRequest, asked: list[_Ask]) -> None:
        elicitation_id = request.params.get("elicitationId")
        if request.mode != "url" or not isinstance(elicitation_id, str):
            return
        clients = [who for who, method, _ in asked if method == "elicitation/create"]
        self._url_asked[(agent_id, elicitation_id)] = clients
        while len(self._url_asked) > _URL_ELICITATIONS_KEPT:
            del self._url_asked[next(iter(self._url_asked))]

    def elicitation_complete_handler(
        self, target: Callable[[], HostedAgent]
    ) -> ElicitationCompleteHandler:
        """Relays an ACP agent's ``elicitation/complete`` (``docs/acp.md``, "Elicitations").

        To the ACP clients that were sent that elicitation and are still
        attached; for an elicitation nobody here was asked, to every attached
        ACP client that advertised URL-mode elicitations.  The params go as the
        agent sent them (``elicitationId``, ``_meta``).
        """

        async def complete(params: Mapping[str, Any]) -> None:
            hosted = target()
            asked = self._url_asked.pop((hosted.agent_id, str(params["elicitationId"])), None)
            if asked is not None:
                clients = [c.session for c in hosted.acp_clients.values() if c.session in asked]
            else:
                clients = [c.session for c in hosted.acp_clients.values() if c.elicits("url")]
            for session in clients:
                await session.notify("elicitation/complete", dict(params))

        return complete

    # -- asking clients --------------------------------------------------------

    async def _decide(
        self, stages: Sequence[Sequence[_Ask]], valid: Callable[[Any], bool]
    ) -> tuple[Session, Any] | Literal["timeout", "no-client"]:
        """Ask stage by stage until one gives a valid answer: the winner and its answer."""
        for stage in stages:
            askable = [ask for ask in stage if not ask[0].closed]
            if askable:
                decided = await self._first_answer(askable, valid)
                if decided is not None:
                    return decided
        return "no-client"

    async def _first_answer(
        self, asks: Sequence[_Ask], valid: Callable[[Any], bool]
    ) -> tuple[Session, Any] | Literal["timeout"] | None:
        """Ask every session at once; the first valid answer wins, the rest are withdrawn.

        ``"timeout"`` when nobody answered within ``permission_timeout_s``;
        ``None`` when every one of them failed (gone, an error, a malformed answer).
        """
        winner: tuple[Session, Any] | None = None
        settled = anyio.Event()
        calls = []
        for candidate, method, params in asks:
            try:
                call = await candidate.start_request(method, params)
            except ConnectionClosedError:
                continue
            calls.append((candidate, call))
        pending = len(calls)

        async def wait_one(candidate: Session, call: Any) -> None:
            nonlocal winner, pending
            try:
                answer = await call.wait()
            except (WireError, ConnectionClosedError):
                answer = None
            if winner is None and answer is not None and valid(answer):
                winner = (candidate, answer)
                settled.set()
            pending -= 1
            if pending == 0:
                settled.set()

        try:
            if calls:
                async with anyio.create_task_group() as tg:
                    for candidate, call in calls:
                        tg.start_soon(wait_one, candidate, call)
                    with anyio.move_on_after(self.settings.permission_timeout_s) as timer:
                        await settled.wait()
                    tg.cancel_scope.cancel()
                if timer.cancelled_caught:
                    return "timeout"
        finally:
            with anyio.CancelScope(shield=True):
                for _candidate, call in calls:
                    if not call.settled:
                        await call.withdraw()
        return winner

    def _record_permission(
        self, agent_id: str | None, request: PermissionRequest, chosen: str | None, by: Any
    ) -> None:
        tool_call = request.tool_call
        self.audit.record(
            "permission",
            agent_id,
            runId=request.run_id,
            toolCall={
                key: tool_call.get(key)
                for key in ("toolCallId", "title", "kind")
                if tool_call.get(key) is not None
            },
            options=[option.option_id for option in request.options],
            outcome={"outcome": "selected", "optionId": chosen}
            if chosen is not None
            else {"outcome": "cancelled"},
            decidedBy=by,
        )
