"""``sandbox = "bwrap"``: its argv, its probe, its refusal, and how the daemon shows it.

* The mounts, in the order that makes deeper ones win; the daemon's own
  folders emptied where a bound path would show them (but a folder bound
  inside them still shows); root's unreadable ``/etc`` entries emptied.
* A sandbox that cannot be applied (no binary, a binary that fails to make
  its namespaces) refuses the run with -32015 before anything is spawned,
  and says how to fix it; the probe's verdict is cached, with care.
* A sandboxed child is supervised as any other: listed with its labels, its
  SIGTERM grace kept, its tree ended, what it left inside found by its tag.
* ``agents/list``, ``daemon/status``, the ``spawn`` audit record and the
  facade's ``initialize`` carry ``"sandbox": {"kind", "network"}``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from daemon.conftest import daemon
from support.wire import wire_client
from websockets.asyncio.client import unix_connect

from oma_bridge.backends.acp.terminal import Terminals
from oma_bridge.backends.process.config import ProcessConfig
from oma_bridge.errors import SandboxUnavailableError, WireError
from oma_bridge.rpc.codes import RESOURCE_NOT_FOUND
from oma_bridge.server.config import ConfigError, parse_config
from oma_bridge.supervision import sandbox as sandboxing
from oma_bridge.supervision.sandbox import Bubblewrap, Sandbox
from oma_bridge.supervision.supervisor import (
    Supervisor,
    configure_supervisor,
    default_supervisor,
)
from oma_bridge.wire.codes import SANDBOX_UNAVAILABLE

pytestmark = pytest.mark.anyio

SANDBOXED = """
[agents.boxed]
kind = "process"
command = "cat"
sandbox = "bwrap"
network = false

[agents.plain]
kind = "process"
command = "cat"
"""


def mounts(argv: list[str]) -> list[tuple[str, str]]:
    """``(option, path)`` of the mounts after ``/tmp``'s tmpfs, up to ``--chdir``."""
    found: list[tuple[str, str]] = []
    index = argv.index("/tmp") + 1
    while argv[index] != "--chdir":
        option = argv[index]
        if option in ("--bind", "--bind-try", "--ro-bind-try"):
            found.append((option, argv[index + 1]))
            index += 3
        elif option == "--tmpfs":
            found.append((option, argv[index + 1]))
            index += 2
        else:
            index += 2  # --remount-ro PATH
    return found


async def checked(binary: str | None = None, **options: Any) -> Bubblewrap:
    bubblewrap = Bubblewrap(binary, **options)
    await bubblewrap.check(network=False)
    return bubblewrap


@pytest.mark.usefixtures("require_bwrap")
async def test_deeper_mounts_win_and_the_daemons_folders_stay_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = str(tmp_path / "home")
    monkeypatch.setenv("HOME", home)
    state = tmp_path / "state"
    worktree = state / "worktrees" / "agt_1"
    worktree.mkdir(parents=True)
    bubblewrap = await checked(hidden=[state])
    sandbox = Sandbox(read=("~/.npm", str(tmp_path)), write=("~/.cache",), network=False)
    argv = bubblewrap.argv(["cat"], sandbox=sandbox, cwd=str(worktree))
    assert argv[-2:] == ["--", "cat"] and argv[-4:-2] == ["--chdir", str(worktree)]
    assert mounts(argv) == [
        ("--ro-bind-try", str(tmp_path)),
        ("--tmpfs", home),  # the home folder stays empty under the read path...
        ("--tmpfs", str(state)),  # ...and so does the daemon's state folder...
        ("--ro-bind-try", f"{home}/.npm"),  # ...but for what is listed inside them
        ("--bind-try", f"{home}/.cache"),
        ("--bind", str(worktree)),
    ]
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--proc") + 1 : argv.index("--proc") + 5] == [
        "/proc",
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
    ]
    # A read path inside the folder stays read-only: it is mounted after it.
    inner = Sandbox(read=(f"{worktree}/vendor",), folder=str(worktree), network=False)
    assert mounts(bubblewrap.argv(["cat"], sandbox=inner, cwd=None))[-2:] == [
        ("--bind", str(worktree)),
        ("--ro-bind-try", f"{worktree}/vendor"),
    ]
    # The folder may be the home folder itself: then it shows whole.
    whole = Sandbox(folder="~", network=False)
    assert mounts(bubblewrap.argv(["cat"], sandbox=whole, cwd=None)) == [
        ("--tmpfs", home),
        ("--bind", home),
    ]
    with pytest.raises(SandboxUnavailableError, match="folder is /"):
        bubblewrap.argv(["cat"], sandbox=Sandbox(network=False), cwd="/")


