"""``agents/probe`` (extension, PROTOCOL §22.2): start each acp agent once to hear what it can do.

Each named acp profile (default: every one) gets an agent of its own, as
``agent/open`` would make it but with no client's overrides, whose backend
is asked to probe: the agent is spawned, sent ``initialize`` alone, and
ended (no session is opened, so an agent that wants a login first still
answers).  Its processes are supervised and labelled ``agentId =
probe:<profile>`` (``daemon/status`` lists them while they live), and none
outlives the probe.  At most :data:`MAX_PROBES` start at once, each within
:data:`PROBE_TIMEOUT_S` (a first ``npx`` start downloads its package).
What a probe heard is noted in the daemon's :class:`ProfileCapabilities`; a
profile whose agent could not be started gets the reason instead.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

import anyio

from oma_bridge.agent import Agent
from oma_bridge.errors import OMAError
from oma_bridge.server.agents.capabilities import ProfileCapabilities
from oma_bridge.server.agents.host import AgentHost
from oma_bridge.server.agents.overrides import agent_config
from oma_bridge.server.agents.status import AGENT_ID_LABEL
from oma_bridge.server.config import ServerSection
from oma_bridge.server.fixes import no_such_profile
from oma_bridge.server.profiles import Profile, agent_profile_infos
from oma_bridge.wire.codes import invalid_params, not_found

__all__ = ["MAX_PROBES", "PROBE_TIMEOUT_S", "probe_infos", "probe_profiles", "probed_names"]

logger = logging.getLogger("oma_bridge.server")

#: How long one agent may take to answer ``initialize``, its start included.
PROBE_TIMEOUT_S = 120.0
#: Agents started at once by one probe.
MAX_PROBES = 4


def probed_names(asked: Collection[str] | None, profiles: Mapping[str, Profile]) -> list[str]:
    """The profiles to probe: ``asked`` (each an acp profile), or every acp profile."""
    if asked is None:
        return [name for name, profile in profiles.items() if profile.kind == "acp"]
    for index, name in enumerate(asked):
        if name not in profiles:
            raise not_found(no_such_profile(name, profiles))
        if profiles[name].kind != "acp":
            message = f"a {profiles[name].kind} profile: only acp agents say what they can do"
            raise invalid_params([{"loc": ["profiles", index], "msg": message, "type": "kind"}])
    return list(dict.fromkeys(asked))


async def probe_profiles(
    names: Collection[str],
    profiles: Mapping[str, Profile],
    settings: ServerSection,
    heard: ProfileCapabilities,
) -> dict[str, str]:
    """Probe each of ``names`` (see the module docstring); the reasons of those that failed."""
    problems: dict[str, str] = {}
    limiter = anyio.CapacityLimiter(MAX_PROBES)

    async def probe(name: str) -> None:
        async with limiter:
            config = agent_config(
                name, profiles[name], settings, None, {AGENT_ID_LABEL: f"probe:{name}"}
            )
            agent = Agent(config)
            try:
                with anyio.fail_after(PROBE_TIMEOUT_S):
                    heard.note(name, await agent.probe())
            except TimeoutError:
                problems[name] = f"no answer to initialize within {PROBE_TIMEOUT_S:.0f} s"
            except OMAError as error:
                problems[name] = str(error)
            finally:
                with anyio.CancelScope(shield=True):
                    await agent.close()
            if name in problems:
                logger.info("probe of profile %s: %s", name, problems[name])

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(probe, name)
    return problems


async def probe_infos(asked: Collection[str] | None, host: AgentHost) -> list[dict[str, Any]]:
    """``agents/probe``'s answer: ``agents/list``'s rows once each asked acp agent started once."""
    profiles = host.config.agents
    problems = await probe_profiles(
        probed_names(asked, profiles), profiles, host.settings, host.capabilities
    )
    return agent_profile_infos(profiles, host.profile_capabilities(), problems)
