"""Small helpers shared by the LLM tests."""

from __future__ import annotations

from typing import Any

from oma_bridge.agent import AgentConfig
from oma_bridge.backends import BackendOutcome, RunContext
from oma_bridge.backends.llm import LLMBackend, RetryPolicy, create_llm_backend
from oma_bridge.messages import LLMMessage
from oma_bridge.results import StreamEvent

#: Short delays so that retry tests stay fast; the count is the default's.
FAST_RETRY = RetryPolicy(attempts=4, base_delay_s=0.01, max_delay_s=0.05)

PNG_B64 = "iVBORw0KGgo="


def user(*blocks: Any) -> LLMMessage:
    content = [{"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]
    return {"role": "user", "content": content}  # type: ignore[typeddict-item]


def image(media_type: str = "image/png", data: str = PNG_B64) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def backend_for(provider: str, base_url: str | None, **config: Any) -> LLMBackend:
    config.setdefault("api_key_env", "OMA_TEST_KEY")
    cfg = AgentConfig(name="tester", provider=provider, model="m", base_url=base_url, **config)
    return llm_backend_of(cfg, retry=FAST_RETRY)


def llm_backend_of(config: AgentConfig, **options: Any) -> LLMBackend:
    """The LLM backend an agent of ``config`` runs on."""
    return create_llm_backend(config.backend, agent_name=config.name, **options)  # type: ignore[arg-type]


async def run_backend(
    backend: LLMBackend,
    messages: list[LLMMessage],
    *,
    system_prompt: str | None = None,
    max_turns: int = 10,
    max_token_budget: int | None = None,
) -> tuple[BackendOutcome, list[StreamEvent]]:
    """Run once through ``LLMBackend.run`` and return the outcome and the events emitted."""
    events: list[StreamEvent] = []

    async def emit(event: StreamEvent) -> None:
        events.append(event)

    ctx = RunContext(
        run_id="run-1",
        agent_name="tester",
        messages=messages,
        system_prompt=system_prompt,
        emit=emit,
        max_token_budget=max_token_budget,
        max_turns=max_turns,
    )
    try:
        return await backend.run(ctx), events
    finally:
        await backend.aclose()


def texts(events: list[StreamEvent]) -> list[str]:
    return [e.data for e in events if e.type == "text"]
