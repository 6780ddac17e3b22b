"""The ``oma-bridge`` command line: ``serve``, ``run``, ``acp``, ``watch``, ``ui``, ``tls``, ...

Every command but ``serve`` finds the daemon through its discovery file, or
at ``--url`` (with ``--token-file`` and ``--ca-file``: :func:`client_options`),
and says so plainly when none answers.  Exit codes (PROTOCOL §18.3,
:mod:`oma_bridge.cli_exits`): 0 success, 1 a failed run or a daemon that
cannot start, 2 bad input (usage, config, ``InvalidMessageError``), 3 no
daemon to talk to (a TLS handshake that fails included), 4 refused by the
daemon (its token, Forbidden); output into a closed pipe ends quietly (141).
No output ever carries the token, but for the one link ``oma-bridge ui``
prints on stdout, which is what it is for.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oma_bridge._version import __version__
from oma_bridge.cli_exits import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_NO_DAEMON,
    client_failure,
    is_broken_pipe,
    quiet_after_broken_pipe,
)

# Each command imports what it uses, in its own function: `oma-bridge acp`
# (stdlib and websockets only) and the client commands start without anyio,
# the wire codes or the daemon (bench/bench_cli.py).
if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from oma_bridge.client import Client


def client_options() -> argparse.ArgumentParser:
    """The options of every command that talks to a daemon: which one, and how to trust it.

    A parent parser (``parents=[client_options()]``), so that every such
    command takes the same three; without ``--url`` the local daemon's
    discovery file says where it is and gives its token.
    """
    options = argparse.ArgumentParser(add_help=False)
    group = options.add_argument_group("reaching a daemon that is not local")
    group.add_argument(
        "--url",
        metavar="URL",
        help="the daemon's TCP listener, e.g. wss://host:7878/ (default: the local daemon)",
    )
    group.add_argument(
        "--token-file", type=Path, metavar="FILE", help="a file that holds the daemon's token"
    )
    group.add_argument(
        "--ca-file",
        type=Path,
        metavar="CA",
        help="PEM certificate of the CA to trust for wss:// (default: the system's CAs)",
    )
    return options


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and each sub-command's own parser, by name."""
    parser = argparse.ArgumentParser(
        prog="oma-bridge",
        description="Run LLM, process and ACP agents side by side behind one websocket daemon.",
    )
    parser.add_argument("--version", action="version", version=f"oma-bridge {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the daemon in the foreground")
    serve.add_argument("--config", type=Path, help="config file (default: user config or built-in)")
    serve.add_argument("--socket", help='unix socket path, or "false" for none')
    serve.add_argument("--tcp", metavar="HOST:PORT", help="also listen on TCP (token required)")
    serve.add_argument("--log-format", choices=("text", "json"), default="text")

    remote = client_options()
    agents = commands.add_parser(
        "agents", help="list the daemon's agent profiles (or add one)", parents=[remote]
    )
    agents.add_argument(
        "--probe",
        action="store_true",
        help="start each acp agent once to show what it can do (its initialize)",
    )
    agents_commands = agents.add_subparsers(dest="agents_command", metavar="add")
    add = agents_commands.add_parser(
        "add",
        help="append a profile of an ACP registry agent to your config",
        description="Append [agents.NAME] with registry = ID to the config the daemon reads.",
    )
    add.add_argument("id", metavar="ID", help="an ACP registry id (see `oma-bridge registry list`)")
    add.add_argument("--name", metavar="N", help="the profile's name (default: the id)")
    add.add_argument("--version", dest="agent_version", metavar="V", help="a version (npx, uvx)")
    add.add_argument(
        "--binary-path", type=Path, metavar="FILE", help="the agent's executable (a binary entry)"
    )
    add.add_argument("--config", type=Path, help="the config file (default: your user config)")

    registry = commands.add_parser(
        "registry", help="the ACP agent registry: `list` its agents, --version of the snapshot"
    )
    registry.add_argument(
        "--version",
        dest="snapshot_version",
        action="store_true",
        help="print the commit and date of the registry snapshot the package ships",
    )
    registry.add_argument(
        "--config", type=Path, help="read [server] acp_registry from this config file"
    )
    registry_commands = registry.add_subparsers(dest="registry_command", metavar="list")
    registry_commands.add_parser("list", help="list the registry's agents")
    status = commands.add_parser("status", help="show agents, runs and processes", parents=[remote])
    status.add_argument(
        "--wait-idle",
        type=float,
        metavar="S",
        help="first wait up to S seconds for the runs in flight to end (a preStop hook);"
        " exit 1 if some are still going",
    )

    run = commands.add_parser(
        "run", help="run an agent once and print its output", parents=[remote]
    )
    run.add_argument("agent", help="a profile name (see `oma-bridge agents`)")
    run.add_argument("prompt", nargs="?", help='the prompt, or "-" to read it from stdin')
    run.add_argument("--stream", action="store_true", help="print text as it arrives")
    run.add_argument(
        "--image", action="append", default=[], type=Path, metavar="FILE", help="attach an image"
    )
    run.add_argument("--system", metavar="S", help="system prompt for this run")
    run.add_argument(
        "--detach",
        action="store_true",
        help="start the run, print its agent and run ids, and leave it running",
    )

    watch = commands.add_parser(
        "watch",
        help="print an agent's journal text, and its runs in flight as they stream",
        parents=[remote],
    )
    watch.add_argument("agent_id", metavar="AGENT_ID", help="an agent id (see `oma-bridge status`)")
    watch.add_argument("--after-seq", type=int, metavar="N", help="only the journal after entry N")
    watch.add_argument(
        "--follow",
        action="store_true",
        help="keep following for runs to come (default: exit once no run is in flight)",
    )

    result = commands.add_parser(
        "result", help="print a finished run's result (its output)", parents=[remote]
    )
    result.add_argument(
        "run_id", metavar="RUN_ID", help="a run id (`oma-bridge run --detach` prints it)"
    )
    result.add_argument("--json", action="store_true", help="print the whole result as JSON")

    acp = commands.add_parser(
        "acp",
        help="serve a profile as an ACP agent on stdio (an editor's agent command)",
        parents=[remote],
    )
    acp.add_argument("profile", help="a profile name (see `oma-bridge agents`)")
    acp.add_argument(
        "--no-autostart", action="store_true", help="do not start a daemon when none is running"
    )
    acp.add_argument(
        "--event-loop",
        choices=("auto", "asyncio", "uvloop"),
        default="asyncio",
        help="the shim's event loop (as [server] event_loop); auto: uvloop when installed",
    )

    ui = commands.add_parser(
        "ui",
        help="print the link to the daemon's status page (and open it in a browser)",
        parents=[remote],
    )
    ui.add_argument("--no-browser", action="store_true", help="only print the link")

    audit = commands.add_parser("audit", help="show the audit log as a table")
    audit.add_argument("--follow", action="store_true", help="keep printing new records")
    audit.add_argument("--agent", metavar="ID", help="only the records of this agent")
    audit.add_argument("--file", type=Path, help="the audit log (default: the state folder's)")

    tls = commands.add_parser(
        "tls", help="TLS for the TCP listener: `init` makes a local CA and a server certificate"
    )
    tls_commands = tls.add_subparsers(dest="tls_command", metavar="init", required=True)
    tls_init = tls_commands.add_parser(
        "init",
        help="make a local CA and a server certificate, and point [server] at them",
        description="Make a local CA (kept if there) and a new server certificate in the state"
        " folder, write [server] tls_cert and tls_key to the config, and print the clients'"
        " --ca-file (docs/deploy.md).",
    )
    tls_init.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name or address clients connect to (repeat it); localhost, 127.0.0.1 and ::1"
        " are always in the certificate",
    )
    tls_init.add_argument(
        "--config", type=Path, help="the config file to write to (default: your user config)"
    )
    tls_init.add_argument(
        "--no-config",
        action="store_true",
        help="write no config: print the [server] lines instead (a read-only or mounted config)",
    )

    worktrees = commands.add_parser(
        "worktrees",
        help='list the git worktrees of cwd = "worktree" agents (docs/isolation.md)',
        parents=[remote],
    )
    worktrees.add_argument(
        "--prune",
        action="store_true",
        help="remove the worktrees (and branches) whose agent is gone and that have no change",
    )

    team = commands.add_parser(
        "team", help="run a task list or a team described in a TOML file (docs/teams.md)"
    )
    team.add_argument("file", type=Path, metavar="FILE.toml", help="[[tasks]], or a team and goal")
    return parser, {"serve": serve, "run": run, "registry": registry}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, not at exit: a closed pipe is still ours to quiet
    except BaseException as error:
        if not is_broken_pipe(error):
            raise
        return quiet_after_broken_pipe()
    return status


