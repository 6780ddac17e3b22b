"""The cyclic garbage collector of the ``oma-bridge`` process: paused while it starts.

A command's start imports some 25,000 tracked objects (modules, classes,
functions) that live as long as the process.  With CPython's thresholds the
collector walks them about twice on the way (~60 young collections, ~5-8 ms
of ``oma-bridge run echo hi``'s ~110 ms, bench/bench_cli.py) and once more
in the interpreter's last collections at exit (~15 ms), none of which frees
anything the process's end would not.  So :func:`~oma_bridge.cli.console_main`
pauses the collector; once the command has imported what it runs on,
:func:`resume` freezes all that (``gc.freeze``: never walked again) and
collects as usual from there, which is what a long command (``serve``,
``acp``, ``watch --follow``) lives on; at exit, :func:`freeze` skips the
last collections.  A process setting, like the daemon's thresholds
(``tune_gc``): :func:`~oma_bridge.cli.main` called in a process of its own
(a test) finds the collector on and leaves it so.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Collect nothing until :func:`resume` (the process's start)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """The command's work begins: freeze what is there, and collect as usual (if paused).

    Whatever was garbage in a cycle by then (an argument parser) is frozen
    with the rest: a few hundred objects, once.
    """
    global _paused
    if _paused:
        gc.freeze()
        gc.enable()
        _paused = False


def freeze() -> None:
    """The process ends: the interpreter's last collections walk nothing there is now.

    No finalizer of an object left in a cycle runs (after ``run echo hi``:
    argument parsers, frames, tracebacks); files are closed by the ``with``
    that opened them, logs by ``logging``'s exit handler.
    """
    gc.freeze()
