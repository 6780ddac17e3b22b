"""``CommandSettings``: the keys of every backend that runs a command (process, ACP).

Declared once here, for the library's configs and for the daemon's
``[agents.*]`` profiles alike, which derive from the backends' settings
(``docs/architecture.md``, "One declaration per key").  The scalar types are
strict: a TOML ``"5"`` is not a number, nor ``"yes"`` a boolean.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictStr,
    model_validator,
)

from oma_bridge.supervision.sandbox import Sandbox, SandboxKind, sandbox_info

__all__ = ["CommandSettings", "SandboxPath"]


def _sandbox_path(value: str) -> str:
    # Relative to what? Every reading is a guess: an absolute path, or the home's.
    if not (value.startswith("/") or value == "~" or value.startswith("~/")):
        raise ValueError(f"{value!r} must be an absolute path or start with ~/")
    return value


#: A path of ``sandbox_read`` / ``sandbox_write``: absolute, or ``~/...`` (the daemon user's home).
SandboxPath = Annotated[StrictStr, AfterValidator(_sandbox_path)]


class CommandSettings(BaseModel):
    """``command`` exec'd directly (no shell) with ``args``; ``env`` laid over the environment.

    ``sandbox = "bwrap"`` runs every process of the agent under bubblewrap
    (PROTOCOL §19.1, ``docs/isolation.md``): the system read-only, its
    folder read-write, ``sandbox_read`` / ``sandbox_write`` besides, no
    network but its own loopback with ``network = false``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: StrictStr = Field(min_length=1)
    args: tuple[StrictStr, ...] = ()
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    #: Whole-run limit; the run ends with status ``timeout`` when it passes.
    timeout_s: StrictFloat | None = Field(default=None, gt=0)
    #: Between SIGTERM and SIGKILL when the agent's processes end.
    stop_grace_s: StrictFloat = Field(default=5.0, ge=0)
    sandbox: SandboxKind = "none"
    sandbox_read: tuple[SandboxPath, ...] = ()
    sandbox_write: tuple[SandboxPath, ...] = ()
    network: StrictBool = True

    @model_validator(mode="after")
    def _sandbox_keys(self) -> Any:
        # A limit that nothing would enforce is refused, never ignored.
        if self.sandbox == "none":
            for key, value in (
                ("sandbox_read", self.sandbox_read),
                ("sandbox_write", self.sandbox_write),
                ("network = false", not self.network),
            ):
                if value:
                    raise ValueError(f'{key} needs sandbox = "bwrap": nothing applies it without')
        return self

    def sandbox_policy(self, folder: str | None = None) -> Sandbox | None:
        """The :class:`Sandbox` of this agent's processes (``None``: unsandboxed).

        ``folder`` is the agent's own, bound read-write (``None``: each spawn's cwd).
        """
        if self.sandbox == "none":
            return None
        return Sandbox(self.sandbox_read, self.sandbox_write, self.network, folder)

    def sandbox_info(self) -> dict[str, object]:
        """``{"kind", "network"}``, as ``agents/list`` and ``daemon/status`` show it."""
        return sandbox_info(self.sandbox, self.network)
