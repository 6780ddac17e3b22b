"""The ``oma-bridge`` command line: ``serve``, ``agents``, ``run``, ``status``.

Every command but ``serve`` finds the daemon through its discovery file and
says so plainly when none is running.  Exit codes: 0 success, 1 a failed
run or a daemon that cannot start, 2 bad input (usage, config,
``InvalidMessageError``), 3 no daemon to talk to.
"""

from __future__ import annotations

import argparse
import base64
import mimetypes
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from oma_bridge._version import __version__
from oma_bridge.wire.codes import FORBIDDEN, INVALID_MESSAGE, INVALID_PARAMS, NOT_FOUND

EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_NO_DAEMON = 3


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

    commands.add_parser("agents", help="list the daemon's agent profiles")
    commands.add_parser("status", help="show agents, runs and processes")

    run = commands.add_parser("run", help="run an agent once and print its output")
    run.add_argument("agent", help="a profile name (see `oma-bridge agents`)")
    run.add_argument("prompt", nargs="?", default="-", help='the prompt, or "-" to read stdin')
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

    watch = commands.add_parser("watch", help="print a live agent's text as it streams")
    watch.add_argument("agent_id", metavar="AGENT_ID", help="an agent id (see `oma-bridge status`)")
    watch.add_argument(
        "--after-seq", type=int, metavar="N", help="replay the journal after entry N first"
    )

    audit = commands.add_parser("audit", help="show the audit log as a table")
    audit.add_argument("--follow", action="store_true", help="keep printing new records")
    audit.add_argument("--agent", metavar="ID", help="only the records of this agent")
    audit.add_argument("--file", type=Path, help="the audit log (default: the state folder's)")
    return parser, {"serve": serve, "run": run}


def main(argv: Sequence[str] | None = None) -> int:
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
    from oma_bridge.client import DaemonError, DaemonNotRunningError

    try:
        return anyio.run(_CLIENT_COMMANDS[args.command], args)
    except DaemonNotRunningError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_NO_DAEMON
    except DaemonError as error:
        print(f"oma-bridge: {error.message}", file=sys.stderr)
        return EXIT_INVALID if error.rpc_code in _BAD_REQUEST_CODES else EXIT_FAILED
    except KeyboardInterrupt:
        return 130


#: Not found, forbidden, invalid params: the user asked for something wrong.
_BAD_REQUEST_CODES = frozenset({NOT_FOUND, FORBIDDEN, INVALID_PARAMS})


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
    args.command = "run"
    return args


# ---------------------------------------------------------------------------
# serve


def _serve(args: argparse.Namespace) -> int:
    from oma_bridge.logs import configure_logging
    from oma_bridge.server.config import ConfigError, TcpEndpoint, load_config
    from oma_bridge.server.daemon import run_daemon
    from oma_bridge.server.listeners import StartupError

    configure_logging(args.log_format)
    try:
        config = load_config(args.config)
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
        anyio.run(_run_daemon_until_stopped, run_daemon, config)
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

    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
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


async def _agents(args: argparse.Namespace) -> int:
    from oma_bridge.client import connect

    async with connect(client_name="oma-bridge-cli") as client:
        agents = await client.list_agents()
    rows = [[a["name"], a["kind"], a.get("model", ""), a.get("description", "")] for a in agents]
    print(_table(["NAME", "KIND", "MODEL", "DESCRIPTION"], rows) if rows else "no agents")
    return 0


async def _status(args: argparse.Namespace) -> int:
    from oma_bridge.client import connect

    async with connect(client_name="oma-bridge-cli") as client:
        status = await client.status()
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
    return 0


async def _run(args: argparse.Namespace) -> int:
    from oma_bridge.client import connect
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
    try:
        async with connect(client_name="oma-bridge-cli") as client:
            agent = await client.open(args.agent, **overrides)
            if args.detach:
                run_id = await _detach(client, agent.agent_id, run_input)
                print(f"{agent.agent_id} {run_id}")
                return 0
            try:
                if args.stream:
                    stream = agent.stream(run_input)
                    async for event in stream:
                        if event.type == "text":
                            sys.stdout.write(event.data)
                            sys.stdout.flush()
                    result = stream.result
                else:
                    result = await agent.run(run_input)
                    sys.stdout.write(result.output)
            finally:
                await agent.close()
    except InvalidMessageError as error:
        print(f"oma-bridge: InvalidMessageError: {error}", file=sys.stderr)
        return EXIT_INVALID
    if result is not None and result.output and not result.output.endswith("\n"):
        sys.stdout.write("\n")
    if result is None or not result.success:
        reason = result.status.message if result is not None else "no result"
        code = result.status.code if result is not None else "error"
        print(f"oma-bridge: run {code}: {reason}", file=sys.stderr)
        return EXIT_FAILED
    return 0


async def _detach(client: Any, agent_id: str, run_input: Any) -> str:
    """Start a run that goes on after this connection closes; return once the daemon has it."""
    import uuid

    from oma_bridge.client import DaemonError
    from oma_bridge.errors import InvalidMessageError, WireError

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
    from oma_bridge.client import connect

    async with connect(client_name="oma-bridge-cli") as client:
        async for item in client.watch(args.agent_id, after_seq=args.after_seq):
            text = item.text
            if text is not None:
                sys.stdout.write(text)
                sys.stdout.flush()
            elif item.entry.get("type") == "run_end":
                sys.stdout.write("\n")
                sys.stdout.flush()
    return 0


async def _audit(args: argparse.Namespace) -> int:
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


_CLIENT_COMMANDS = {
    "agents": _agents,
    "status": _status,
    "run": _run,
    "watch": _watch,
    "audit": _audit,
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