def _main(argv: Sequence[str] | None) -> int:
    parser, subparsers = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), None)
    if command is not None and argv[command] == "run":
        args = _parse_run(parser, subparsers["run"], argv, command)
    else:
        args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "serve":
        return _serve(args)
    if args.command == "acp":
        from oma_bridge.shim import main as shim

        return shim(args)
    if args.command == "registry":
        return _registry(args, subparsers["registry"])
    if args.command == "agents" and args.agents_command == "add":
        return _agents_add(args)
    if args.command == "tls":
        return _tls_init(args)
    import anyio

    from oma_bridge.client import ClientError

    try:
        return anyio.run(_CLIENT_COMMANDS[args.command], args)
    except ClientError as error:
        failure = client_failure(
            error, token_file_given=getattr(args, "token_file", None) is not None
        )
        if failure is None:
            raise
        status, line = failure
        print(line, file=sys.stderr)
        return status
    except KeyboardInterrupt:
        return 130


def _parse_run(
    parser: argparse.ArgumentParser, run: argparse.ArgumentParser, argv: list[str], at: int
) -> argparse.Namespace:
    """``run`` takes its prompt before or after its options (``run echo --stream "hi"``).

    The sub-command is the first argument that is not an option.  argparse
    matches positionals greedily in chunks, so ``run``'s own arguments are
    parsed with ``parse_intermixed_args`` on its parser alone.
    """
    if at:  # options before the sub-command (only --version/--help exist)
        parser.parse_args(argv[:at])
    args = run.parse_intermixed_args(argv[at + 1 :])
    if args.prompt is None:  # exits 2, with the usage
        run.error('no prompt: give it after the agent, or "-" to read it from stdin')
    args.command = "run"
    return args


# ---------------------------------------------------------------------------
# serve


