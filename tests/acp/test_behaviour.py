"""Permissions, fs, stop reasons, auth, update kinds and wire faults against real agents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from oma_bridge.backends import PermissionRequest
from oma_bridge.backends.acp import AcpBackend, AcpConfig
from oma_bridge.errors import AuthRequiredError, BackendError

from .helpers import Recorder, context, fault_config, run_text, scenario_config

pytestmark = pytest.mark.anyio


async def _one(config: AcpConfig, text: str, **kwargs: Any) -> Any:
    backend = AcpBackend(config, agent_name="coder")
    try:
        with anyio.fail_after(30):
            return await run_text(backend, text, **kwargs)
    finally:
        await backend.aclose()


# -- permissions ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("auto-approve", "permission:ao"), ("reject", "permission:ro"), ("client", "permission:ro")],
)
async def test_permission_policies_pick_least_privilege(
    tmp_path: Path, policy: str, expected: str
) -> None:
    outcome, rec = await _one(scenario_config(tmp_path, permission=policy), "tools")
    assert outcome.output == expected
    [call] = outcome.tool_calls
    assert (call.tool_name, call.input, call.output) == ("Edit file", {"path": "/x"}, "edited")
    kinds = [u["sessionUpdate"] for u in rec.of("update")]
    assert kinds == ["tool_call", "tool_call_update"]


async def test_client_permission_goes_to_the_handler(tmp_path: Path) -> None:
    seen: list[PermissionRequest] = []

    async def handler(request: PermissionRequest) -> str | None:
        seen.append(request)
        return "aa"

    outcome, _ = await _one(scenario_config(tmp_path), "tools", permission_handler=handler)
    assert outcome.output == "permission:aa"
    [request] = seen
    assert request.agent_name == "coder" and request.run_id == "r1"
    assert request.tool_call == {"toolCallId": "t1", "title": "Edit file", "kind": "edit"}
    assert [o.kind for o in request.options] == [
        "allow_always",
        "allow_once",
        "reject_once",
        "reject_always",
    ]


async def test_client_permission_cancelled_and_bogus_answers(tmp_path: Path) -> None:
    async def cancel(request: PermissionRequest) -> str | None:
        return None

    async def bogus(request: PermissionRequest) -> str | None:
        return "not-an-option"

    outcome, _ = await _one(scenario_config(tmp_path), "tools", permission_handler=cancel)
    assert outcome.output == "permission:cancelled"
    outcome, _ = await _one(scenario_config(tmp_path), "tools", permission_handler=bogus)
    assert outcome.output == "permission:ro"


# -- fs ------------------------------------------------------------------------------


async def test_fs_read_and_write_inside_cwd(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    config = scenario_config(tmp_path)
    outcome, _ = await _one(config, f"fs {tmp_path / 'notes.txt'}")
    assert outcome.output == "read:alpha\nbeta\n"
    outcome, _ = await _one(config, f"fswrite {tmp_path / 'new.txt'} hello")
    assert outcome.output == "written"
    assert (tmp_path / "new.txt").read_text() == "hello"


async def test_fs_outside_cwd_is_refused(tmp_path: Path) -> None:
    inside = tmp_path / "work"
    inside.mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    (inside / "link.txt").symlink_to(tmp_path / "secret.txt")
    config = scenario_config(inside)
    refused = "error:-32002:path is outside the agent's working directory"
    for path in (tmp_path / "secret.txt", inside / "link.txt", inside / ".." / "secret.txt"):
        outcome, _ = await _one(config, f"fs {path}")
        assert outcome.output.startswith(refused), outcome.output
    outcome, _ = await _one(config, f"fswrite {inside / '..' / 'evil.txt'} x")
    assert outcome.output.startswith(refused)
    assert not (tmp_path / "evil.txt").exists()


async def test_a_path_with_a_nul_byte_is_invalid_params(tmp_path: Path) -> None:
    # It once reached realpath, which raised: -32603 and a traceback in the log.
    config = scenario_config(tmp_path)
    path = f"{tmp_path}/a\0b.txt"
    for prompt in (f"fs {path}", f"fswrite {path} x"):
        outcome, _ = await _one(config, prompt)
        assert outcome.output.startswith("error:-32602:path must not contain a NUL byte"), (
            outcome.output
        )


async def test_client_served_fs_and_terminals_fall_back_to_the_host_in_library_use(
    tmp_path: Path,
) -> None:
    # No daemon, so no client to forward to: "client" is served as "cwd" / true.
    (tmp_path / "notes.txt").write_text("on disk")
    config = scenario_config(tmp_path, fs="client", terminal="client")
    outcome, _ = await _one(config, f"fs {tmp_path / 'notes.txt'}")
    assert outcome.output == "read:on disk"
    outcome, _ = await _one(config, f"fswrite {tmp_path / 'new.txt'} hello")
    assert (outcome.output, (tmp_path / "new.txt").read_text()) == ("written", "hello")
    outcome, _ = await _one(config, "terminalrun print('here')")
    assert outcome.output == "exit=0 signal=None output=here\n"


async def test_fs_none_is_method_not_found(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    outcome, _ = await _one(scenario_config(tmp_path, fs="none"), f"fs {tmp_path / 'a.txt'}")
    assert outcome.output.startswith("error:-32601")


# -- stop reasons and errors --------------------------------------------------------


async def test_refusal_with_and_without_output(tmp_path: Path) -> None:
    outcome, _ = await _one(scenario_config(tmp_path), "refuse not doing that")
    assert outcome.error is not None
    assert outcome.error.message == 'ACP agent "coder" refused the task: not doing that'
    assert outcome.output == "not doing that"
    outcome, _ = await _one(scenario_config(tmp_path), "refuse")
    assert outcome.error.message == 'ACP agent "coder" refused the task.'


async def test_max_tokens_is_budget_exceeded(tmp_path: Path) -> None:
    outcome, _ = await _one(scenario_config(tmp_path), "maxtokens")
    assert outcome.budget_exceeded and outcome.output == "partial"


async def test_prompt_error_answer_fails_the_run_but_keeps_the_agent(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    try:
        with pytest.raises(BackendError, match="answered session/prompt with error -32603"):
            await run_text(backend, "error")
        pid = backend.pid
        outcome, _ = await run_text(backend, "echo fine")
        assert outcome.output == "echo fine" and backend.pid == pid
    finally:
        await backend.aclose()


# -- authentication -----------------------------------------------------------------


async def test_auth_required_is_surfaced_clearly(tmp_path: Path) -> None:
    config = scenario_config(tmp_path, env={"ACP_TEST_AUTH": "required"})
    with pytest.raises(AuthRequiredError) as info:
        await _one(config, "echo hi")
    assert info.value.code == "AUTH_REQUIRED"
    assert info.value.message.startswith(
        'ACP agent "coder" requires authentication: Authentication required: set token='
    )
    assert "abc123secret" not in info.value.message


async def test_authenticate_with_the_profile_method(tmp_path: Path) -> None:
    config = scenario_config(tmp_path, env={"ACP_TEST_AUTH": "required"}, auth_method="key")
    outcome, _ = await _one(config, "echo hi")
    assert outcome.output == "echo hi"
    # A method the agent does not advertise is never called.
    config = scenario_config(tmp_path, env={"ACP_TEST_AUTH": "required"}, auth_method="other")
    with pytest.raises(AuthRequiredError):
        await _one(config, "echo hi")


async def test_failed_authenticate_and_auth_at_prompt(tmp_path: Path) -> None:
    config = scenario_config(tmp_path, env={"ACP_TEST_AUTH": "refuse"}, auth_method="key")
    with pytest.raises(AuthRequiredError, match="invalid API key") as info:
        await _one(config, "echo hi")
    assert "sk-secret123456" not in info.value.message
    with pytest.raises(
        AuthRequiredError, match=r'^ACP agent "coder" requires authentication: please'
    ):
        await _one(scenario_config(tmp_path), "auth")


# -- updates --------------------------------------------------------------------------


async def test_thoughts_and_plans_reach_the_stream(tmp_path: Path) -> None:
    outcome, rec = await _one(scenario_config(tmp_path), "thought")
    assert [e.type for e in rec.events] == ["reasoning", "plan", "text"]
    assert rec.of("reasoning") == ["thinking..."]
    [plan] = rec.of("plan")
    assert plan["entries"][0]["content"] == "step one" and "sessionUpdate" not in plan
    assert outcome.output == "answer"


async def test_unknown_update_kinds_are_kept_raw(tmp_path: Path) -> None:
    outcome, rec = await _one(fault_config(tmp_path, "acp_fault_agent.py", "unknown"), "go")
    kinds = [u["sessionUpdate"] for u in rec.of("update")]
    assert kinds == ["notice", "compaction_update", "_vendor.example/thing", "agent_message_chunk"]
    assert rec.of("update")[2]["payload"] == [1, 2, 3]
    assert outcome.output == "ok from unknown"


async def test_updates_before_the_session_new_answer(tmp_path: Path) -> None:
    config = scenario_config(tmp_path, env={"ACP_TEST_EARLY": "1"})
    outcome, rec = await _one(config, "echo hi")
    assert [e.type for e in rec.events] == ["available_commands_update", "text", "usage_update"]
    [commands] = rec.of("available_commands_update")
    assert commands["availableCommands"][0]["name"] == "web"
    assert outcome.output == "echo hi"


async def test_model_is_set_through_the_config_option(tmp_path: Path) -> None:
    config = scenario_config(tmp_path, env={"ACP_TEST_CONFIG": "1"}, model="large")
    outcome, _ = await _one(config, "whoami")
    assert outcome.output.endswith("model=model-choice=large")


# -- wire faults ------------------------------------------------------------------------


async def test_two_mib_message(tmp_path: Path) -> None:
    outcome, _ = await _one(scenario_config(tmp_path), "big")
    assert outcome.output == "x" * (2 * 1024 * 1024)


async def test_one_mib_stderr_burst_does_not_deadlock(tmp_path: Path) -> None:
    outcome, _ = await _one(scenario_config(tmp_path), "stderr")
    assert outcome.output == "survived"


async def test_non_json_lines_and_crlf_are_skipped(tmp_path: Path) -> None:
    outcome, _ = await _one(fault_config(tmp_path, "acp_fault_agent.py", "noise"), "go")
    assert outcome.output == "ok from noise"


async def test_a_flood_of_non_json_lines_is_fatal(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="non-JSON lines in a row"):
        await _one(fault_config(tmp_path, "acp_fault_agent.py", "flood"), "go")


async def test_a_line_over_the_ceiling_fails_cleanly(tmp_path: Path) -> None:
    config = fault_config(tmp_path, "acp_fault_agent.py", "longline", max_line_bytes=65536)
    with pytest.raises(BackendError, match="longer than 65536 bytes"):
        await _one(config, "go")


# -- more protocol corners ---------------------------------------------------------------


async def test_late_updates_of_a_finished_turn_are_dropped(tmp_path: Path) -> None:
    backend = AcpBackend(fault_config(tmp_path, "acp_fault_agent.py", "late"), agent_name="f")
    try:
        first, _ = await run_text(backend, "go")
        assert first.output == "turn 1"
        await anyio.sleep(0.3)  # the late chunk is now waiting in the pipe
        second, rec = await run_text(backend, "go")
        assert second.output == "turn 2"
        assert "LATE" not in str(rec.events)
    finally:
        await backend.aclose()


async def test_agent_withdraws_a_permission_request(tmp_path: Path) -> None:
    async def never(request: Any) -> str | None:
        await anyio.sleep_forever()
        return None

    config = fault_config(tmp_path, "acp_fault_agent.py", "withdraw")
    outcome, _ = await _one(config, "go", permission_handler=never)
    assert outcome.output == "withdrawn:900:-32800"


async def test_legacy_set_model_without_config_options(tmp_path: Path) -> None:
    config = fault_config(tmp_path, "acp_fault_agent.py", "legacymodel", model="m-2")
    outcome, _ = await _one(config, "go")
    assert outcome.output == "model=m-2"


async def test_cancel_during_start_up_ends_the_agent_and_next_run_starts_afresh(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "slow"
    marker.touch()
    config = fault_config(
        tmp_path, "acp_fault_agent.py", "slowinit", env={"ACP_SLOW_INIT": str(marker)}
    )
    backend = AcpBackend(config, agent_name="f")
    try:
        with anyio.move_on_after(1.0) as scope:
            await run_text(backend, "go")
        assert scope.cancelled_caught
        assert backend.pid is None
        with anyio.fail_after(15):
            outcome, _ = await run_text(backend, "go")
        assert outcome.output == "ok from slowinit"
    finally:
        await backend.aclose()


async def test_requests_left_held_by_a_finished_turn_are_answered(tmp_path: Path) -> None:
    async def never(request: Any) -> str | None:
        await anyio.sleep_forever()
        return None

    backend = AcpBackend(fault_config(tmp_path, "acp_fault_agent.py", "orphan"), agent_name="f")
    try:
        with anyio.fail_after(10):
            first, _ = await run_text(backend, "go", permission_handler=never)
            assert first.output == "asked"
            second, _ = await run_text(backend, "go")
        assert second.output == 'orphan answer: {"outcome": {"outcome": "cancelled"}}'
    finally:
        await backend.aclose()


async def test_unanswered_permission_times_out_to_least_privilege_reject(tmp_path: Path) -> None:
    async def slow(request: PermissionRequest) -> str | None:
        await anyio.sleep_forever()
        return "ao"

    config = scenario_config(tmp_path, permission_timeout_s=0.3)
    outcome, _ = await _one(config, "tools", permission_handler=slow)
    assert outcome.output == "permission:ro"


async def test_a_failing_stream_consumer_fails_the_run_not_the_agent(tmp_path: Path) -> None:
    backend = AcpBackend(scenario_config(tmp_path), agent_name="coder")
    try:
        ctx = context("chunks 5", Recorder())

        async def broken(event: Any) -> None:
            raise RuntimeError("consumer broke")

        ctx.emit = broken
        with pytest.raises(RuntimeError, match="consumer broke"):
            await backend.run(ctx)
        pid = backend.pid
        outcome, _ = await run_text(backend, "echo fine")
        assert outcome.output == "echo fine" and backend.pid == pid
    finally:
        await backend.aclose()


async def test_one_text_event_per_chunk_by_default(tmp_path: Path) -> None:
    outcome, rec = await _one(fault_config(tmp_path, "acp_fault_agent.py", "drip"), "go")
    assert rec.of("text") == ["a", "b", "c", "x", "y", "z"]
    assert outcome.output == "abcxyz"


async def test_coalesced_text_is_joined_per_read_but_never_held_back(tmp_path: Path) -> None:
    config = fault_config(tmp_path, "acp_fault_agent.py", "drip", coalesce_text=True)
    outcome, rec = await _one(config, "go")
    # Chunks 100 ms apart are one event each; the burst arrives in one read.
    assert rec.of("text") == ["a", "b", "c", "xyz"]
    assert outcome.output == "abcxyz"


async def test_a_missing_command_fails_the_run_clearly(tmp_path: Path) -> None:
    config = AcpConfig(command=str(tmp_path / "no-such-agent"), cwd=tmp_path)
    with pytest.raises(BackendError, match=r'^ACP agent "coder" could not be started: '):
        await _one(config, "go")
