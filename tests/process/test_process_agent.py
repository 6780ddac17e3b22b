"""The process backend end to end, through ``Agent.run`` / ``Agent.stream``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from oma_bridge import Agent, AgentConfig, RunStream
from oma_bridge.backends.process import ProcessConfig
from oma_bridge.errors import InvalidMessageError

from .conftest import PYTHON, gone, kill_all, script, tree_pids, wait_gone

pytestmark = pytest.mark.anyio


def agent(backend: ProcessConfig, **config: Any) -> Agent:
    return Agent(AgentConfig(name="worker", backend=backend, **config))


async def test_run_returns_stdout_as_one_assistant_message() -> None:
    worker = agent(ProcessConfig(command="cat"), system_prompt="You are a local process worker.")
    result = await worker.run("summarize checkout")
    assert result.success
    assert result.status.code == "ok"
    assert result.output == "You are a local process worker.\n\nsummarize checkout"
    assert result.messages == [
        {"role": "assistant", "content": [{"type": "text", "text": result.output}]}
    ]
    assert result.token_usage.total == 0


async def test_structured_input_never_spawns(tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    worker = agent(ProcessConfig(command="touch", args=(str(marker),)))
    structured = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    message = (
        "The process external backend accepts string prompts only; structured messages"
        " or content blocks cannot be forwarded without loss."
    )
    with pytest.raises(InvalidMessageError) as caught:
        await worker.run(structured)  # type: ignore[arg-type]
    assert caught.value.message == message
    with pytest.raises(InvalidMessageError):
        worker.stream([])
    with pytest.raises(InvalidMessageError):
        await worker.prompt([{"type": "text", "text": "hi"}])  # type: ignore[arg-type]
    await anyio.sleep(0.1)
    assert not marker.exists()


async def test_a_before_run_prompt_rewrite_reaches_the_process() -> None:
    def rewrite(context: dict[str, Any]) -> dict[str, Any]:
        return {**context, "prompt": "rewritten"}

    result = await agent(ProcessConfig(command="cat"), before_run=rewrite).run("original")
    assert result.output == "rewritten"


async def test_stream_yields_stdout_chunks_then_done() -> None:
    worker = agent(ProcessConfig(**script("proc_emit.py", "split-utf8")))
    events = [event async for event in worker.stream("go")]
    assert [event.type for event in events][-1] == "done"
    text = "".join(event.data for event in events if event.type == "text")
    assert text == "café!" == events[-1].data.output


async def _stream_until_the_tree_runs(worker: Agent) -> tuple[RunStream, dict[str, int]]:
    stream = worker.stream("go")
    seen = ""
    async for event in stream:
        seen += event.data if event.type == "text" else ""
        if len(pids := tree_pids(seen)) == 2:
            return stream, pids
    raise AssertionError(f"the tree never ran: {seen!r}")


async def test_leaving_stream_early_kills_the_tree() -> None:
    worker = agent(ProcessConfig(**script("proc_tree.py", "--ignore-term"), stop_grace_s=0.3))
    stream, pids = await _stream_until_the_tree_runs(worker)
    try:
        await stream.aclose()
        assert wait_gone(list(pids.values()), within=3.0)
    finally:
        kill_all(list(pids.values()))
        await worker.close()


async def test_leaving_stream_early_kills_an_escapee_after_the_child_exited() -> None:
    worker = agent(ProcessConfig(**script("proc_tree.py", "--exit", "--escape")))
    stream, pids = await _stream_until_the_tree_runs(worker)
    while not gone(pids["child"]):  # noqa: ASYNC110 (a poll): leave once the child is gone
        await anyio.sleep(0.005)
    await anyio.sleep(0.1)  # and the loop has heard of its exit
    try:
        await stream.aclose()
        # Sooner than the one-second grace an escapee holding our pipes gets
        # after a normal exit: leaving the stream ends it at once.
        assert wait_gone(list(pids.values()), within=0.8)
    finally:
        kill_all(list(pids.values()))
        await worker.close()


async def test_breaking_out_of_an_entered_stream_ends_the_tree_within_the_block() -> None:
    worker = agent(ProcessConfig(**script("proc_tree.py", "--ignore-term"), stop_grace_s=0.3))
    seen = ""
    pids: dict[str, int] = {}
    try:
        with anyio.fail_after(10):
            async with worker.stream("go") as stream:
                async for event in stream:
                    seen += event.data if event.type == "text" else ""
                    if len(pids := tree_pids(seen)) == 2:
                        break
        # The block waited for the run's clean-up: SIGTERM, the grace, SIGKILL.
        assert len(pids) == 2 and wait_gone(list(pids.values()), within=0.5)
    finally:
        kill_all(list(pids.values()))
        await worker.close()


async def test_an_entered_stream_cancelled_from_outside_keeps_the_sigterm_grace(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "graceful"
    code = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        "    time.sleep(0.3)\n"
        f"    open({str(marker)!r}, 'w').close()\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    worker = agent(ProcessConfig(command=PYTHON, args=("-c", code), input="none", stop_grace_s=5))
    try:
        with anyio.move_on_after(10) as timer:
            async with worker.stream("go") as stream:
                async for event in stream:
                    if event.type == "text" and "ready" in event.data:
                        timer.deadline = anyio.current_time()  # cancelled from outside
        assert timer.cancelled_caught
        # The process had its grace: its SIGTERM handler finished before the block ended.
        assert marker.exists()
    finally:
        await worker.close()


async def test_cancel_mid_run_kills_the_child_and_reports_cancelled() -> None:
    worker = agent(ProcessConfig(**script("proc_tree.py"), stop_grace_s=0.3))
    events: list[str] = []
    results: list[Any] = []

    async def watch() -> None:
        async for event in worker.stream("go"):
            if event.type == "text":
                events.append(event.data)
            if event.type == "done":
                results.append(event.data)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch)
        with anyio.fail_after(10):
            while len(tree_pids("".join(events))) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert worker.cancel()
    pids = list(tree_pids("".join(events)).values())
    try:
        assert all(gone(pid) for pid in pids)
        assert results[0].status.code == "cancelled"
    finally:
        kill_all(pids)


@pytest.mark.parametrize("where", ["agent", "profile"])
async def test_whole_run_timeout(where: str) -> None:
    if where == "agent":
        worker = agent(ProcessConfig(command="sleep", args=("30",), input="none"), timeout_ms=200)
    else:
        worker = agent(ProcessConfig(command="sleep", args=("30",), input="none", timeout_s=0.2))
    with anyio.fail_after(10):
        result = await worker.run("go")
    assert result.status.code == "timeout"
    assert result.error_info is not None and result.error_info.kind == "timeout"
    assert "exceeded whole-run timeout of 200ms" in (result.status.message or "")


async def test_non_zero_exit_is_a_failed_result_with_redacted_stderr() -> None:
    code = "import sys; sys.stderr.write('api_key=super-secret'); sys.exit(7)"
    result = await agent(ProcessConfig(command=PYTHON, args=("-c", code))).run("go")
    assert not result.success
    assert result.status.code == "error"
    assert "exited with code 7" in result.output
    assert "api_key=[redacted]" in result.output
    assert "super-secret" not in result.output