def _serve(args: argparse.Namespace) -> int:
    import anyio

    from oma_bridge.event_loop import EventLoopError, resolve_event_loop
    from oma_bridge.logs import configure_logging
    from oma_bridge.server.config import ConfigError, TcpEndpoint, load_config
    from oma_bridge.server.daemon import raise_fd_limit, run_daemon, tune_gc
    from oma_bridge.server.listeners import StartupError

    configure_logging(args.log_format)
    tune_gc()
    raise_fd_limit()
    try:
        config = load_config(args.config)
        try:
            loop = resolve_event_loop(config.server.event_loop)
        except EventLoopError as error:
            raise config.error("server.event_loop", str(error)) from None
        server: dict[str, Any] = {}
        if args.socket is not None:
            server["socket"] = None if args.socket == "false" else Path(args.socket).absolute()
        if args.tcp is not None:
            endpoint = TcpEndpoint.parse(args.tcp)
            if not endpoint.is_loopback and not config.server.allow_remote:
                raise config.error(
                    "server.tcp",
                    f"--tcp {args.tcp}: not a loopback address; set allow_remote = true",
                )
            server["tcp"] = endpoint
            server["tcp_port_retries"] = 0  # the port asked for, or an error
        if server:
            section = config.server.model_copy(update=server)
            if section.socket is None and section.tcp is None:
                raise config.error("server.socket", "--socket false needs a tcp listener")
            config = config.model_copy(update={"server": section})
    except ConfigError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    except ValueError as error:
        print(f"oma-bridge: --tcp {args.tcp}: {error}", file=sys.stderr)
        return EXIT_INVALID
    try:
        options = {"use_uvloop": loop == "uvloop"}
        anyio.run(_run_daemon_until_stopped, run_daemon, config, backend_options=options)
    except ConfigError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    except StartupError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 0
    return 0


async def _run_daemon_until_stopped(run_daemon: Any, config: Any) -> None:
    _wait_for_children_in_the_loop()
    await run_daemon(config, handle_signals=True)


def _wait_for_children_in_the_loop() -> None:
    """Python 3.11 waits for each child in a thread of its own; a pidfd watcher
    waits in the event loop instead (cheaper spawns; 3.12 does it by itself).

    Set here, where one loop serves the whole process, not in the library.
    """
    import asyncio
    import os
    import warnings

    from oma_bridge.event_loop import running_loop_name

    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    if running_loop_name() != "asyncio":  # uvloop waits for children in its own loop
        return
    try:
        os.close(os.pidfd_open(os.getpid()))  # the kernel supports pidfds
    except OSError:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(asyncio.get_running_loop())
        asyncio.set_child_watcher(watcher)


# ---------------------------------------------------------------------------
# client commands


def _connect(args: argparse.Namespace) -> AbstractAsyncContextManager[Client]:
    """``connect()`` to the daemon the command line names (the local one by default)."""
    from oma_bridge.client import connect

    return connect(
        client_name="oma-bridge-cli",
        url=args.url,
        token_file=args.token_file,
        ca_file=args.ca_file,
    )


