"""Running ``git`` for the daemon: a supervised child with a scrubbed environment.

Why the supervisor, not a bare ``subprocess``: ``git worktree add`` checks
out a whole tree and may take seconds on a large repository; as a child of
the supervisor it is in a process group of its own, registered with the
crash watchdog (a SIGKILL of the daemon ends it too) and listed by
``daemon/status`` while it runs, like every other process the daemon starts
(``docs/processes.md``).  Its environment is the supervisor's child
environment, which never holds the daemon's token or a provider key; on top
of that, the variables that would point git at another repository or
configuration than the folder it is run in (``GIT_DIR``, ``GIT_WORK_TREE``,
``GIT_INDEX_FILE``, ... inherited by a daemon started from a git hook, say)
are removed with ``env -u``, since an overlay can only add variables.
``LC_ALL=C`` keeps git's words stable, ``GIT_TERMINAL_PROMPT=0`` keeps it from
asking anything, and ``GIT_OPTIONAL_LOCKS=0`` keeps a ``status`` from taking
the index lock an agent's own git may want at the same moment.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

import anyio

from oma_bridge.errors import WorktreeError
from oma_bridge.supervision.supervisor import Supervisor, default_supervisor

__all__ = ["GIT_REDIRECTS", "GitFailed", "run_git"]

#: Variables that make git work on another repository, index or config than its folder's.
GIT_REDIRECTS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_PREFIX",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_QUARANTINE_PATH",
)
_OVERLAY = {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
#: Enough for the porcelain output of a large worktree's status.
_MAX_OUTPUT = 16 * 1024 * 1024
_STOP_GRACE_S = 2.0


class GitFailed(Exception):
    """git exited non-zero: its status and the last line it wrote on stderr."""

    def __init__(self, args: Sequence[str], code: int, stderr: str) -> None:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        self.code = code
        self.said = lines[-1] if lines else f"exit {code}"
        super().__init__(f"git {' '.join(args)} failed: {self.said}")


async def run_git(
    args: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    git: str = "git",
    supervisor: Supervisor | None = None,
) -> str:
    """``git ARGS`` in ``cwd``; its stdout (``LC_ALL=C``).

    Raises :class:`GitFailed` for a non-zero exit and
    :class:`~oma_bridge.errors.WorktreeError` when git or ``env`` is not
    there.  A cancelled caller leaves no git behind (stopped, shielded).
    """
    binary = shutil.which(git)
    env = shutil.which("env")
    if binary is None:
        raise WorktreeError(
            f'no git binary: "{git}" not found on PATH',
            "install git (Debian and Ubuntu: apt install git)",
        )
    if env is None:
        raise WorktreeError("no env binary on PATH (coreutils)", "install coreutils")
    unset = [part for name in GIT_REDIRECTS for part in ("-u", name)]  # GNU and BusyBox env
    argv = [env, *unset, binary, *args]
    process = await (supervisor or default_supervisor()).spawn(
        argv, env=_OVERLAY, cwd=cwd, stdin=False
    )
    chunks: list[bytes] = []
    try:
        size = 0
        async for chunk in process.stdout:
            size += len(chunk)
            if size <= _MAX_OUTPUT:
                chunks.append(chunk)
        code = await process.wait()
        await process.wait_closed()
    finally:
        with anyio.CancelScope(shield=True):
            await process.stop(_STOP_GRACE_S)
    if code != 0:
        raise GitFailed(args, code, process.stderr.text())
    return b"".join(chunks).decode(errors="replace")
