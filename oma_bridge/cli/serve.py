"""``oma-bridge serve``: the daemon in the foreground."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from oma_bridge.cli_exits import EXIT_FAILED, EXIT_INVALID


def serve_command(args: argparse.Namespace) -> int:
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
        anyio.run(run_daemon_until_stopped, run_daemon, config, backend_options=options)
    except ConfigError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    except StartupError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 0
    return 0


async def run_daemon_until_stopped(run_daemon: Any, config: Any) -> None:
    wait_for_children_in_the_loop()
    await run_daemon(config, handle_signals=True)


def wait_for_children_in_the_loop() -> None:
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
