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
from collections.abc import Callable, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

from oma_bridge._version import __version__
from oma_bridge.cli import collector

# One module per command group; each command imports what it uses, in its own
# function: `oma-bridge acp` (stdlib and websockets only) and the client
# commands start without anyio, the wire codes or the daemon (bench/bench_cli.py).
from oma_bridge.cli.agents import agents_add_command, agents_command, registry_command
from oma_bridge.cli.audit import audit_command
from oma_bridge.cli.runs import result_command, run_command, watch_command
from oma_bridge.cli.serve import serve_command
from oma_bridge.cli.status import status_command, worktrees_command
from oma_bridge.cli.team import team_command
from oma_bridge.cli.tls import tls_init_command
from oma_bridge.cli.ui import ui_command
from oma_bridge.cli_exits import client_failure, is_broken_pipe, quiet_after_broken_pipe


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


#: Makes one sub-command's parser: ``add_parser`` of the whole tree, or
#: :func:`_standalone` when only that command is parsed.
ParserMaker = Callable[..., argparse.ArgumentParser]


def _serve(make: ParserMaker) -> argparse.ArgumentParser:
    serve = make("serve", help="run the daemon in the foreground")
    serve.add_argument("--config", type=Path, help="config file (default: user config or built-in)")
    serve.add_argument("--socket", help='unix socket path, or "false" for none')
    serve.add_argument("--tcp", metavar="HOST:PORT", help="also listen on TCP (token required)")
    serve.add_argument("--log-format", choices=("text", "json"), default="text")
    return serve


