"""The command line's exit statuses (PROTOCOL §18.3) and the one line each error ends with.

0 success, 1 a failed run, 2 bad input or usage, 3 no daemon reachable, 4
refused by the daemon (authentication, Forbidden).  Output into a closed
pipe (``oma-bridge status | head``) ends quietly, with 141 as a process
killed by SIGPIPE would (what ``set -o pipefail`` expects of any tool).

Standard library only, and the client's errors imported where they are
told apart: ``oma-bridge acp`` and the client commands start without anyio.
"""

from __future__ import annotations

import os
import sys

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILED",
    "EXIT_INVALID",
    "EXIT_NO_DAEMON",
    "EXIT_REFUSED",
    "client_failure",
    "is_broken_pipe",
    "quiet_after_broken_pipe",
]

EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_NO_DAEMON = 3
EXIT_REFUSED = 4
#: 128 + SIGPIPE: what a shell reports for a writer whose reader went away.
EXIT_BROKEN_PIPE = 141


def client_failure(error: BaseException, *, token_file_given: bool) -> tuple[int, str] | None:
    """The exit status and the line on stderr for an error of a client command; ``None``
    for anything else (a bug, which keeps its traceback)."""
    from oma_bridge.client import (
        ConnectOptionError,
        DaemonError,
        DaemonNotRunningError,
        DaemonUnavailableError,
    )
    from oma_bridge.wire.codes import FORBIDDEN, INVALID_MESSAGE, INVALID_PARAMS, NOT_FOUND

    if isinstance(error, ConnectOptionError):  # --url, --token-file or --ca-file that cannot work
        return EXIT_INVALID, f"oma-bridge: {error}"
    if isinstance(error, DaemonUnavailableError) and error.status in (401, 403):
        # It is there and said no: not "no daemon running" (exit 3).
        fix = ""
        if error.status == 401:
            fix = (
                "; the daemon's token in the file of --token-file is wrong"
                if token_file_given
                else "; give the daemon's token with --token-file FILE"
            )
        return EXIT_REFUSED, f"oma-bridge: {error}{fix}"
    if isinstance(error, DaemonNotRunningError):
        return EXIT_NO_DAEMON, f"oma-bridge: {error}"
    if isinstance(error, DaemonError):
        if error.rpc_code == FORBIDDEN:
            return EXIT_REFUSED, f"oma-bridge: {error.message}"
        # Not found, invalid params or input: the user asked for something wrong.
        bad_request = error.rpc_code in (NOT_FOUND, INVALID_PARAMS, INVALID_MESSAGE)
        return (EXIT_INVALID if bad_request else EXIT_FAILED), f"oma-bridge: {error.message}"
    return None


def is_broken_pipe(error: BaseException) -> bool:
    """``error`` is a write into a closed pipe (alone, or all of an exception group)."""
    if isinstance(error, BrokenPipeError):
        return True
    if isinstance(error, BaseExceptionGroup):
        return all(is_broken_pipe(inner) for inner in error.exceptions)
    return False


def quiet_after_broken_pipe() -> int:
    """stdout's reader is gone: point stdout at /dev/null, so that nothing more
    (the interpreter's last flush included) writes a traceback, and return 141."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no stdout descriptor at all: nothing will be flushed to it
        pass
    return EXIT_BROKEN_PIPE