async def _agents(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        agents = await (client.probe_agents() if args.probe else client.list_agents())
    rows = [[a["name"], a["kind"], a.get("model", ""), a.get("description", "")] for a in agents]
    print(_table(["NAME", "KIND", "MODEL", "DESCRIPTION"], rows) if rows else "no agents")
    advertised = [
        [a["name"], *_capability_cells(a["capabilities"])] for a in agents if "capabilities" in a
    ]
    if advertised:
        print("\nCAPABILITIES (what each acp agent said at its last initialize)")
        print(_table(["NAME", "LOAD", "SESSION", "PROMPT", "MCP", "AUTH"], advertised))
    for agent in agents:  # a profile whose runs would fail: said, not an error of `agents`
        if not agent.get("ready", True):
            print(f"oma-bridge: {agent['name']}: not ready: {agent['notReady']}", file=sys.stderr)
    failed = [a for a in agents if "probeError" in a]
    for agent in failed:
        print(f"oma-bridge: {agent['name']}: {agent['probeError']}", file=sys.stderr)
    return EXIT_FAILED if failed else 0


def _capability_cells(caps: dict[str, Any]) -> list[str]:
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


def _registry(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``registry --version`` and ``registry list`` (read here, no daemon needed)."""
    from oma_bridge.acp_registry import RegistryError, load_registry, snapshot
    from oma_bridge.paths import default_config_path

    try:
        path, where = _configured_registry(
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
    print(_table(["ID", "NAME", "VERSION", "DISTRIBUTION", "DESCRIPTION"], rows))
    for refused in registry.refused:
        print(f"oma-bridge: refused: {refused}", file=sys.stderr)
    print(f"\n{len(rows)} agents in {registry.source}; add one: oma-bridge agents add ID")
    return 0


def _configured_registry(source: Path, *, must_exist: bool) -> tuple[Path | None, str]:
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


def _agents_add(args: argparse.Namespace) -> int:
    """Append a registry profile to the user's config and say where, and how to reload."""
    from oma_bridge.acp_registry import RegistryError, load_registry
    from oma_bridge.paths import default_config_path
    from oma_bridge.server.config import ConfigError
    from oma_bridge.server.config_append import ConfigAppendError, append_agent_profile

    path = (args.config or default_config_path()).expanduser()
    try:
        registry_path, _ = _configured_registry(path, must_exist=False)
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
        f"`kill -HUP {_daemon_pid() or 'PID'}`, or a restart"
    )
    print(f"then: `oma-bridge run {name} hello`, or in an editor the agent `oma-bridge acp {name}`")
    return 0


def _tls_init(args: argparse.Namespace) -> int:
    """``tls init``: the CA and the pair in the state folder, the ``[server]`` lines, the CA."""
    from oma_bridge.certificates import CertificateError, HostError, init_tls
    from oma_bridge.paths import default_config_path, default_state_dir
    from oma_bridge.private_files import NotPrivateError
    from oma_bridge.server.config import ConfigError
    from oma_bridge.server.config_append import NEW_CONFIG, ConfigAppendError, add_server_keys

    folder = default_state_dir() / "tls"
    try:
        made = init_tls(folder, args.host)
    except CertificateError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID if isinstance(error, HostError) else EXIT_FAILED
    except (NotPrivateError, OSError) as error:
        print(f"oma-bridge: cannot make {folder}: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{'kept' if made.ca_kept else 'made'} the local CA {made.ca} (its key {made.ca_key})")
    print(f"made a server certificate for {', '.join(made.hosts)}: {made.cert} (key {made.key})")
    keys = {"tls_cert": str(made.cert), "tls_key": str(made.key)}
    lines = [f'{key} = "{value}"' for key, value in keys.items()]
    path = (args.config or default_config_path()).expanduser()
    problem = "--no-config" if args.no_config else None
    if problem is None:
        try:
            made_by = NEW_CONFIG.replace("`oma-bridge agents add`", "`oma-bridge tls init`")
            added = add_server_keys(path, keys, new_text=made_by)
        except (ConfigAppendError, ConfigError, OSError) as error:
            problem = str(error)
        else:
            said = "wrote to" if added else "already in"
            print(f"{said} [server] of {path}: " + "; ".join(lines))
            print(
                "the daemon uses them from its next start (a reload keeps its listeners): "
                "`systemctl --user restart oma-bridge`, or stop and start `oma-bridge serve`"
            )
    if problem is not None:
        if not args.no_config:
            print(f"oma-bridge: the config is not changed: {problem}", file=sys.stderr)
        print("put these lines in [server] of the config the daemon reads:")
        print("[server]\n" + "\n".join(lines))
    print(f"clients of its TCP listener trust it with: --ca-file {made.ca}")
    return 0


def _daemon_pid() -> int | None:
    """The pid of the local daemon, when one is running (for the reload hint)."""
    from oma_bridge.client import DaemonNotRunningError, find_daemon

    try:
        return find_daemon().pid
    except DaemonNotRunningError:
        return None


async def _status(args: argparse.Namespace) -> int:
    async with _connect(args) as client:
        status = await client.status()
        if args.wait_idle is not None:
            import time

            import anyio

            deadline = time.monotonic() + args.wait_idle
            while status["runs"] and time.monotonic() < deadline:
                await anyio.sleep(0.5)
                status = await client.status()
    busy = args.wait_idle is not None and bool(status["runs"])
    print(
        f"oma-bridge {status['version']}: up {status['uptimeS']:.0f}s, "
        f"{status['connections']} connection(s)"
    )
    sections = [
        (
            "AGENTS",
            ["AGENT ID", "PROFILE", "KIND", "STATE", "QUEUED"],
            [
                [a["agentId"], a["profile"], a["kind"], a["state"], str(a["queuedRuns"])]
                for a in status["agents"]
            ],
        ),
        (
            "RUNS",
            ["RUN ID", "AGENT ID", "METHOD", "STARTED"],
            [
                [r["runId"], r["agentId"] or "-", r["method"], _clock(r["startedAt"])]
                for r in status["runs"]
            ],
        ),
        (
            "PROCESSES",
            ["PID", "AGENT ID", "RUN ID", "RSS"],
            [
                [str(p["pid"]), p["agentId"] or "-", p.get("runId") or "-", _bytes(p["rssBytes"])]
                for p in status["processes"]
            ],
        ),
    ]
    for title, header, rows in sections:
        print(f"\n{title}")
        print(_table(header, rows) if rows else "  (none)")
    if "evaluation" in status:
        stats = status["evaluation"]
        print("\nEVALUATION  " + "  ".join(f"{k}={v}" for k, v in stats.items()))
    if busy:
        print(f"\n{len(status['runs'])} run(s) still in flight after {args.wait_idle:g} s")
        return 1
    return 0


async def _run(args: argparse.Namespace) -> int:
    from oma_bridge.errors import InvalidMessageError

    if args.detach and args.stream:
        print("oma-bridge: --detach and --stream do not go together", file=sys.stderr)
        return EXIT_INVALID
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    try:
        run_input = _run_input(prompt, args.image)
    except ValueError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    overrides = {"systemPrompt": args.system} if args.system is not None else {}
    result: Any = None
    streamed = ""
    try:
        async with _connect(args) as client:
            agent = await client.open(args.agent, **overrides)
            if args.detach:
                run_id = await _detach(client, agent.agent_id, run_input)
                print(f"{agent.agent_id} {run_id}")
                return 0
            try:
                if args.stream:
                    stream = agent.stream(run_input)
                    async for event in stream:
                        if event.type == "text" and event.data:
                            sys.stdout.write(event.data)
                            sys.stdout.flush()
                            streamed = event.data
                    result = stream.result
                else:
                    result = await agent.run(run_input)
            finally:
                await agent.close()
    except InvalidMessageError as error:
        print(f"oma-bridge: InvalidMessageError: {error}", file=sys.stderr)
        return EXIT_INVALID
    if result is None:
        print("oma-bridge: run error: the stream ended without a result", file=sys.stderr)
        return EXIT_FAILED
    if args.stream:  # its text is out already, ended by a newline here
        if streamed and not streamed.endswith("\n"):
            sys.stdout.write("\n")
        return _print_result(result, output=False)
    return _print_result(result)


async def _detach(client: Any, agent_id: str, run_input: Any) -> str:
    """Start a run that goes on after this connection closes; return once the daemon has it."""
    import uuid

    import anyio

    from oma_bridge.client import DaemonError
    from oma_bridge.errors import InvalidMessageError, WireError
    from oma_bridge.wire.codes import INVALID_MESSAGE

    run_id = uuid.uuid4().hex
    params = {"agentId": agent_id, "input": run_input, "runId": run_id, "onDisconnect": "continue"}
    call = await client.peer.start_request("agent/run", params)
    # The request is on its way; the daemon owns the run once it is queued
    # (a live run) or already finished (its result is in the journal).
    with anyio.fail_after(10):
        while True:
            if call.settled:  # refused (bad input: no run), or done already
                try:
                    await call.wait()
                except WireError as error:
                    data = error.data if isinstance(error.data, dict) else {}
                    if error.rpc_code == INVALID_MESSAGE:
                        raise InvalidMessageError(str(data.get("message", error.message))) from None
                    raise DaemonError(error.rpc_code, error.message, error.data) from None
                return run_id
            status = await client.status()
            if any(run["runId"] == run_id for run in status["runs"]):
                return run_id
            try:
                await client.request("run/result", {"runId": run_id})
                return run_id
            except Exception:  # not known yet (-32011), or still running (-32014)
                await anyio.sleep(0.01)


async def _watch(args: argparse.Namespace) -> int:
    """What the agent's journal holds (after ``--after-seq``), then its runs in flight as
    they stream; it ends when none is left (PROTOCOL §18.4), or never with ``--follow``."""
    async with _connect(args) as client:
        # Taken first: a run in flight now ends after it, so its run_end is in
        # the journal read next or among the live entries after it.
        pending = await _runs_in_flight(client, args.agent_id)
        held = await client.journal(args.agent_id, after_seq=args.after_seq)
        ended = {str(item.entry.get("runId")) for item in held if item.type == "run_end"}
        for item in held:
            _print_entry(item)
        pending -= ended
        if not pending and not args.follow:
            return 0
        cursor = held[-1].seq if held else (args.after_seq or 0)
        async with client.watch(args.agent_id, after_seq=cursor) as entries:
            async for item in entries:
                _print_entry(item)
                if item.type != "run_end" or args.follow:
                    continue
                ended.add(str(item.entry.get("runId")))
                pending = (pending | await _runs_in_flight(client, args.agent_id)) - ended
                if not pending:
                    break
    return 0


async def _runs_in_flight(client: Client, agent_id: str) -> set[str]:
    """The ids of the agent's runs that are running or queued."""
    status = await client.status()
    return {str(run["runId"]) for run in status["runs"] if run.get("agentId") == agent_id}


def _print_entry(item: Any) -> None:
    text = item.text
    if text is not None:
        sys.stdout.write(text)
        sys.stdout.flush()
    elif item.type == "run_end":
        sys.stdout.write("\n")
        sys.stdout.flush()


async def _result(args: argparse.Namespace) -> int:
    """``run/result``: a finished run's output on stdout (or the whole result, ``--json``)."""
    from oma_bridge.client import DaemonError
    from oma_bridge.wire.codes import RUN_IN_PROGRESS

    async with _connect(args) as client:
        try:
            result = await client.result(args.run_id)
        except DaemonError as error:
            if error.rpc_code != RUN_IN_PROGRESS:
                raise
            print(
                f"oma-bridge: run {args.run_id} is still running; "
                "ask again once it has ended, or follow it with `oma-bridge watch AGENT_ID`",
                file=sys.stderr,
            )
            return EXIT_FAILED
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps(result.to_wire()).decode() + "\n")
        return 0 if result.success else EXIT_FAILED
    return _print_result(result)


