"""``agent/fork`` and the facade's ``session/fork`` (PROTOCOL §22.4): a new agent from an open one.

The fork is a daemon agent of its own (a new ``agentId``), hosted as
``agent/open`` hosts one, on the parent's profile, overrides and daemon-chosen
backend settings (an ACP client's folder, its MCP servers), owned by the
connection that forked it:

* its **history** is a copy of the parent's and its backend starts as
  ``oma_bridge.agent.fork`` says per kind (an acp profile's agent forks its
  own session with ``session/fork``; llm and process agents need nothing);
* its **journal** begins with a copy of the parent's entries, their
  ``seq`` kept (``agent/watch``, ``session/load`` replay them), so a
  client sees the conversation it forked; from then on the two journals
  and histories are separate: nothing either does reaches the other;
* it is **persisted** like any session (``store.py``: header, the copied
  entries, history, meta, the downstream session), so it survives a
  restart and is resumed as any other.

Refused: a parent with a run queued or in flight (-32014: it would fork
half a turn), an acp profile's agent that does not fork (-32601, as ACP
answers a method an agent does not serve), a fork that fails in the agent
(-32603 with its reason).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import orjson

from oma_bridge.agent import advertises_fork, fork_config
from oma_bridge.backends.acp.config import AcpConfig
from oma_bridge.errors import OMAError, WireError
from oma_bridge.redaction import redact
from oma_bridge.rpc.codes import INTERNAL_ERROR, METHOD_NOT_FOUND
from oma_bridge.server.agents.registry import HostedAgent
from oma_bridge.server.agents.store import SessionStore
from oma_bridge.wire.codes import RUN_IN_PROGRESS

__all__ = ["Host", "can_fork", "fork_hosted"]

logger = logging.getLogger("oma_bridge.server")

#: Hosts the fork: ``(agentId, history, backend_update)`` -> the new agent.
Host = Callable[[str, list[Any], dict[str, Any]], HostedAgent]


def can_fork(kind: str, advertised: dict[str, Any] | None) -> bool:
    """Whether agents of a profile fork: llm and process always, acp when its agent says so
    (``advertised``: what the daemon last heard of it; unknown counts as no)."""
    return kind != "acp" or advertises_fork(advertised) is True


def _copy(value: Any) -> Any:
    # Entries are not shared: the parent's last event still grows as text joins it.
    return orjson.loads(orjson.dumps(value))


def _not_forked(parent: HostedAgent, why: str) -> WireError:
    return WireError(
        METHOD_NOT_FOUND,
        f'agent {parent.agent_id} (profile "{parent.profile_name}") cannot be forked: {why}',
        {"name": "ForkUnsupported"},
    )


async def fork_hosted(
    parent: HostedAgent,
    host: Host,
    store: SessionStore,
    known: dict[str, Any] | None = None,
) -> HostedAgent:
    """Fork ``parent`` (see the module docstring); ``known``: the profile's last capabilities."""
    if parent.busy():
        raise WireError(
            RUN_IN_PROGRESS,
            f"agent {parent.agent_id} has a run queued or in flight: fork it once the run ended",
            {"running": True},
        )
    agent = parent.agent
    if agent.kind == "acp" and advertises_fork(agent.advertised() or known) is False:
        raise _not_forked(parent, "its agent does not advertise session/fork")
    try:
        config = await fork_config(agent)
    except WireError as error:  # the agent's own answer to session/fork
        if error.rpc_code == METHOD_NOT_FOUND:
            why = f"its agent does not serve session/fork ({error.message})"
            raise _not_forked(parent, why) from None
        raise WireError(INTERNAL_ERROR, redact(f"session/fork failed: {error.message}")) from None
    except OMAError as error:
        if agent.kind == "acp" and advertises_fork(agent.advertised()) is False:
            raise _not_forked(parent, "its agent does not advertise session/fork") from None
        raise WireError(INTERNAL_ERROR, redact(error.message)) from None
    history = list(config.history)
    backend_update = {k: v for k, v in parent.backend_update.items() if k != "resume_session"}
    downstream = config.backend.resume_session if isinstance(config.backend, AcpConfig) else None
    if downstream is not None:
        backend_update["resume_session"] = downstream
    agent_id = "agt_" + secrets.token_hex(8)
    forked = host(agent_id, history, backend_update)
    entries = [(entry.seq, _copy(entry.data)) for entry in parent.journal.entries()]
    forked.journal.restore(entries)
    meta = {key: value for key, value in _copy(parent.meta).items() if key != "acpSession"}
    meta.update(forkedFrom=parent.agent_id, updatedAt=time.time())
    forked.meta.update(meta)
    if downstream is not None:
        forked.meta["acpSession"] = downstream
    _persist(store, forked, parent, entries, history, meta, downstream)
    logger.info(
        "agent %s forked from %s (profile %s)", agent_id, parent.agent_id, parent.profile_name
    )
    return forked


def _persist(
    store: SessionStore,
    forked: HostedAgent,
    parent: HostedAgent,
    entries: list[tuple[int, dict[str, Any]]],
    history: list[Any],
    meta: dict[str, Any],
    downstream: str | None,
) -> None:
    agent_id = forked.agent_id
    store.create(agent_id, parent.profile_name, parent.overrides.model_dump(exclude_none=True))
    for seq, data in entries:
        store.write(agent_id, {"seq": seq, "entry": data})
    store.write(agent_id, {"history": history})
    store.write(agent_id, {"meta": meta})
    if downstream is not None:
        store.write(agent_id, {"acpSession": downstream})
    store.sync(agent_id)
