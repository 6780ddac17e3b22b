"""ProcessBackend.run against real processes (reference §9, PROTOCOL §11.1-5)."""

from __future__ import annotations

import re
import sys
from functools import partial
from pathlib import Path

import anyio
import psutil
import pytest

from oma_bridge.backends import text_only
from oma_bridge.backends.process import ProcessConfig, build_prompt
from oma_bridge.errors import BackendError, RunTimeoutError
from oma_bridge.supervision.supervisor import TAG_VARIABLE, default_supervisor

from .conftest import (
    PYTHON,
    Recorder,
    gone,
    kill_all,
    run_backend,
    script,
    tree_pids,
    wait_gone,
)

pytestmark = pytest.mark.anyio


# -- prompt and delivery ----------------------------------------------------


async def test_stdin_gets_exactly_the_system_prompt_and_prompt() -> None:
    recorder = Recorder()
    outcome = await run_backend(
        ProcessConfig(command="cat"),
        "  summarize checkout \n",
        system_prompt="  You are a local process worker.\n",
        emit=recorder,
    )
    assert outcome.output == "You are a local process worker.\n\nsummarize checkout"
    assert outcome.messages == [
        {"role": "assistant", "content": [{"type": "text", "text": outcome.output}]}
    ]
    assert outcome.token_usage.total == 0
    assert recorder.text == outcome.output


async def test_stdin_bytes_are_exactly_the_utf8_prompt_then_eof() -> None:
    code = "import sys; print(sys.stdin.buffer.read().hex())"
    config = ProcessConfig(command=PYTHON, args=("-c", code))
    outcome = await run_backend(config, "naïve 日本 ✓\r\nend", system_prompt="Sÿs")
    assert bytes.fromhex(outcome.output) == "Sÿs\n\nnaïve 日本 ✓\r\nend".encode()


def test_prompt_joins_the_last_user_text_blocks_with_newlines() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "old"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "reply"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": " a"}, {"type": "text", "text": "b "}],
        },
    ]
    assert build_prompt(None, messages) == "a\nb"  # type: ignore[arg-type]
    assert build_prompt("   ", messages) == "a\nb"  # type: ignore[arg-type]
    assert build_prompt(" sys ", []) == "sys"


async def test_output_is_stdout_untrimmed() -> None:
    config = ProcessConfig(command="printf", args=("  two\nlines  \n\n",), input="none")
    outcome = await run_backend(config)
    assert outcome.output == "  two\nlines  \n\n"


async def test_argument_mode_appends_the_prompt_as_last_argv_element() -> None:
    config = ProcessConfig(**script("proc_emit.py", "argv"), input="argument")
    outcome = await run_backend(config, "the prompt", system_prompt="sys")
    assert outcome.output == "sys\n\nthe prompt|"  # stdin is empty: /dev/null


async def test_none_mode_closes_stdin_and_accepts_an_empty_prompt() -> None:
    config = ProcessConfig(
        command=PYTHON, args=("-c", "import sys; print(repr(sys.stdin.read()))"), input="none"
    )
    outcome = await run_backend(config, "")
    assert outcome.output == "''\n"


async def test_a_child_that_never_reads_stdin_is_fine() -> None:
    config = ProcessConfig(command="echo", args=("done",))
    outcome = await run_backend(config, "x" * 1_000_000)  # far more than a pipe holds
    assert outcome.output == "done\n"


async def test_empty_stdout_is_a_success_with_no_messages() -> None:
    outcome = await run_backend(ProcessConfig(command="true"))
    assert outcome.output == ""
    assert outcome.messages == []


@pytest.mark.parametrize("mode", ["stdin", "argument"])
async def test_empty_prompt_is_refused_before_spawning(tmp_path: Path, mode: str) -> None:
    marker = tmp_path / "spawned"
    config = ProcessConfig(command="touch", args=(str(marker),), input=mode)  # type: ignore[arg-type]
    with pytest.raises(BackendError) as caught:
        await run_backend(config, "   ", system_prompt=" ")
    assert caught.value.message == 'Process backend "p" received an empty prompt.'
    assert not marker.exists()