def _print_result(result: Any, *, output: bool = True) -> int:
    """A run's output on stdout (ended by a newline); a failure's reason on stderr: exit 1.

    A failed run's output that is only its error's message (a provider's
    refusal, a missing key: ``AgentRunResult.failed``) is not output: it is
    said once, on stderr (PROTOCOL §18.3); partial output still goes to stdout.
    """
    text = result.output
    if not result.success and text == result.status.message:
        text = ""
    if output and text:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if result.success:
        return 0
    print(f"oma-bridge: run {result.status.code}: {result.status.message}", file=sys.stderr)
    return EXIT_FAILED


async def _ui(args: argparse.Namespace) -> int:
    """The status page's link, ``http://127.0.0.1:PORT/ui#token=...``, on stdout; a browser.

    The token rides in the fragment, which a browser never sends.  It is
    printed there and nowhere else; the browser is not given the link on its
    command line (which every local user can read) but a file of the user's
    own (0600) that forwards to it.
    """
    from oma_bridge.client import ConnectOptionError, find_daemon, read_token_file
    from oma_bridge.client.discovery import url_from_environment
    from oma_bridge.paths import default_runtime_dir

    token = read_token_file(args.token_file) if args.token_file is not None else None
    url: str | None = url_from_environment(args.url)
    if url is not None:
        if token is None:
            raise ConnectOptionError("--url needs --token-file: the link carries the token")
        folder = default_runtime_dir()
    else:
        discovery = find_daemon()
        url, folder, token = discovery.url, discovery.path.parent, token or discovery.token
        if url is None:
            print(
                "oma-bridge: the status page is served on the daemon's TCP listener, "
                'and this daemon has none: set [server] tcp = "127.0.0.1:7878" in its config '
                "(or start it with --tcp 127.0.0.1:7878)",
                file=sys.stderr,
            )
            return EXIT_NO_DAEMON
    link = _ui_link(url, token)
    print(link, flush=True)
    if not args.no_browser:
        _open_browser(link, folder)
    return 0


