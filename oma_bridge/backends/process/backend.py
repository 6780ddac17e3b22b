"""``ProcessBackend``: one supervised command per run (docs/contract.md §11.1-5)."""

from __future__ import annotations

import codecs
import os

import anyio

from oma_bridge.backends import RUN_ID_LABEL, BackendKind, BackendOutcome, RunContext
from oma_bridge.backends.process.config import PROCESS_BACKENDS, ProcessConfig
from oma_bridge.errors import BackendError, RunTimeoutError
from oma_bridge.messages import LLMMessage, last_user_text
from oma_bridge.results import StreamEvent
from oma_bridge.supervision.exits import describe_exit
from oma_bridge.supervision.supervisor import SupervisedProcess, Supervisor, default_supervisor

__all__ = ["ProcessBackend", "build_prompt"]

#: Looked up once: a codec lookup per run costs more than the decoder itself.
_Utf8Decoder = codecs.getincrementaldecoder("utf-8")


def build_prompt(system_prompt: str | None, messages: list[LLMMessage]) -> str:
    """The prompt text: trimmed system prompt and last user text, blank-line joined.

    Empty parts are dropped (docs/contract.md §11.1-2).
    """
    parts = ((system_prompt or "").strip(), last_user_text(messages, "\n").strip())
    return "\n\n".join(part for part in parts if part)


class ProcessBackend:
    """Runs the configured command once per run; keeps no state between runs."""

    external = True
    kind: BackendKind = "process"

    def __init__(self, config: ProcessConfig, supervisor: Supervisor | None = None) -> None:
        self.config = config
        self._supervisor = supervisor
        # Resolved once, against the folder the backend was created in.
        self._cwd = os.path.abspath(config.cwd) if config.cwd else None  # noqa: PTH100
        self._sandbox = config.sandbox_policy(self._cwd)

    async def run(self, ctx: RunContext) -> BackendOutcome:
        label = ctx.agent_name or "process"
        prompt = build_prompt(ctx.system_prompt, ctx.messages)
        config = self.config
        if config.input != "none" and not prompt:
            raise BackendError(f'Process backend "{label}" received an empty prompt.')
        argv = [config.command, *config.args]
        if config.input == "argument":
            argv.append(prompt)
        if config.timeout_s is None:  # no timer: no cancel scope to enter and leave
            return await self._run(ctx, label, argv, prompt)
        with anyio.move_on_after(config.timeout_s):
            return await self._run(ctx, label, argv, prompt)
        raise RunTimeoutError.for_agent(label, round(config.timeout_s * 1000))

    async def aclose(self) -> None:
        """Nothing to release: each run ends its own process tree before it returns."""

    async def _run(
        self, ctx: RunContext, label: str, argv: list[str], prompt: str
    ) -> BackendOutcome:
        config = self.config
        cwd = self._cwd
        supervisor = self._supervisor or default_supervisor()
        try:
            process = await supervisor.spawn(
                argv,
                env=config.env,
                cwd=cwd,
                stdin=config.input == "stdin",
                stderr_tail_bytes=config.stderr_tail_bytes,
                labels={**config.labels, RUN_ID_LABEL: ctx.run_id},
                sandbox=self._sandbox,
            )
        except (OSError, ValueError) as error:  # ValueError: a NUL byte in argv or env
            reason = (error.strerror if isinstance(error, OSError) else None) or str(error)
            failed_cwd = cwd is not None and getattr(error, "filename", None) == cwd
            where = f' (cwd "{cwd}")' if failed_cwd else ""
            message = f'Process backend "{label}" could not start "{config.command}": {reason}'
            raise BackendError(message + where) from error
        try:
            output = await self._exchange(process, ctx, label, prompt)
            code = await process.wait()
            if code != 0:
                raise BackendError(_exit_message(label, code, process.stderr.text()))
        finally:
            with anyio.CancelScope(shield=True):
                await process.stop(config.stop_grace_s)
        messages: list[LLMMessage] = []
        if output:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": output}]})
        return BackendOutcome(output=output, messages=messages)

    async def _exchange(
        self, process: SupervisedProcess, ctx: RunContext, label: str, prompt: str
    ) -> str:
        """Deliver the prompt and stream stdout until its end; the whole of stdout."""
        cap = self.config.max_output_bytes
        decoder = _Utf8Decoder("replace")
        parts: list[str] = []
        received = 0
        if process.stdin is not None:
            process.stdin.write_and_close(prompt.encode())
        async for chunk in process.stdout:
            received += len(chunk)
            if received > cap:
                raise BackendError(
                    f'Process backend "{label}" exceeded max_output_bytes:'
                    f" more than {cap} bytes of stdout"
                )
            if text := decoder.decode(chunk):
                parts.append(text)
                await ctx.emit(StreamEvent("text", text))
        if text := decoder.decode(b"", final=True):
            parts.append(text)
            await ctx.emit(StreamEvent("text", text))
        await process.wait_closed()
        return "".join(parts)


def _exit_message(label: str, code: int, stderr: str) -> str:
    message = f'Process backend "{label}" {describe_exit(code)}'
    return f"{message}: {stderr}" if stderr else message


PROCESS_BACKENDS.fill(lambda config, agent_name: ProcessBackend(config))