@pytest.mark.skipif(os.geteuid() != 0, reason="what root's sandbox gets; not running as root")
@pytest.mark.usefixtures("require_bwrap")
async def test_root_is_uid_1000_inside_without_capabilities_or_etc_secrets(tmp_path: Path) -> None:
    supervisor = Supervisor()
    script = (
        "id -u; grep CapEff /proc/self/status; cat /etc/shadow | wc -c; "
        "echo 1 > /proc/sys/kernel/hostname || echo sysctl refused"
    )
    process = await supervisor.spawn(
        ["sh", "-c", script], cwd=tmp_path, stdin=False, sandbox=Sandbox(network=False)
    )
    try:
        output = b"".join([chunk async for chunk in process.stdout]).decode()
        await process.wait()
    finally:
        await process.stop(1)
        supervisor.close()
    lines = output.split()
    assert lines[:3] == ["1000", "CapEff:", "0000000000000000"], output
    assert lines[3] == "0", output  # /etc/shadow is there, and empty
    assert "sysctl refused" in output and "Read-only file system" in process.stderr.text()


@pytest.mark.usefixtures("require_bwrap")
async def test_a_sandboxed_child_is_supervised_like_any_other(tmp_path: Path) -> None:
    supervisor = Supervisor()
    script = "trap 'echo graceful; exit 0' TERM; sh -c 'exec sleep 60' & echo started; wait"
    process = await supervisor.spawn(
        ["sh", "-c", script],
        cwd=tmp_path,
        stdin=False,
        labels={"agentId": "agt_box"},
        sandbox=Sandbox(network=False),
    )
    try:
        assert await process.stdout.receive() == b"started\n"
        # The launcher, the sandbox's init, sh and sleep: all found by the tag, host pids.
        listed = await supervisor.processes()
        assert len(listed) == 4 and {dict(entry.labels)["agentId"] for entry in listed} == {
            "agt_box"
        }
        inside = [entry.pid for entry in listed if entry.pid != process.pid]
        with anyio.fail_after(10):
            await process.stop(5)  # SIGTERM reaches sh inside, which leaves on its own
        assert process.returncode == 0
        for pid in inside:
            assert not _running(pid)
    finally:
        await process.stop(0)
        supervisor.close()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


async def test_a_missing_binary_refuses_the_run_before_anything_is_spawned(
    folder: Path,
) -> None:
    server = f'bwrap = "{folder}/no/bwrap"'
    async with (
        daemon(folder, server=server, agents=SANDBOXED),
        wire_client(folder / "bridge.sock") as wire,
    ):
        agent_id = (await wire.result("agent/open", {"profile": "boxed"}))["agentId"]
        error = await wire.error("agent/run", {"agentId": agent_id, "input": "hi"})
        assert error["code"] == SANDBOX_UNAVAILABLE == -32015
        assert error["data"] == {
            "name": "SandboxUnavailable",
            "reason": f'no bubblewrap binary: "{folder}/no/bwrap" not found',
            "details": error["message"],
        }
        assert "apt install bubblewrap" in error["message"]
        assert "[server] bwrap" in error["message"]
        status = await wire.result("daemon/status")
        assert status["processes"] == [] and status["runs"] == []
        one_off = {"config": {"profile": "boxed"}, "input": "hi"}
        assert (await wire.error("oma/runAgent", one_off))["code"] == -32015
        # Unsandboxed profiles are not affected.
        plain = (await wire.result("agent/open", {"profile": "plain"}))["agentId"]
        assert (await wire.result("agent/run", {"agentId": plain, "input": "hi"}))["output"] == "hi"
    spawns = [r for r in _audit(folder) if r["event"] == "spawn"]
    assert [r["profile"] for r in spawns] == ["plain"]


