"""Crash records are believed only when nobody else could have written them (issue 22).

``reap_leftovers`` SIGKILLs the process groups a dead daemon's record lists.
A record planted by another user, one in a folder others can write, or one
naming a group whose leader does not carry the daemon's tag, must leave the
group alone and say which file it skipped.  Each refusal is paired with the
same record made trustworthy, which is reaped: the one difference is the
reason.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from lifecycle.harness import config_text, daemon_process
from process.conftest import wait_gone

from oma_bridge.supervision.supervisor import TAG_VARIABLE, reap_leftovers
from oma_bridge.supervision.watchdog import start_time

as_root = pytest.mark.skipif(os.getuid() != 0, reason="planting another user's file needs root")
NOBODY = 65534
SUPERVISOR = "oma_bridge.supervision.supervisor"


@pytest.fixture
def owner() -> str:
    """A daemon's owner id of this test alone: reaping kills every process tagged with it."""
    return secrets.token_hex(8)


@pytest.fixture
def groups() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def group(started: list[subprocess.Popen[bytes]], *, tag: str | None) -> subprocess.Popen[bytes]:
    """A ``sleep`` leading its own process group, carrying ``tag`` (or no tag)."""
    env = {key: value for key, value in os.environ.items() if key != TAG_VARIABLE}
    if tag is not None:
        env[TAG_VARIABLE] = tag
    process = subprocess.Popen(["sleep", "60"], start_new_session=True, env=env)
    started.append(process)
    return process


def record(owner: str, *listed: subprocess.Popen[bytes]) -> str:
    """A state file of a dead daemon (its watchdog gone) listing ``listed``."""
    lines = ["oma-bridge-supervisor 1", f"owner {owner}", "watchdog 999999999 1"]
    lines += [f"+{process.pid} {start_time(process.pid)}" for process in listed]
    return "\n".join(lines) + "\n"


def state_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    return folder


def write(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    return path


def plant_as_nobody(target: Path, text: str) -> Path:
    """``target`` written by another user: a forked child drops to uid 65534 to write it."""
    staging = Path(tempfile.mkdtemp(dir="/tmp"))  # a place the other user can reach
    try:
        os.chown(staging, NOBODY, NOBODY)
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            status = 1
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                fd = os.open(staging / target.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.write(fd, text.encode())
                os.close(fd)
                status = 0
            finally:
                os._exit(status)
        assert os.waitpid(pid, 0)[1] == 0
        (staging / target.name).rename(target)  # a rename keeps the owner
    finally:
        shutil.rmtree(staging)
    assert target.stat().st_uid == NOBODY
    return target


def alive(process: subprocess.Popen[bytes]) -> bool:
    return not wait_gone([process.pid], within=0.2)


@as_root
def test_a_record_another_user_wrote_is_skipped_and_its_group_survives(
    tmp_path: Path,
    groups: list[subprocess.Popen[bytes]],
    caplog: pytest.LogCaptureFixture,
    owner: str,
) -> None:
    folder = state_dir(tmp_path)
    victim = group(groups, tag=f"{owner}.1")  # tagged: a trusted record would end it
    path = plant_as_nobody(folder / f"{owner}.state", record(owner, victim))
    with caplog.at_level(logging.WARNING, logger=SUPERVISOR):
        assert reap_leftovers(folder) == 0
    assert alive(victim)
    assert f"skipped a crash record: {path} belongs to another user (uid {NOBODY})" in caplog.text
    assert path.exists()  # not ours to delete
    os.chown(path, os.getuid(), os.getgid())  # the same record, ours
    assert reap_leftovers(folder) == 1
    assert wait_gone([victim.pid], within=3)


@pytest.mark.parametrize("where", ["folder", "file"])
def test_a_record_others_could_write_is_skipped(
    tmp_path: Path,
    groups: list[subprocess.Popen[bytes]],
    caplog: pytest.LogCaptureFixture,
    owner: str,
    where: str,
) -> None:
    folder = state_dir(tmp_path)
    victim = group(groups, tag=f"{owner}.1")
    path = write(folder / f"{owner}.state", record(owner, victim))
    loose = folder if where == "folder" else path
    loose.chmod(0o1777 if where == "folder" else 0o646)
    with caplog.at_level(logging.WARNING, logger=SUPERVISOR):
        assert reap_leftovers(folder) == 0
    assert alive(victim)
    if where == "folder":
        expected = (
            f"skipped the crash records of a state folder others can write: {folder} has mode 1777"
        )
    else:
        expected = f"skipped a crash record: {path} has mode 0646"
    assert expected in caplog.text
    loose.chmod(0o700 if where == "folder" else 0o600)
    assert reap_leftovers(folder) == 1
    assert wait_gone([victim.pid], within=3)


def test_a_group_whose_leader_carries_no_tag_survives_its_record(
    tmp_path: Path,
    groups: list[subprocess.Popen[bytes]],
    caplog: pytest.LogCaptureFixture,
    owner: str,
) -> None:
    folder = state_dir(tmp_path)
    ours = group(groups, tag=f"{owner}.1")
    stranger = group(groups, tag=None)
    another_daemons = group(groups, tag=f"{secrets.token_hex(8)}.1")
    path = write(folder / f"{owner}.state", record(owner, ours, stranger, another_daemons))
    with caplog.at_level(logging.WARNING, logger=SUPERVISOR):
        assert reap_leftovers(folder) == 1
    assert wait_gone([ours.pid], within=3)
    assert alive(stranger) and alive(another_daemons)
    for left in (stranger, another_daemons):
        assert (
            f"crash record {path}: process group {left.pid} does not carry its daemon's tag; "
            "left alone"
        ) in caplog.text
    assert not path.exists()


def test_records_that_are_not_what_they_say_are_skipped(
    tmp_path: Path,
    groups: list[subprocess.Popen[bytes]],
    caplog: pytest.LogCaptureFixture,
    owner: str,
) -> None:
    folder = state_dir(tmp_path)
    victim = group(groups, tag=f"{owner}.1")
    # Named after another owner than the one it records; a symlink to a record.
    misnamed = write(folder / "ffffffffffffffff.state", record(owner, victim))
    elsewhere = write(tmp_path / "elsewhere", record(owner, victim))
    link = folder / f"{owner}.state"
    link.symlink_to(elsewhere)
    with caplog.at_level(logging.WARNING, logger=SUPERVISOR):
        assert reap_leftovers(folder) == 0
    assert alive(victim)
    assert (
        f"skipped a crash record: {misnamed} records the owner {owner}, "
        "not the one it is named after"
    ) in caplog.text
    assert f"skipped a crash record: [Errno 40] Too many levels of symbolic links: '{link}'" in (
        caplog.text
    )


@as_root
@pytest.mark.anyio
async def test_a_starting_daemon_skips_both_and_says_which_files(
    groups: list[subprocess.Popen[bytes]], owner: str
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="omc-", dir="/tmp"))  # short: the socket lives here
    try:
        state = folder / "state" / "oma-bridge"
        state.mkdir(mode=0o700, parents=True)
        planted_for = group(groups, tag=f"{owner}.1")
        planted = plant_as_nobody(state / f"{owner}.state", record(owner, planted_for))
        ours = secrets.token_hex(8)
        untagged = group(groups, tag=None)
        write(state / f"{ours}.state", record(ours, untagged))
        async with daemon_process(folder, config_text(folder)) as daemon:
            await daemon.wait_log(f"{planted} belongs to another user (uid {NOBODY})")
            await daemon.wait_log(f"process group {untagged.pid} does not carry its daemon's tag")
            assert alive(planted_for) and alive(untagged)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
