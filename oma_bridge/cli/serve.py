"""``oma-bridge serve``: the daemon in the foreground."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from oma_bridge.cli_exits import EXIT_FAILED, EXIT_INVALID


def serve_command(args: argparse.Namespace) -> int:
    import functools

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
        daemon = functools.partial(run_daemon, config, handle_signals=True)
        anyio.run(daemon, backend_options={"use_uvloop": loop == "uvloop"})
    except ConfigError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID
    except StartupError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 0
    return 0