async def test_refused_namespaces_name_the_sysctl_to_fix(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create a new namespace, likely because "
        "the kernel does not allow non-privileged user namespaces.' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    bubblewrap = Bubblewrap(str(fake))
    with pytest.raises(SandboxUnavailableError) as refused:
        await bubblewrap.check(network=True)
    assert refused.value.reason.startswith(f"{fake} failed (exit 1): bwrap: No permissions")
    assert "user.max_user_namespaces" in refused.value.message
    assert refused.value.code == "SANDBOX_UNAVAILABLE" and not refused.value.retryable


@pytest.mark.usefixtures("require_bwrap")
async def test_the_probe_is_cached_with_care(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = tmp_path / "bwrap"
    bubblewrap = Bubblewrap(str(binary))
    with pytest.raises(SandboxUnavailableError, match="not found"):
        await bubblewrap.check(network=False)
    real = sandboxing.locate(None)
    assert real is not None
    binary.symlink_to(real)
    # A failure stands for a while (a burst of runs does not probe each)...
    with pytest.raises(SandboxUnavailableError, match="not found"):
        await bubblewrap.check(network=False)
    # ...and a fix is picked up once it is over, without a restart.
    monkeypatch.setattr(sandboxing, "RETRY_AFTER_S", 0.0)
    await bubblewrap.check(network=False)
    probes: list[bool] = []
    probe = bubblewrap._probe  # noqa: SLF001 — counting the probes the cache saves
    monkeypatch.setattr(
        bubblewrap, "_probe", lambda network: probes.append(network) or probe(network)
    )
    await bubblewrap.check(network=False)
    assert probes == []  # a success stands while the binary is the same file
    binary.unlink()
    with pytest.raises(SandboxUnavailableError, match="not found"):
        await bubblewrap.check(network=False)
    assert probes == [False]


def test_limits_without_a_sandbox_are_refused() -> None:
    for keys, problem in (
        ("network = false", 'network = false needs sandbox = "bwrap"'),
        ('sandbox_read = ["/opt"]', 'sandbox_read needs sandbox = "bwrap"'),
        (
            'sandbox = "bwrap"\nsandbox_write = ["cache"]',
            "'cache' must be an absolute path or start with ~/",
        ),
        ('sandbox = "firejail"', "Input should be 'none' or 'bwrap'"),
    ):
        text = f'[agents.a]\nkind = "process"\ncommand = "cat"\n{keys}\n'
        with pytest.raises(ConfigError) as refused:
            parse_config(text, source="c.toml", base_dir=Path("/"))
        assert problem in str(refused.value), str(refused.value)
        assert str(refused.value).startswith("c.toml: agents.a")
    config = ProcessConfig(command="cat", sandbox="bwrap", sandbox_read=("~/.npm",), network=False)
    assert config.sandbox_policy("/src") == Sandbox(("~/.npm",), (), False, "/src")
    assert ProcessConfig(command="cat").sandbox_policy() is None


@pytest.mark.usefixtures("require_bwrap")
async def test_list_status_audit_and_initialize_show_the_sandbox(folder: Path) -> None:
    shown = {
        "boxed": {"kind": "bwrap", "network": False},
        "plain": {"kind": "none", "network": True},
    }
    async with daemon(folder, agents=SANDBOXED), wire_client(folder / "bridge.sock") as wire:
        listed = (await wire.result("agents/list"))["agents"]
        assert {agent["name"]: agent["sandbox"] for agent in listed} == shown
        boxed = (await wire.result("agent/open", {"profile": "boxed"}))["agentId"]
        ran = await wire.result("agent/run", {"agentId": boxed, "input": "inside"})
        assert ran["output"] == "inside", ran
        status = await wire.result("daemon/status")
        assert status["agents"][0]["sandbox"] == shown["boxed"]
        for profile, meta in shown.items():
            uri = f"ws://localhost/acp/{profile}"
            async with unix_connect(str(folder / "bridge.sock"), uri) as acp:
                answer = (await _call(acp, "initialize", {"protocolVersion": 1}))["result"]
            assert answer["_meta"] == {"oma-bridge/sandbox": meta}
    [spawn] = [r for r in _audit(folder) if r["event"] == "spawn"]
    assert spawn["command"] == "cat" and spawn["profile"] == "boxed"
    assert spawn["sandbox"] == shown["boxed"]


async def _call(ws: Any, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": method, "method": method}
    if params is not None:
        message["params"] = params
    await ws.send(orjson.dumps(message).decode())
    with anyio.fail_after(20):
        while True:
            answer = orjson.loads(await ws.recv())
            if answer.get("id") == method:
                return dict(answer)


def _audit(folder: Path) -> list[dict[str, Any]]:
    path = folder / "state" / "audit.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


async def test_a_terminal_that_cannot_be_sandboxed_is_refused_to_the_agent(
    tmp_path: Path,
) -> None:
    configure_supervisor(bwrap=str(tmp_path / "no-bwrap"))
    try:
        terminals = Terminals(tmp_path, sandbox=Sandbox(folder=str(tmp_path)))
        with pytest.raises(WireError) as refused:
            await terminals.handle("terminal/create", {"command": "sh", "args": ["-c", "id"]})
        assert refused.value.rpc_code == RESOURCE_NOT_FOUND
        assert refused.value.message.startswith("cannot start sh: The sandbox cannot be applied")
        assert default_supervisor().live() == []
    finally:
        configure_supervisor()
