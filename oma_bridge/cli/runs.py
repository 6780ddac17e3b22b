"""``oma-bridge run``, ``watch`` and ``result``: runs of an agent and their journal."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oma_bridge.cli.common import connect_daemon
from oma_bridge.cli_exits import EXIT_FAILED, EXIT_INVALID

if TYPE_CHECKING:
    from oma_bridge.client import Client


async def run_command(args: argparse.Namespace) -> int:
    from oma_bridge.errors import InvalidMessageError

    if args.detach and args.stream:
        print("oma-bridge: --detach and --stream do not go together", file=sys.stderr)
        return EXIT_INVALID
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    try:
        run_input = build_run_input(prompt, args.image)
    except ValueError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    overrides = {"systemPrompt": args.system} if args.system is not None else {}
    result: Any = None
    streamed = ""
    try:
        async with connect_daemon(args) as client:
            agent = await client.open(args.agent, **overrides)
            if args.detach:
                run_id = await detach(client, agent.agent_id, run_input)
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
        return print_result(result, output=False)
    return print_result(result)


async def detach(client: Any, agent_id: str, run_input: Any) -> str:
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


async def watch_command(args: argparse.Namespace) -> int:
    """What the agent's journal holds (after ``--after-seq``), then its runs in flight as
    they stream; it ends when none is left (PROTOCOL §18.4), or never with ``--follow``."""
    async with connect_daemon(args) as client:
        # Taken first: a run in flight now ends after it, so its run_end is in
        # the journal read next or among the live entries after it.
        pending = await runs_in_flight(client, args.agent_id)
        held = await client.journal(args.agent_id, after_seq=args.after_seq)
        ended = {str(item.entry.get("runId")) for item in held if item.type == "run_end"}
        for item in held:
            print_entry(item)
        pending -= ended
        if not pending and not args.follow:
            return 0
        cursor = held[-1].seq if held else (args.after_seq or 0)
        async with client.watch(args.agent_id, after_seq=cursor) as entries:
            async for item in entries:
                print_entry(item)
                if item.type != "run_end" or args.follow:
                    continue
                ended.add(str(item.entry.get("runId")))
                pending = (pending | await runs_in_flight(client, args.agent_id)) - ended
                if not pending:
                    break
    return 0


async def runs_in_flight(client: Client, agent_id: str) -> set[str]:
    """The ids of the agent's runs that are running or queued."""
    status = await client.status()
    return {str(run["runId"]) for run in status["runs"] if run.get("agentId") == agent_id}


def print_entry(item: Any) -> None:
    text = item.text
    if text is not None:
        sys.stdout.write(text)
        sys.stdout.flush()
    elif item.type == "run_end":
        sys.stdout.write("\n")
        sys.stdout.flush()


async def result_command(args: argparse.Namespace) -> int:
    """``run/result``: a finished run's output on stdout (or the whole result, ``--json``)."""
    from oma_bridge.client import DaemonError
    from oma_bridge.wire.codes import RUN_IN_PROGRESS

    async with connect_daemon(args) as client:
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
    return print_result(result)


def print_result(result: Any, *, output: bool = True) -> int:
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


def build_run_input(prompt: str, images: Sequence[Path]) -> Any:
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
