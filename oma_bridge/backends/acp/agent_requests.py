"""What an ACP agent asks of its client, answered for the turn it came in.

``session/request_permission`` goes to the run's permission handler unless
the profile's ``permission`` policy decides; ``elicitation/create`` to the
run's elicitation handler (``cancel`` when nobody can answer);
``elicitation/complete`` to whoever is told of completions; ``fs/*`` and
``terminal/*`` to :class:`~oma_bridge.backends.acp.client_methods.ClientMethods`.
Each request is answered from the :class:`~oma_bridge.backends.acp.turn_state.TurnState`
it arrived in (``None`` between runs), never from whichever run is going
when the answer is made: a cancelled or finished turn refuses what its
agent still asks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from oma_bridge.backends import ElicitationRequest, PermissionRequest
from oma_bridge.backends.acp.client_methods import ClientMethods
from oma_bridge.backends.acp.config import AcpConfig
from oma_bridge.backends.acp.services import ClientServices
from oma_bridge.backends.acp.terminal import Terminals
from oma_bridge.backends.acp.turn_state import TurnState
from oma_bridge.backends.elicitation import CANCEL, valid_answer
from oma_bridge.backends.permissions import (
    CANCELLED_OUTCOME,
    choose_option,
    parse_options,
    selected,
)
from oma_bridge.errors import WireError
from oma_bridge.observe import report
from oma_bridge.rpc.codes import METHOD_NOT_FOUND

__all__ = ["AgentRequests"]

logger = logging.getLogger(__name__)


class AgentRequests:
    """The client side of one ACP agent: its requests and notifications, answered."""

    def __init__(self, config: AcpConfig, cwd: Path, terminals: Terminals, *, label: str) -> None:
        self._config = config
        self._label = label
        self._terminals = terminals
        self._methods = ClientMethods(config, cwd, terminals, label=label, who=self.who)

    def who(self) -> dict[str, str]:
        """Whose the agent is, for the observers (the daemon's labels, ``agentId``)."""
        agent_id = self._config.labels.get("agentId")
        return {"agentId": agent_id} if agent_id else {}

    async def answer(
        self,
        method: str,
        params: dict[str, Any],
        turn: TurnState | None,
        services: ClientServices,
    ) -> Any:
        """The answer to one request of the agent that came during ``turn`` (``None``:
        between runs, with the latest run's ``services``)."""
        if method == "session/request_permission":
            return await self._permission(params, turn)
        if method == "elicitation/create":
            return await self._elicitation(params, turn)
        if self._methods.serves(method):
            return await self._methods.handle(
                method,
                params,
                forwarder=services.client_forwarder,
                run_id=turn.run_id if turn is not None else None,
            )
        raise WireError(METHOD_NOT_FOUND, f"Method not found: {method}")

    async def completed(self, params: Mapping[str, Any], services: ClientServices) -> None:
        """Pass the agent's ``elicitation/complete`` on as it is; without a handler, drop it."""
        handler = services.elicitation_complete_handler
        if handler is None or not isinstance(params.get("elicitationId"), str):
            logger.debug("ACP agent %s: elicitation/complete dropped", self._label)
            return
        try:
            await handler(params)
        except Exception:
            logger.exception("ACP agent %s: elicitation complete handler failed", self._label)

    async def release(self, run_id: str | None) -> None:
        """End the host's terminals and release the clients' (a cancel, the end of the agent)."""
        await self._terminals.close_all()
        await self._methods.release_client_terminals(run_id)

    async def close_terminals(self) -> None:
        await self._terminals.close_all()

    async def release_client_terminals(self, run_id: str | None) -> None:
        await self._methods.release_client_terminals(run_id)

    # -- permission ----------------------------------------------------------------

    async def _permission(self, params: dict[str, Any], turn: TurnState | None) -> Any:
        options = parse_options(params.get("options"))
        if turn is None or not turn.asks_user:
            return CANCELLED_OUTCOME
        policy = self._config.permission
        raw_call = params.get("toolCall")
        tool_call = {
            key: raw_call[key]
            for key in ("toolCallId", "title", "kind", "rawInput")
            if isinstance(raw_call, dict) and key in raw_call
        }
        if policy in ("auto-approve", "reject"):
            # The profile decides: reported as the policy's decision (the audit log).
            chosen = choose_option(options, "allow" if policy == "auto-approve" else "reject")
            report(
                "permission",
                runId=turn.run_id,
                toolCall={k: v for k, v in tool_call.items() if k != "rawInput"},
                options=[option.option_id for option in options],
                outcome={"outcome": "selected", "optionId": chosen}
                if chosen is not None
                else {"outcome": "cancelled"},
                decidedBy="policy",
                **self.who(),
            )
            return selected(chosen)
        least = choose_option(options, "reject")
        handler = turn.permission_handler
        if handler is None:
            return selected(least)
        request = PermissionRequest(
            self._label,
            turn.run_id,
            tool_call,
            options,
            acp_params={key: value for key, value in params.items() if key != "sessionId"},
        )
        try:
            with anyio.move_on_after(self._config.permission_timeout_s) as waited:
                choice = await handler(request)
            if waited.cancelled_caught:
                logger.info("ACP agent %s: permission request timed out", self._label)
                return selected(least)
        except Exception:
            logger.exception("ACP agent %s: permission handler failed", self._label)
            return selected(least)
        if choice is not None and choice not in {o.option_id for o in options}:
            logger.warning("ACP agent %s: permission answer %r is no option", self._label, choice)
            return selected(least)
        return selected(choice)

    # -- elicitation ------------------------------------------------------------------

    async def _elicitation(self, params: dict[str, Any], turn: TurnState | None) -> dict[str, Any]:
        """Ask the run's elicitation handler; ``cancel`` when nobody can answer."""
        asked = {k: v for k, v in params.items() if k not in ("sessionId", "requestId")}
        request = ElicitationRequest(self._label, turn.run_id if turn else None, asked)
        handler = turn.services.elicitation_handler if turn is not None else None
        if turn is None or not turn.asks_user or handler is None:
            report(
                "elicitation",
                runId=request.run_id,
                mode=request.mode,
                action="cancel",
                decidedBy="no-client",
                **self.who(),
            )
            return CANCEL
        try:
            with anyio.move_on_after(self._config.permission_timeout_s) as waited:
                answer = await handler(request)
            if waited.cancelled_caught:
                logger.info("ACP agent %s: elicitation timed out", self._label)
                return CANCEL
        except Exception:
            logger.exception("ACP agent %s: elicitation handler failed", self._label)
            return CANCEL
        valid = valid_answer(answer)
        if valid is None:
            logger.warning(
                "ACP agent %s: malformed elicitation answer taken as cancel", self._label
            )
            return CANCEL
        return valid
