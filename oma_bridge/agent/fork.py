"""The config of a fork of an agent (PROTOCOL §22.4): ``Agent.fork`` and ``agent/fork``.

A fork starts where its parent is, and from then on each goes its own way:

* **llm** agents fork natively: the fork's history is a copy of the
  parent's, so its next turn sees the same conversation, and neither sees
  the other's later turns;
* **process** agents are stateless: the fork is an agent of the same config
  (its history copied as well, for ``get_history``);
* **acp** agents fork through their agent: ``session/fork`` of the parent's
  session (the agent started and the session opened first when it is not
  running), the new session continued by the fork's backend with
  ``resume_session``.  An agent that does not advertise
  ``sessionCapabilities.fork`` is refused before anything is sent, when
  what it advertised is known (else its own error answer comes back).

Between runs only: a run in flight would leave the fork half a turn.
"""

from __future__ import annotations

from typing import Any, Protocol

from oma_bridge.agent.config import AgentConfig
from oma_bridge.backends.acp.config import AcpConfig
from oma_bridge.errors import BackendError
from oma_bridge.messages import LLMMessage

__all__ = ["Forkable", "advertises_fork", "fork_config"]


class Forkable(Protocol):
    """What a fork is made of: an :class:`~oma_bridge.Agent` (a protocol, so that this
    module and the agent's do not import each other)."""

    @property
    def name(self) -> str: ...

    @property
    def active_run_ids(self) -> list[str]: ...

    config: AgentConfig

    def get_history(self) -> list[LLMMessage]: ...

    def advertised(self) -> dict[str, Any] | None: ...

    async def session_request(self, method: str, params: dict[str, Any]) -> Any: ...


def advertises_fork(advertised: dict[str, Any] | None) -> bool | None:
    """Whether ACP capabilities (``Agent.advertised()``) say the agent forks; ``None``: unknown."""
    if advertised is None:
        return None
    caps = advertised.get("sessionCapabilities")
    return isinstance(caps, dict) and isinstance(caps.get("fork"), dict)


async def fork_config(agent: Forkable) -> AgentConfig:
    """The config of a new agent that starts where ``agent`` is (see the module docstring)."""
    if agent.active_run_ids:
        raise BackendError(
            f'Agent "{agent.name}" has a run in flight ({", ".join(agent.active_run_ids)}): '
            "fork it between runs"
        )
    config = agent.config
    history = agent.get_history()  # taken first: nothing the agent does next is in it
    backend = config.backend
    if isinstance(backend, AcpConfig):
        if advertises_fork(agent.advertised()) is False:
            raise BackendError(
                f'ACP agent "{agent.name}" does not advertise session/fork '
                "(sessionCapabilities.fork in its initialize)"
            )
        params = {
            "cwd": backend.remote_cwd or str(backend.resolved_cwd()),
            "mcpServers": list(backend.mcp_servers),
        }
        answer = await agent.session_request("session/fork", params)
        forked = answer.get("sessionId") if isinstance(answer, dict) else None
        if not isinstance(forked, str) or not forked:
            raise BackendError(f'ACP agent "{agent.name}" answered session/fork without sessionId')
        config = config.model_copy(
            update={"backend": backend.model_copy(update={"resume_session": forked})}
        )
    return AgentConfig(**{**dict(config), "history": history})