def _ui_link(url: str, token: str) -> str:
    """``ws://HOST:PORT/`` (``wss``) → ``http://HOST:PORT/ui#token=...`` (``https``)."""
    from urllib.parse import quote, urlsplit, urlunsplit

    from oma_bridge.client import ConnectOptionError

    parts = urlsplit(url)
    schemes = {"ws": "http", "wss": "https"}
    if parts.scheme.lower() not in schemes or not parts.netloc:
        raise ConnectOptionError(f"not a ws:// or wss:// URL: {url}")
    fragment = "token=" + quote(token, safe="")
    return urlunsplit((schemes[parts.scheme.lower()], parts.netloc, "/ui", "", fragment))


def _open_browser(link: str, folder: Path) -> None:
    """Open ``link`` in a graphical browser, if there is one, through a private redirect file."""
    import html
    import os
    import webbrowser

    from oma_bridge.private_files import make_private_folder, open_private

    graphical = sys.platform in ("darwin", "win32") or any(
        os.environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")
    )
    if not graphical:
        print("oma-bridge: no browser to open here; open the link above", file=sys.stderr)
        return
    target = html.escape(link, quote=True)
    page = (
        '<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
        f'<meta http-equiv="refresh" content="0;url={target}">'
        f'<title>oma-bridge status</title><a href="{target}">oma-bridge status page</a>\n'
    )
    try:
        make_private_folder(folder, forbidden=0)  # the daemon's folder: it checked the mode
        redirect = folder / "ui-link.html"
        # A new file each time, so it is 0600 whatever an old one's mode was.
        redirect.unlink(missing_ok=True)
        fd = open_private(redirect, os.O_WRONLY | os.O_EXCL)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(page)
        opened = webbrowser.open(redirect.as_uri(), new=2)
    except (OSError, webbrowser.Error) as error:
        print(f"oma-bridge: cannot open a browser ({error}); open the link above", file=sys.stderr)
        return
    if not opened:
        print("oma-bridge: no browser to open here; open the link above", file=sys.stderr)


async def _audit(args: argparse.Namespace) -> int:
    import anyio
    import orjson

    from oma_bridge.paths import default_state_dir

    path = args.file or default_state_dir() / "audit.jsonl"
    header = ["TIME", "EVENT", "AGENT", "RUN", "DETAIL"]
    offset = 0
    printed_header = False
    while True:
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            data = b""
            if not args.follow:
                print(f"oma-bridge: no audit log at {path}", file=sys.stderr)
                return EXIT_FAILED
        complete = data[: data.rfind(b"\n") + 1]
        offset += len(complete)
        rows = []
        for line in complete.splitlines():
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if args.agent is None or record.get("agentId") == args.agent:
                rows.append(_audit_row(record))
        if rows or not printed_header:
            table = _table(header, rows).splitlines()
            print("\n".join(table if not printed_header else table[1:]), flush=True)
            printed_header = True
        if not args.follow:
            return 0
        await anyio.sleep(0.5)


def _audit_row(record: dict[str, Any]) -> list[str]:
    known = {"ts", "event", "agentId", "runId"}
    detail = " ".join(f"{key}={_short(value)}" for key, value in record.items() if key not in known)
    return [
        str(record.get("ts", "")),
        str(record.get("event", "")),
        str(record.get("agentId") or "-"),
        str(record.get("runId") or "-"),
        detail,
    ]


