"""What each acp profile's agent can do, as the daemon last heard it (PROTOCOL §22.2).

The backend of each agent keeps what its agent said at its last
``initialize`` (``Agent.advertised()``); this keeps, per profile, the newest
of what the daemon's agents of that profile said, so that ``agents/list``
and ``daemon/status`` still show it once those agents have closed:
:meth:`ProfileCapabilities.read` takes in what the open agents say now, an
agent's last word is noted when it closes, and a probe's when it ends.  A
reload forgets the profiles it changes or removes (another command may
say other things).  One-off agents (``oma/runAgent``, team tasks) live in
the orchestrator and are not heard here; a probe fills their profiles in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from oma_bridge.agent import Agent

__all__ = ["ProfileCapabilities"]


class ProfileCapabilities:
    """The newest capabilities of each profile's agents, by profile name."""

    def __init__(self) -> None:
        self._by_profile: dict[str, dict[str, Any]] = {}
        #: The open agents that can say something (acp ones), by profile: what
        #: :meth:`read` asks, so that a daemon with thousands of other agents
        #: open answers ``daemon/status`` and ``initialize`` without asking each.
        self._open: dict[Agent, str] = {}

    def note(self, profile: str, advertised: Mapping[str, Any] | None) -> None:
        """Keep ``advertised`` for ``profile`` unless the daemon heard a newer one."""
        if advertised is None:
            return
        known = self._by_profile.get(profile)
        if known is None or advertised["initializedAt"] >= known["initializedAt"]:
            self._by_profile[profile] = dict(advertised)

    def opened(self, profile: str, agent: Agent) -> None:
        """``agent`` of ``profile`` is open: :meth:`read` hears it until :meth:`note_agent`."""
        if agent.kind == "acp":
            self._open[agent] = profile

    def note_agent(self, profile: str, agent: Agent) -> None:
        """Keep what ``agent`` last said (it closes: it is asked no more)."""
        self._open.pop(agent, None)
        self.note(profile, agent.advertised())

    def read(self, agents: Iterable[tuple[str, Agent]] = ()) -> dict[str, dict[str, Any]]:
        """Every profile's capabilities, the open agents (and ``(profile, agent)`` pairs) first."""
        for agent, profile in self._open.items():
            self.note(profile, agent.advertised())
        for profile, agent in agents:
            self.note(profile, agent.advertised())
        return {profile: dict(advertised) for profile, advertised in self._by_profile.items()}

    def forget_changed(self, before: Mapping[str, object], after: Mapping[str, object]) -> None:
        """A reload: forget the profiles that ``after`` removes or declares otherwise."""
        for profile in list(self._by_profile):
            if profile not in after or after[profile] != before.get(profile):
                del self._by_profile[profile]