# -- stdout streaming -------------------------------------------------------


async def test_a_character_split_across_reads_is_never_mangled() -> None:
    recorder = Recorder()
    outcome = await run_backend(
        ProcessConfig(**script("proc_emit.py", "split-utf8")), emit=recorder
    )
    assert outcome.output == "café!"
    assert len(recorder.events) >= 2  # really streamed in pieces
    assert all("\ufffd" not in event.data for event in recorder.events)
    assert recorder.text == "café!"


async def test_a_100_mb_flood_hits_the_output_cap_and_ends_the_process() -> None:
    config = ProcessConfig(**script("proc_emit.py", "flood", str(100_000_000)))
    spawned: list[int] = []
    original = default_supervisor().spawn

    async def spy(*args: object, **kwargs: object) -> object:
        process = await original(*args, **kwargs)  # type: ignore[arg-type]
        spawned.append(process.pid)
        return process

    default_supervisor().spawn = spy  # type: ignore[method-assign]
    try:
        with pytest.raises(BackendError) as caught:
            await run_backend(config)
    finally:
        del default_supervisor().spawn
    assert caught.value.message == (
        'Process backend "p" exceeded max_output_bytes: more than 67108864 bytes of stdout'
    )
    assert gone(spawned[0])


async def test_ten_mb_of_stderr_with_small_stdout_does_not_deadlock() -> None:
    config = ProcessConfig(**script("proc_emit.py", "stderr-flood", str(10_000_000)))
    with anyio.fail_after(30):
        outcome = await run_backend(config)
    assert outcome.output == "small\n"


# -- failures ---------------------------------------------------------------


async def test_non_zero_exit_reports_the_code_and_the_redacted_stderr_tail() -> None:
    config = ProcessConfig(
        command="sh", args=("-c", "echo 'failed: api_key=super-secret ' >&2; exit 7")
    )
    with pytest.raises(BackendError) as caught:
        await run_backend(config)
    assert (
        caught.value.message == 'Process backend "p" exited with code 7: failed: api_key=[redacted]'
    )


async def test_non_zero_exit_without_stderr_has_no_colon() -> None:
    with pytest.raises(BackendError) as caught:
        await run_backend(ProcessConfig(command="false"))
    assert caught.value.message == 'Process backend "p" exited with code 1'


async def test_death_by_signal_names_the_signal() -> None:
    config = ProcessConfig(command="sh", args=("-c", "kill -TERM $$"))
    with pytest.raises(BackendError) as caught:
        await run_backend(config)
    assert caught.value.message == 'Process backend "p" exited with signal SIGTERM'


async def test_death_by_a_real_time_signal_names_it() -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGRTMIN + 3)"
    with pytest.raises(BackendError) as caught:
        await run_backend(ProcessConfig(command=PYTHON, args=("-c", code)))
    assert caught.value.message == 'Process backend "p" exited with signal SIGRTMIN+3'


async def test_stderr_tail_is_bounded_to_its_last_bytes() -> None:
    config = ProcessConfig(
        command=PYTHON,
        args=("-c", "import sys; sys.stderr.write('a' * 5000 + 'é' + 'TAIL'); sys.exit(2)"),
        stderr_tail_bytes=5,
    )
    with pytest.raises(BackendError) as caught:
        await run_backend(config)
    # The cut fell inside "é": its stray byte is dropped, not rendered as U+FFFD.
    assert caught.value.message == 'Process backend "p" exited with code 2: TAIL'


async def test_missing_command_is_a_failure_naming_it() -> None:
    with pytest.raises(BackendError) as caught:
        await run_backend(ProcessConfig(command="/no/such/agent-binary"))
    assert caught.value.message == (
        'Process backend "p" could not start "/no/such/agent-binary": No such file or directory'
    )


