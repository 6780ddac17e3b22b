"""How a child ended, in words: one wording for every message that quotes an exit.

A return code is asyncio's: ``N >= 0`` for an exit with code N, ``-N`` for
the signal N.  A real-time signal has no name in :class:`signal.Signals`
(``signal.Signals(37)`` raises ``ValueError``), so it is named the way
``kill -l`` counts it, from ``SIGRTMIN``.
"""

from __future__ import annotations

import signal

__all__ = ["describe_exit", "exit_parts", "signal_name"]


def signal_name(signum: int) -> str:
    """``SIGTERM``; ``SIGRTMIN+3`` for a real-time signal; the bare number for any other."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        pass
    if signal.SIGRTMIN < signum < signal.SIGRTMAX:
        return f"SIGRTMIN+{signum - signal.SIGRTMIN}"
    return str(signum)  # one glibc keeps for itself (32, 33), or beyond SIGRTMAX


def exit_parts(returncode: int) -> tuple[int | None, str | None]:
    """``(code, None)`` for an exit, ``(None, signal name)`` for a signal."""
    if returncode >= 0:
        return returncode, None
    return None, signal_name(-returncode)


def describe_exit(returncode: int) -> str:
    """``exited with code N``, or ``exited with signal SIGX`` for a return code ``-N``."""
    code, name = exit_parts(returncode)
    return f"exited with code {code}" if name is None else f"exited with signal {name}"
