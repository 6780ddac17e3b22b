"""``CommandSettings``: the keys of every backend that runs a command (process, ACP).

Declared once here, for the library's configs and for the daemon's
``[agents.*]`` profiles alike, which derive from the backends' settings
(``docs/architecture.md``, "One declaration per key").  The scalar types are
strict: a TOML ``"5"`` is not a number, nor ``"yes"`` a boolean.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictStr

__all__ = ["CommandSettings"]


class CommandSettings(BaseModel):
    """``command`` exec'd directly (no shell) with ``args``; ``env`` laid over the environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: StrictStr = Field(min_length=1)
    args: tuple[StrictStr, ...] = ()
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    #: Whole-run limit; the run ends with status ``timeout`` when it passes.
    timeout_s: StrictFloat | None = Field(default=None, gt=0)
    #: Between SIGTERM and SIGKILL when the agent's processes end.
    stop_grace_s: StrictFloat = Field(default=5.0, ge=0)
