"""acpx (openclaw/acpx, a headless ACP client CLI) with ``oma-bridge acp <profile>`` as its agent.

This is the one editor-like client that runs here; its command line is the
``{"command": "oma-bridge", "args": ["acp", "<profile>"]}`` of docs/editors.md.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import psutil
from support.acpx import queue_owners, run_acpx, wait_queue_owners_gone

from .harness import OMA_BRIDGE, Facade, daemon_status, wait_for_discovery


def agent(facade: Facade, profile: str) -> tuple[str, str]:
    # acpx splits --agent like a shell: quoted, so that any path works.
    return ("--agent", shlex.join(facade.shim(profile)))


def acpx_run(
    acpx: list[str], home: Path, facade: Facade, *args: str
) -> subprocess.CompletedProcess[str]:
    return run_acpx(acpx, home, *args, cwd=facade.work, env=facade.env)


def test_acpx_exec_prints_the_answer(acpx: list[str], acpx_home: Path, facade: Facade) -> None:
    done = acpx_run(acpx, acpx_home, facade, *agent(facade, "echo"), "exec", "hello from acpx")
    assert done.returncode == 0, done.stderr
    assert "hello from acpx" in done.stdout and "[done] end_turn" in done.stdout
    raw = acpx_run(
        acpx, acpx_home, facade, "--format", "json", *agent(facade, "echo"), "exec", "raw"
    )
    messages = [json.loads(line) for line in raw.stdout.splitlines()]
    initialized = next(m for m in messages if m.get("id") == messages[0]["id"] and "result" in m)
    assert initialized["result"]["agentInfo"]["name"] == "oma-bridge/echo"
    assert messages[-1]["result"] == {"stopReason": "end_turn"}


def test_acpx_approve_all_and_deny_all_reach_the_agent(
    acpx: list[str], acpx_home: Path, facade: Facade
) -> None:
    facade.require("chunks")

    def ask(flag: str) -> subprocess.CompletedProcess[str]:
        command = ("--format", "quiet", flag, *agent(facade, "chunks"), "exec", "ask")
        return acpx_run(acpx, acpx_home, facade, *command)

    approved = ask("--approve-all")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == "permission: allow-once"  # what the agent received
    denied = ask("--deny-all")
    assert denied.returncode == 5, denied.stderr  # acpx: PERMISSION_DENIED
    assert denied.stdout.strip() == "permission: reject-once"
    decisions = [r for r in facade.audit() if r["event"] == "permission"]
    assert [r["outcome"] for r in decisions] == [
        {"outcome": "selected", "optionId": "allow-once"},
        {"outcome": "selected", "optionId": "reject-once"},
    ]
    assert {r["decidedBy"]["client"]["name"] for r in decisions} == {"acpx"}


def test_acpx_persistent_session_across_invocations(
    acpx: list[str], acpx_home: Path, facade: Facade
) -> None:
    demo = agent(facade, "demo")
    created = acpx_run(acpx, acpx_home, facade, *demo, "sessions", "new")
    assert created.returncode == 0, created.stderr
    session = created.stdout.strip()
    assert session.startswith("agt_")  # the daemon's id, which stays valid across connections
    # A 1 s queue-owner TTL: each prompt below is a new acpx process, a new shim and a new
    # connection that loads the session again; the daemon kept the agent between them.
    quick = ("--ttl", "1", "--format", "quiet", *demo)
    first = acpx_run(acpx, acpx_home, facade, *quick, "prompt", "one two")
    wait_queue_owners_gone(acpx_home)
    second = acpx_run(acpx, acpx_home, facade, *quick, "prompt", "three")
    wait_queue_owners_gone(acpx_home)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert "This is turn 1 of session demo-1" in first.stdout
    assert "This is turn 2 of session demo-1" in second.stdout
    listed = acpx_run(acpx, acpx_home, facade, *demo, "sessions", "list")
    assert listed.stdout.split("\t")[0] == session
    # With its queue owner still running, acpx closes the session on the agent too
    # (session/close), and the daemon disposes of it.
    kept = ("--ttl", "30", "--format", "quiet", *demo)
    third = acpx_run(acpx, acpx_home, facade, *kept, "prompt", "four")
    assert "This is turn 3 of session demo-1" in third.stdout
    assert queue_owners(acpx_home)
    assert session in {row["agentId"] for row in daemon_status(facade)["agents"]}
    closed = acpx_run(acpx, acpx_home, facade, *demo, "sessions", "close")
    assert closed.returncode == 0, closed.stderr
    assert session not in {row["agentId"] for row in daemon_status(facade)["agents"]}


def test_acpx_config_agent_autostarts_a_daemon_that_outlives_acpx(
    acpx: list[str], acpx_home: Path, no_daemon: dict[str, str], tmp_path: Path
) -> None:
    """docs/editors.md's acpx config, on a machine where no daemon runs yet.

    acpx kills every process it saw descend from an agent when it is done
    with it; the daemon the shim starts must not be one of them.
    """
    config = acpx_home / ".acpx" / "config.json"
    config.parent.mkdir(parents=True)
    agent = {"command": OMA_BRIDGE, "args": ["acp", "echo"]}
    config.write_text(json.dumps({"agents": {"oma-echo": agent}}))
    work = tmp_path / "project"
    work.mkdir()
    done = run_acpx(acpx, acpx_home, "oma-echo", "exec", "started for you", cwd=work, env=no_daemon)
    assert done.returncode == 0, done.stderr
    assert "started for you" in done.stdout
    pid = wait_for_discovery(Path(no_daemon["XDG_RUNTIME_DIR"]), None)
    daemon = psutil.Process(pid)
    assert daemon.status() != psutil.STATUS_ZOMBIE and "serve" in daemon.cmdline()
    again = run_acpx(acpx, acpx_home, "oma-echo", "exec", "and again", cwd=work, env=no_daemon)
    assert again.returncode == 0 and "and again" in again.stdout
    assert wait_for_discovery(Path(no_daemon["XDG_RUNTIME_DIR"]), None) == pid  # the same one
    daemon.terminate()
    assert not psutil.wait_procs([daemon], timeout=15)[1]