async def test_command_that_is_not_executable_is_a_failure(tmp_path: Path) -> None:
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(BackendError) as caught:
        await run_backend(ProcessConfig(command=str(plain)))
    assert (
        caught.value.message == f'Process backend "p" could not start "{plain}": Permission denied'
    )


async def test_missing_cwd_is_a_failure_naming_the_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(BackendError) as caught:
        await run_backend(ProcessConfig(command="cat", cwd=str(missing)))
    assert caught.value.message == (
        f'Process backend "p" could not start "cat": No such file or directory (cwd "{missing}")'
    )


async def test_a_nul_byte_in_the_prompt_argument_is_a_failure() -> None:
    config = ProcessConfig(command="echo", input="argument")
    with pytest.raises(BackendError) as caught:
        await run_backend(config, "a\x00b")
    assert caught.value.message == (
        'Process backend "p" could not start "echo": embedded null byte'
    )


async def test_cwd_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    monkeypatch.setenv("OMA_BRIDGE_TOKEN", "t" * 64)
    monkeypatch.setenv("LISTEN_FDS", "1")
    monkeypatch.setenv("KEEP_ME", "daemon")
    monkeypatch.setenv("OVERRIDE_ME", "daemon")
    code = "import os, json; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ)}))"
    config = ProcessConfig(
        command=PYTHON,
        args=("-c", code),
        input="none",
        cwd=str(tmp_path),
        env={"OVERRIDE_ME": "profile", "ADDED": "1"},
    )
    import orjson

    seen = orjson.loads((await run_backend(config)).output)
    assert seen["cwd"] == str(tmp_path)
    env = seen["env"]
    assert "NOTIFY_SOCKET" not in env
    assert "OMA_BRIDGE_TOKEN" not in env
    assert "LISTEN_FDS" not in env
    assert env["KEEP_ME"] == "daemon"
    assert env["OVERRIDE_ME"] == "profile"
    assert env["ADDED"] == "1"
    assert re.fullmatch(r"[0-9a-f]{16}\.\d+", env[TAG_VARIABLE])


# -- cancellation, timeout and the tree -------------------------------------


async def _pids_once_running(recorder: Recorder) -> dict[str, int]:
    with anyio.fail_after(10):
        while len(pids := tree_pids(recorder.text)) < 2:  # noqa: ASYNC110 (a poll)
            await anyio.sleep(0.01)
    return pids


async def test_cancel_kills_a_grandchild_that_ignores_sigterm() -> None:
    config = ProcessConfig(
        **script("proc_tree.py", "--ignore-term"), input="none", stop_grace_s=0.3
    )
    recorder = Recorder()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(partial(run_backend, config, "", emit=recorder))
        pids = await _pids_once_running(recorder)
        started = anyio.current_time()
        tasks.cancel_scope.cancel()
    try:
        assert wait_gone(list(pids.values()), within=1.0)
        # SIGTERM was ignored: the grace ran out before SIGKILL ended them.
        assert anyio.current_time() - started >= 0.3
    finally:
        kill_all(list(pids.values()))


async def test_live_children_are_listed_with_their_run() -> None:
    config = ProcessConfig(
        command="sleep", args=("30",), input="none", stop_grace_s=0.3, labels={"agentId": "a"}
    )
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run_backend, config)
        with anyio.fail_after(5):
            while not default_supervisor().live():  # noqa: ASYNC110 (a poll)
                await anyio.sleep(0.01)
        [process] = default_supervisor().live()
        assert not gone(process.pid)
        # The profile's labels, and the run's id added by the backend.
        [(pid, labels, _)] = await default_supervisor().processes()
        assert (pid, dict(labels)) == (process.pid, {"agentId": "a", "runId": "run-1"})
        tasks.cancel_scope.cancel()
    assert default_supervisor().live() == []
    assert gone(process.pid)