def _short(value: Any) -> str:
    import orjson

    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _run_input(prompt: str, images: Sequence[Path]) -> Any:
    """A string, or one user message with the prompt and the images (structured input)."""
    if not images:
        return prompt
    import base64
    import mimetypes

    content: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
    for path in images:
        media_type, _ = mimetypes.guess_type(path.name)
        if media_type is None or not media_type.startswith("image/"):
            raise ValueError(f"--image {path}: not a recognised image type")
        try:
            data = base64.b64encode(path.read_bytes()).decode("ascii")
        except OSError as error:
            raise ValueError(f"--image {path}: {error.strerror or error}") from None
        content.append(
            {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
        )
    return [{"role": "user", "content": content}]


# ---------------------------------------------------------------------------
# team: a TOML file of tasks, or of a team and its goal (docs/teams.md, "From the command line")


class TeamFileError(ValueError):
    """A team file that cannot be run; the message is ``file: key: problem``."""

    def __init__(self, path: Path, key: str, problem: str) -> None:
        super().__init__(f"{path}: {key}: {problem}" if key else f"{path}: {problem}")


#: TOML key of a task -> its wire key (docs/contract.md §15) and the type it must have.
_TASK_KEYS: dict[str, tuple[str, str]] = {
    "title": ("title", "string"),
    "description": ("description", "string"),
    "assignee": ("assignee", "string"),
    "depends_on": ("dependsOn", "strings"),
    "id": ("id", "string"),
    "max_retries": ("maxRetries", "count"),
    "retry_delay_ms": ("retryDelayMs", "number"),
    "retry_backoff": ("retryBackoff", "number"),
}
_REQUIRED_TASK_KEYS = ("title", "description", "assignee")
_TEAM_KEYS = ("coordinator", "agents", "goal")


def read_team_file(path: Path) -> tuple[str, dict[str, Any]]:
    """The wire method and params the file asks for; :class:`TeamFileError` otherwise.

    Either ``[[tasks]]`` tables (and ``max_concurrency``) for ``oma/runTasks``,
    or ``coordinator``, ``agents`` and ``goal`` for ``oma/runTeam``.
    """
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise TeamFileError(path, "", error.strerror or str(error)) from None
    except UnicodeDecodeError:
        raise TeamFileError(path, "", "not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise TeamFileError(path, "", f"not valid TOML: {error}") from None
    for key in data:
        if key not in ("tasks", "max_concurrency", *_TEAM_KEYS):
            raise TeamFileError(path, key, "unknown key")
    team = [key for key in _TEAM_KEYS if key in data]
    if "tasks" in data and team:
        raise TeamFileError(path, team[0], "a file has [[tasks]] or a team, not both")
    if "tasks" in data:
        return "oma/runTasks", _tasks_params(path, data)
    if not team:
        raise TeamFileError(path, "", "needs [[tasks]] tables, or coordinator, agents and goal")
    if "max_concurrency" in data:
        raise TeamFileError(path, "max_concurrency", "only a [[tasks]] file takes it")
    for key in _TEAM_KEYS:
        if key not in data:
            raise TeamFileError(path, key, "required key is missing")
    for key in ("coordinator", "goal"):
        _check(path, key, data[key], "string")
    agents = data["agents"]
    _check(path, "agents", agents, "strings")
    if not agents:
        raise TeamFileError(path, "agents", "must name at least one profile")
    return "oma/runTeam", {
        "team": {"agents": agents, "coordinator": data["coordinator"]},
        "goal": data["goal"],
    }


def _tasks_params(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    tasks = data["tasks"]
    if not isinstance(tasks, list) or not all(isinstance(task, dict) for task in tasks):
        raise TeamFileError(path, "tasks", "must be tables ([[tasks]])")
    wire_tasks = []
    for index, task in enumerate(tasks):
        where = f"tasks[{index}]"
        wire: dict[str, Any] = {}
        for key, value in task.items():
            if key not in _TASK_KEYS:
                raise TeamFileError(path, f"{where}.{key}", "unknown key")
            wire_key, kind = _TASK_KEYS[key]
            wire[wire_key] = _check(path, f"{where}.{key}", value, kind)
        for key in _REQUIRED_TASK_KEYS:
            if key not in task:
                raise TeamFileError(path, f"{where}.{key}", "required key is missing")
        wire_tasks.append(wire)
    params: dict[str, Any] = {"tasks": wire_tasks}
    if "max_concurrency" in data:
        params["maxConcurrency"] = _check(path, "max_concurrency", data["max_concurrency"], "size")
    return params


def _check(path: Path, key: str, value: Any, kind: str) -> Any:
    """``value`` if it is of ``kind``, else :class:`TeamFileError` naming ``key``."""
    ok = {
        "string": isinstance(value, str),
        "strings": isinstance(value, list) and all(isinstance(item, str) for item in value),
        "count": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        "size": isinstance(value, int) and not isinstance(value, bool) and value >= 1,
        "number": isinstance(value, int | float) and not isinstance(value, bool) and value >= 0,
    }[kind]
    if not ok:
        wanted = {
            "string": "a string",
            "strings": "a list of strings",
            "count": "an integer >= 0",
            "size": "an integer >= 1",
            "number": "a number >= 0",
        }[kind]
        raise TeamFileError(path, key, f"must be {wanted}")
    return value


async def _team(args: argparse.Namespace) -> int:
    from oma_bridge.client import DaemonError, connect
    from oma_bridge.errors import InvalidMessageError
    from oma_bridge.wire.codes import INVALID_PARAMS

    try:
        method, params = read_team_file(args.file)
    except TeamFileError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    titles: dict[str, str] = {}
    try:
        async with connect(client_name="oma-bridge-cli") as client:
            if method == "oma/runTasks":
                concurrency = params.get("maxConcurrency")
                run = client.tasks_run(params["tasks"], max_concurrency=concurrency)
            else:
                team = params["team"]
                run = client.team_run(team["agents"], team["coordinator"], params["goal"])
            async with run as started:
                async for event in started.progress():
                    print(progress_line(event, titles), file=sys.stderr, flush=True)
                result = await started.result()
    except InvalidMessageError as error:
        print(f"oma-bridge: {args.file}: InvalidMessageError: {error}", file=sys.stderr)
        return EXIT_INVALID
    except DaemonError as error:
        if error.rpc_code != INVALID_PARAMS or not isinstance(error.data, dict):
            raise
        for item in error.data.get("errors", []):
            # Graph issues (loc ["tasks"]) name their task already.
            loc = item.get("loc") or []
            where = "" if loc == ["tasks"] else _where(loc) + ": "
            print(f"oma-bridge: {args.file}: {where}{item.get('msg')}", file=sys.stderr)
        return EXIT_INVALID
    sys.stdout.write(result.output)
    if result.output and not result.output.endswith("\n"):
        sys.stdout.write("\n")
    if result.success:
        return 0
    counts = [
        f"{sum(task.status == status for task in result.tasks)} {status}"
        for status in ("failed", "cancelled", "skipped")
        if any(task.status == status for task in result.tasks)
    ]
    why = ", ".join(counts) if counts else result.output.partition("\n")[0]
    print(f"oma-bridge: team run failed: {why}", file=sys.stderr)
    return EXIT_FAILED


def progress_line(event: Any, titles: dict[str, str]) -> str:
    """One line for one ``oma/progress`` event; ``titles`` learns the task titles by id."""
    kind = str(event.get("type"))
    agent = str(event.get("agent"))
    data = event.get("data")
    if not isinstance(data, dict):
        data = {}
    if "title" in data:  # every task event but task_retry names its task
        titles[str(event.get("task"))] = str(data["title"])
    title = titles.get(str(event.get("task")), str(event.get("task")))
    if kind == "task_start":
        text = f"{title} -> {data.get('assignee')}"
    elif kind == "task_complete":
        text = title
    elif kind == "task_failed":
        text = f"{title}: {data.get('status')}: {_first_line(data.get('error'))}"
    elif kind == "task_skipped":
        text = f"{title}: {_first_line(data.get('reason'))}"
    elif kind == "task_retry":
        text = (
            f"{title}: attempt {data.get('attempt')}/{data.get('maxAttempts')} failed, "
            f"next in {data.get('nextDelayMs')} ms: {_first_line(data.get('error'))}"
        )
    elif kind in ("agent_start", "agent_complete"):
        if "task" not in event and kind == "agent_start":  # the coordinator: one run at a time
            titles[f"phase of {agent}"] = str(data.get("phase"))
        where = f"[{title}]" if "task" in event else f"({titles.get(f'phase of {agent}')})"
        if kind == "agent_complete":
            status = data.get("status")
            where = f"{where} {status.get('code') if isinstance(status, dict) else status}"
        text = f"{agent} {where}"
    else:
        text = f"{agent}: {_first_line(data.get('message'))}"
    return f"{kind:<14} {text}"


def _where(loc: Sequence[Any]) -> str:
    """A params location as the file's key: ``["tasks", 0, "dependsOn"]`` is
    ``tasks[0].depends_on``, ``["team", "coordinator"]`` is ``coordinator``."""
    toml_keys = {wire: key for key, (wire, _kind) in _TASK_KEYS.items()}
    text = ""
    for part in loc[1:] if loc[:1] == ["team"] else loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            key = toml_keys.get(str(part), str(part))
            text += f".{key}" if text else key
    return text


def _first_line(text: Any) -> str:
    return str(text).strip().partition("\n")[0]


async def _worktrees(args: argparse.Namespace) -> int:
    """``worktrees/list`` or ``worktrees/prune`` (extensions), as tables."""
    async with _connect(args) as client:
        if args.prune:
            answer = await client.request("worktrees/prune", {})
        else:
            answer = {"kept": (await client.request("worktrees/list", {}))["worktrees"]}
    header = ["AGENT ID", "PROFILE", "AGENT", "BRANCH", "BASE", "CHANGES", "PATH"]

    def rows(listed: list[dict[str, Any]]) -> list[list[str]]:
        return [
            [
                row["agentId"],
                row.get("profile") or "-",
                row["agent"],
                row["branch"],
                row["base"][:12],
                row["changes"],
                row["path"],
            ]
            for row in listed
        ]

    if args.prune:
        removed = answer["removed"]
        print(f"removed {len(removed)} worktree(s) with their branches")
        if removed:
            print(_table(header, rows(removed)))
        print(f"\nkept {len(answer['kept'])}")
    print(_table(header, rows(answer["kept"])) if answer["kept"] else "  (none)")
    return 0


_CLIENT_COMMANDS = {
    "agents": _agents,
    "status": _status,
    "worktrees": _worktrees,
    "run": _run,
    "watch": _watch,
    "result": _result,
    "audit": _audit,
    "team": _team,
    "ui": _ui,
}


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = [header, *rows]
    return "\n".join(
        "  "
        + "  ".join(
            str(cell).ljust(width) for cell, width in zip(line, widths, strict=False)
        ).rstrip()
        for line in lines
    )


def _clock(timestamp: float | None) -> str:
    if timestamp is None:
        return "queued"
    import time

    return time.strftime("%H:%M:%S", time.localtime(timestamp))


def _bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


if __name__ == "__main__":
    raise SystemExit(main())
