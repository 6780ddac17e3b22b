"""``oma-bridge agents`` (and ``agents add``) and ``oma-bridge registry``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from oma_bridge.cli.common import connect_daemon, format_table
from oma_bridge.cli.status import daemon_pid
from oma_bridge.cli_exits import EXIT_FAILED, EXIT_INVALID


async def agents_command(args: argparse.Namespace) -> int:
    async with connect_daemon(args) as client:
        agents = await (client.probe_agents() if args.probe else client.list_agents())
    rows = [[a["name"], a["kind"], a.get("model", ""), a.get("description", "")] for a in agents]
    print(format_table(["NAME", "KIND", "MODEL", "DESCRIPTION"], rows) if rows else "no agents")
    advertised = [
        [a["name"], *capability_cells(a["capabilities"])] for a in agents if "capabilities" in a
    ]
    if advertised:
        print("\nCAPABILITIES (what each acp agent said at its last initialize)")
        print(format_table(["NAME", "LOAD", "SESSION", "PROMPT", "MCP", "AUTH"], advertised))
    for agent in agents:  # a profile whose runs would fail: said, not an error of `agents`
        if not agent.get("ready", True):
            print(f"oma-bridge: {agent['name']}: not ready: {agent['notReady']}", file=sys.stderr)
    failed = [a for a in agents if "probeError" in a]
    for agent in failed:
        print(f"oma-bridge: {agent['name']}: {agent['probeError']}", file=sys.stderr)
    return EXIT_FAILED if failed else 0


def capability_cells(caps: dict[str, Any]) -> list[str]:
    """One table row of an agent's capabilities: what it offers, by name."""

    def offered(values: Any) -> str:
        # ``{"image": true}``, ``{"resume": {}}``: a name is offered when its value is
        # true or an object (ACP's markers), not when false or null.
        chosen = [k for k, v in (values or {}).items() if v is True or isinstance(v, dict)]
        return ", ".join(sorted(chosen)) or "-"

    methods = [m.get("id") for m in caps.get("authMethods", []) if isinstance(m, dict)]
    return [
        "yes" if caps.get("loadSession") else "no",
        offered(caps.get("sessionCapabilities")),
        offered(caps.get("promptCapabilities")),
        offered(caps.get("mcpCapabilities")),
        ", ".join(str(m) for m in methods if m) or "-",
    ]


def registry_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``registry --version`` and ``registry list`` (read here, no daemon needed)."""
    from oma_bridge.acp_registry import RegistryError, load_registry, snapshot
    from oma_bridge.paths import default_config_path

    try:
        path, where = configured_registry(
            args.config or default_config_path(), must_exist=args.config is not None
        )
    except ValueError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    if args.snapshot_version:
        shipped = snapshot()
        print(f"ACP registry snapshot {shipped.commit} of {shipped.date} ({shipped.repository})")
        if path is not None:
            print(f"in use instead: {path} ({where})")
        return 0
    if args.registry_command != "list":
        parser.print_help()
        return 0
    try:
        registry = load_registry(path)
    except RegistryError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    rows = [
        [e.id, e.name, e.version, ", ".join(e.distributions), e.description]
        for e in registry.entries.values()
    ]
    print(format_table(["ID", "NAME", "VERSION", "DISTRIBUTION", "DESCRIPTION"], rows))
    for refused in registry.refused:
        print(f"oma-bridge: refused: {refused}", file=sys.stderr)
    print(f"\n{len(rows)} agents in {registry.source}; add one: oma-bridge agents add ID")
    return 0


def configured_registry(source: Path, *, must_exist: bool) -> tuple[Path | None, str]:
    """``[server] acp_registry`` of the config at ``source``, and where it is set.

    Read with tomllib alone (the rest of the config is the daemon's to
    check): a relative path is the config file's folder's, ``~`` is expanded.
    """
    import os
    import tomllib

    try:
        raw = tomllib.loads(source.expanduser().read_text(encoding="utf-8"))
    except FileNotFoundError:
        if must_exist:
            raise ValueError(f"{source}: no such file") from None
        return None, ""
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{source}: cannot read it: {exc}") from None
    server = raw.get("server")
    value = server.get("acp_registry") if isinstance(server, dict) else None
    if value is None:
        return None, ""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{source}: server.acp_registry: must be a path")
    path = Path(value).expanduser()
    folder = source.expanduser().resolve().parent
    return Path(os.path.normpath(path if path.is_absolute() else folder / path)), (
        f"[server] acp_registry in {source}"
    )


def agents_add_command(args: argparse.Namespace) -> int:
    """Append a registry profile to the user's config and say where, and how to reload."""
    from oma_bridge.acp_registry import RegistryError, load_registry
    from oma_bridge.paths import default_config_path
    from oma_bridge.server.config import ConfigError
    from oma_bridge.server.config_append import ConfigAppendError, append_agent_profile

    path = (args.config or default_config_path()).expanduser()
    try:
        registry_path, _ = configured_registry(path, must_exist=False)
        entry = load_registry(registry_path).entry(args.id)
    except (ValueError, RegistryError) as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    if not entry.packages and args.binary_path is None:
        from oma_bridge.acp_registry import LaunchError, launch

        try:
            launch(entry)
        except LaunchError as error:
            print(f"oma-bridge: {error}; give it with --binary-path FILE", file=sys.stderr)
        return EXIT_INVALID
    name = args.name or entry.id
    keys = {"kind": "acp", "registry": entry.id}
    if args.agent_version is not None:
        keys["version"] = args.agent_version
    if args.binary_path is not None:
        keys["binary_path"] = str(args.binary_path.expanduser().absolute())
    comment = (
        f"{entry.name} ({entry.id} {args.agent_version or entry.version}, "
        f"{', '.join(entry.distributions)}) from the ACP registry: {entry.description}\n"
        "Added by `oma-bridge agents add`."
    )
    try:
        append_agent_profile(path, name, keys, comment=comment)
    except (ConfigAppendError, ConfigError, OSError) as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    print(f"added [agents.{name}] (registry {entry.id}) to {path}")
    print(
        "a running daemon reads it on reload: `systemctl --user reload oma-bridge`, "
        f"`kill -HUP {daemon_pid() or 'PID'}`, or a restart"
    )
    print(f"then: `oma-bridge run {name} hello`, or in an editor the agent `oma-bridge acp {name}`")
    return 0
