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

from oma_bridge._version import __version__

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
        return serve_command(args)
    if args.command == "acp":
        from oma_bridge.shim import main as shim

        return shim(args)
    if args.command == "registry":
        return registry_command(args, subparsers["registry"])
    if args.command == "agents" and args.agents_command == "add":
        return agents_add_command(args)
    if args.command == "tls":
        return tls_init_command(args)
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
