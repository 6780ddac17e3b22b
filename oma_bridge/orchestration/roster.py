"""The roster of a team run: who its members are, and the agents the run makes of them.

A member is an :class:`Agent` (the caller's: used as it is, left open) or an
:class:`AgentConfig` (the run makes the agent and closes it when it ends).
The coordinator of ``run_team`` is always made fresh, with the roster in
its system prompt (docs/teams.md, "run_team").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from oma_bridge.agent import Agent, AgentConfig
from oma_bridge.backends import PermissionHandler
from oma_bridge.errors import TeamError
from oma_bridge.orchestration.prompts import Member, coordinator_system_prompt

__all__ = [
    "AgentLike",
    "Defaults",
    "Roster",
    "Team",
    "coordinator_agent",
    "make_agent",
    "member_info",
    "members_of",
]

#: A team member: a ready :class:`Agent` (yours, used as it is and left open)
#: or an :class:`AgentConfig` (the run makes the agent and closes it).
AgentLike: TypeAlias = Agent | AgentConfig
#: Members by name, or a list of members named by their own ``name``.
Roster: TypeAlias = Mapping[str, AgentLike] | Sequence[AgentLike]


@dataclass(frozen=True)
class Team:
    """The members of a team and, for ``run_team``, its coordinator (an llm agent).

    Without a coordinator, ``run_team`` makes one named ``coordinator`` from
    the orchestrator's ``default_model`` / ``default_provider``.
    """

    agents: Roster
    coordinator: AgentLike | None = None


#: The orchestrator's defaults laid on a config (``default_model``, ...).
Defaults: TypeAlias = Callable[[AgentConfig], AgentConfig]


def members_of(roster: Roster) -> dict[str, AgentLike]:
    """Members by name; a config under another name in a mapping takes the key."""
    members: dict[str, AgentLike] = {}
    if isinstance(roster, Mapping):
        for name, member in roster.items():
            _check_member(member, name)
            if isinstance(member, AgentConfig) and member.name != name:
                member = member.model_copy(update={"name": name})
            elif isinstance(member, Agent) and member.name != name:
                raise TeamError(f'roster key "{name}" holds an agent named "{member.name}"')
            members[name] = member
        return members
    if isinstance(roster, str | bytes) or not isinstance(roster, Sequence):
        raise TeamError("a roster is a mapping of names to agents, or a list of agents")
    for member in roster:
        _check_member(member, None)
        if member.name in members:
            raise TeamError(f'two members of the team are named "{member.name}"')
        members[member.name] = member
    return members


def _check_member(member: object, name: str | None) -> None:
    if not isinstance(member, Agent | AgentConfig):
        where = f'"{name}"' if name is not None else "of the roster"
        raise TeamError(
            f"member {where} must be an Agent or an AgentConfig, got {type(member).__name__}"
        )


def member_info(agent: Agent) -> Member:
    """What the coordinator is told of a member."""
    config = agent.config
    return Member(agent.name, agent.kind, config.description, config.system_prompt)


def make_agent(
    defaults: Defaults, config: AgentConfig, permission_handler: PermissionHandler | None
) -> Agent:
    """An agent of the run (nothing starts until its first run)."""
    try:
        return Agent(defaults(config), permission_handler=permission_handler)
    except ValueError as error:  # a config no agent can be made of (no model, say)
        raise TeamError(f'member "{config.name}": {error}') from error


def coordinator_agent(
    defaults: Defaults,
    given: AgentLike | None,
    members: Mapping[str, Agent],
    permission_handler: PermissionHandler | None,
) -> Agent:
    """A fresh coordinator agent whose system prompt carries the roster.

    Its own system prompt (if any) replaces the preamble, as the reference's
    ``coordinator.systemPrompt`` does; its history is dropped (a plan starts
    from the goal alone).  An ``Agent`` given is used for its config only.
    """
    if isinstance(given, Agent):
        config, permission_handler = given.config, given.permission_handler or permission_handler
    else:
        config = given if given is not None else AgentConfig(name="coordinator")
    roster = [member_info(member) for member in members.values()]
    prompt = coordinator_system_prompt(roster, own=config.system_prompt)
    config = config.model_copy(update={"system_prompt": prompt, "history": ()})
    agent = make_agent(defaults, config, permission_handler)
    if agent.kind != "llm":
        raise TeamError(f'the coordinator "{agent.name}" must be an llm agent, not {agent.kind}')
    return agent