async def test_cancel_kills_an_escaped_grandchild() -> None:
    config = ProcessConfig(**script("proc_tree.py", "--escape"), input="none", stop_grace_s=0.3)
    recorder = Recorder()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(partial(run_backend, config, "", emit=recorder))
        pids = await _pids_once_running(recorder)
        assert psutil.Process(pids["grandchild"]).ppid() != pids["child"]  # really escaped
        tasks.cancel_scope.cancel()
    try:
        assert wait_gone(list(pids.values()), within=1.0)
    finally:
        kill_all(list(pids.values()))


async def test_grandchildren_die_when_the_child_exits() -> None:
    # Left in the group holding stdout, escaped holding stdout, or in the group
    # holding nothing: each would otherwise outlive the run.
    for flags in (("--exit",), ("--exit", "--escape"), ("--exit", "--quiet-grandchild")):
        config = ProcessConfig(**script("proc_tree.py", *flags), input="none")
        with anyio.fail_after(10):
            outcome = await run_backend(config)
        pids = list(tree_pids(outcome.output).values())
        try:
            assert len(pids) == 2
            assert wait_gone(pids, within=1.0), flags
        finally:
            kill_all(pids)


async def test_profile_timeout_ends_the_run_with_a_timeout_error() -> None:
    config = ProcessConfig(command="sleep", args=("30",), input="none", timeout_s=0.2)
    with anyio.fail_after(10), pytest.raises(RunTimeoutError) as caught:
        await run_backend(config)
    assert caught.value.message == 'Agent "p" exceeded whole-run timeout of 200ms'


async def test_a_run_cancelled_before_it_starts_spawns_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    config = ProcessConfig(command="touch", args=(str(marker),))
    with anyio.CancelScope() as scope:
        scope.cancel()
        await run_backend(config)
    await anyio.sleep(0.1)
    assert not marker.exists()


# -- soak: resources do not leak --------------------------------------------


def _open_fds() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


def _own_children() -> set[int]:
    watchdog = default_supervisor().watchdog_pid
    return {child.pid for child in psutil.Process().children(recursive=True)} - {watchdog}


async def test_200_sequential_runs_leave_no_process_and_no_fd() -> None:
    config = ProcessConfig(command="cat")
    await run_backend(config)  # the watchdog and the loop's pipes exist from here on
    fds = _open_fds()
    for index in range(200):
        outcome = await run_backend(config, f"run {index}")
        assert outcome.output == f"run {index}"
    assert _open_fds() == fds
    assert _own_children() == set()


async def test_50_concurrent_runs() -> None:
    config = ProcessConfig(command="cat")
    outputs: dict[int, str] = {}

    async def one(index: int) -> None:
        outputs[index] = (await run_backend(config, f"run {index}")).output

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            for index in range(50):
                tasks.start_soon(one, index)
    assert outputs == {index: f"run {index}" for index in range(50)}
    assert _own_children() == set()


def test_python_is_the_venv_python() -> None:
    assert sys.executable == PYTHON


def test_process_config_is_a_frozen_strict_backend_config() -> None:
    from pydantic import ValidationError

    from oma_bridge.backends import BackendConfig

    config = ProcessConfig(command="wc", args=["-w"])  # type: ignore[arg-type]
    assert isinstance(config, BackendConfig)
    assert (config.kind, text_only(config.kind), config.args) == ("process", True, ("-w",))
    assert (config.input, config.max_output_bytes, config.stderr_tail_bytes) == (
        "stdin",
        64 * 1024 * 1024,
        64 * 1024,
    )
    assert config.stop_grace_s == 5
    with pytest.raises(ValidationError):
        ProcessConfig(command="wc", shell=True)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        ProcessConfig(command="")
    with pytest.raises(ValidationError):
        config.command = "rm"  # type: ignore[misc]