def _agents(make: ParserMaker) -> argparse.ArgumentParser:
    agents = make(
        "agents", help="list the daemon's agent profiles (or add one)", parents=[client_options()]
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
    return agents


def _registry(make: ParserMaker) -> argparse.ArgumentParser:
    registry = make(
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
    return registry


def _status(make: ParserMaker) -> argparse.ArgumentParser:
    status = make("status", help="show agents, runs and processes", parents=[client_options()])
    status.add_argument(
        "--wait-idle",
        type=float,
        metavar="S",
        help="first wait up to S seconds for the runs in flight to end (a preStop hook);"
        " exit 1 if some are still going",
    )
    return status


def _run(make: ParserMaker) -> argparse.ArgumentParser:
    run = make("run", help="run an agent once and print its output", parents=[client_options()])
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
    return run


def _watch(make: ParserMaker) -> argparse.ArgumentParser:
    watch = make(
        "watch",
        help="print an agent's journal text, and its runs in flight as they stream",
        parents=[client_options()],
    )
    watch.add_argument("agent_id", metavar="AGENT_ID", help="an agent id (see `oma-bridge status`)")
    watch.add_argument("--after-seq", type=int, metavar="N", help="only the journal after entry N")
    watch.add_argument(
        "--follow",
        action="store_true",
        help="keep following for runs to come (default: exit once no run is in flight)",
    )
    return watch


def _result(make: ParserMaker) -> argparse.ArgumentParser:
    result = make(
        "result", help="print a finished run's result (its output)", parents=[client_options()]
    )
    result.add_argument(
        "run_id", metavar="RUN_ID", help="a run id (`oma-bridge run --detach` prints it)"
    )
    result.add_argument("--json", action="store_true", help="print the whole result as JSON")
    return result


def _acp(make: ParserMaker) -> argparse.ArgumentParser:
    acp = make(
        "acp",
        help="serve a profile as an ACP agent on stdio (an editor's agent command)",
        parents=[client_options()],
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
    return acp


def _ui(make: ParserMaker) -> argparse.ArgumentParser:
    ui = make(
        "ui",
        help="print the link to the daemon's status page (and open it in a browser)",
        parents=[client_options()],
    )
    ui.add_argument("--no-browser", action="store_true", help="only print the link")
    return ui


def _audit(make: ParserMaker) -> argparse.ArgumentParser:
    audit = make("audit", help="show the audit log as a table")
    audit.add_argument("--follow", action="store_true", help="keep printing new records")
    audit.add_argument("--agent", metavar="ID", help="only the records of this agent")
    audit.add_argument("--file", type=Path, help="the audit log (default: the state folder's)")
    return audit


def _tls(make: ParserMaker) -> argparse.ArgumentParser:
    tls = make(
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
    return tls


def _worktrees(make: ParserMaker) -> argparse.ArgumentParser:
    worktrees = make(
        "worktrees",
        help='list the git worktrees of cwd = "worktree" agents (docs/isolation.md)',
        parents=[client_options()],
    )
    worktrees.add_argument(
        "--prune",
        action="store_true",
        help="remove the worktrees (and branches) whose agent is gone and that have no change",
    )
    return worktrees


def _team(make: ParserMaker) -> argparse.ArgumentParser:
    team = make("team", help="run a task list or a team described in a TOML file (docs/teams.md)")
    team.add_argument("file", type=Path, metavar="FILE.toml", help="[[tasks]], or a team and goal")
    return team


#: Each sub-command's parser, in the order ``--help`` lists them.
_PARSERS: dict[str, Callable[[ParserMaker], argparse.ArgumentParser]] = {
    "serve": _serve,
    "agents": _agents,
    "registry": _registry,
    "status": _status,
    "run": _run,
    "watch": _watch,
    "result": _result,
    "acp": _acp,
    "ui": _ui,
    "audit": _audit,
    "tls": _tls,
    "worktrees": _worktrees,
    "team": _team,
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and each sub-command's own parser, by name."""
    parser = argparse.ArgumentParser(
        prog="oma-bridge",
        description="Run LLM, process and ACP agents side by side behind one websocket daemon.",
    )
    parser.add_argument("--version", action="version", version=f"oma-bridge {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser, {name: add(commands.add_parser) for name, add in _PARSERS.items()}


def _standalone(name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """The parser ``add_parser(name, **kwargs)`` of :func:`build_parser` makes, alone."""
    del kwargs["help"]  # its line in the top-level --help
    return argparse.ArgumentParser(prog=f"oma-bridge {name}", **kwargs)


def _parse(argv: list[str]) -> tuple[argparse.Namespace, argparse.ArgumentParser | None]:
    """The arguments, and the parser of their sub-command (``None``: no sub-command).

    Building every sub-command's parser costs more than a command's whole
    run on the daemon (bench/bench_cli.py), so a command given first is
    parsed by its own parser alone; what that leaves over (or options before
    the sub-command) goes to the whole tree, to be refused as it always was.
    """
    at = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), None)
    name = None if at is None else argv[at]
    if at is not None and name == "run":
        if at:  # options before the sub-command (only --version/--help exist)
            build_parser()[0].parse_args(argv[:at])
        run = _run(_standalone)
        return _parse_run(run, argv[at + 1 :]), run
    if at == 0 and name in _PARSERS:
        parser = _PARSERS[name](_standalone)
        args, left = parser.parse_known_args(argv[1:])
        if not left:
            args.command = name
            return args, parser
    parser, subparsers = build_parser()
    args = parser.parse_args(argv)
    return args, subparsers.get(args.command)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, not at exit: a closed pipe is still ours to quiet
    except BaseException as error:
        if not is_broken_pipe(error):
            raise
        return quiet_after_broken_pipe()
    return status


def console_main() -> int:
    """The ``oma-bridge`` process (the console script, ``python -m oma_bridge.cli``): :func:`main`.

    With the garbage collector paused while the command starts and frozen
    at its end (:mod:`oma_bridge.cli.collector`).
    """
    collector.pause()
    try:
        return main()
    finally:
        collector.freeze()


def _main(argv: Sequence[str] | None) -> int:
    args, parser = _parse(list(sys.argv[1:] if argv is None else argv))
    if parser is None:
        build_parser()[0].print_help()
        return 0
    if args.command == "acp":
        from oma_bridge.shim import main as shim

        collector.resume()  # the relay's modules are in
        return shim(args)
    if args.command in _CLIENT_COMMANDS and not (
        args.command == "agents" and args.agents_command == "add"
    ):
        return _client_command(args)
    collector.resume()
    if args.command == "serve":
        return serve_command(args)
    if args.command == "registry":
        return registry_command(args, parser)
    if args.command == "tls":
        return tls_init_command(args)
    return agents_add_command(args)


def _client_command(args: argparse.Namespace) -> int:
    """A command on the event loop; all but ``audit`` (a file) talk to a daemon."""
    import anyio

    from oma_bridge.client import ClientError

    if args.command != "audit":  # what they run on, in before the collector resumes
        import_module("oma_bridge.client.connection")
    collector.resume()
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


def _parse_run(run: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``run`` takes its prompt before or after its options (``run echo --stream "hi"``).

    The sub-command is the first argument that is not an option.  argparse
    matches positionals greedily in chunks, so ``run``'s own arguments are
    parsed with ``parse_intermixed_args`` on its parser alone.
    """
    args = run.parse_intermixed_args(argv)
    if args.prompt is None:  # exits 2, with the usage
        run.error('no prompt: give it after the agent, or "-" to read it from stdin')
    args.command = "run"
    return args


_CLIENT_COMMANDS = {
    "agents": agents_command,
    "status": status_command,
    "worktrees": worktrees_command,
    "run": run_command,
    "watch": watch_command,
    "result": result_command,
    "audit": audit_command,
    "team": team_command,
    "ui": ui_command,
}
