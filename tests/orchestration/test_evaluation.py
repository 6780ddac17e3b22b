"""Online evaluation: sampling, bounds, payload privacy, stores, flush and shutdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import orjson
import pytest
from agent.fakes import Journal, ScriptedConfig

from oma_bridge.orchestration.evaluation import (
    PAYLOAD_CAP,
    EvaluationConfig,
    EvaluationInput,
    JsonlFileStore,
    OnlineEvaluator,
    Score,
    cap_text,
    describe_input,
)
from oma_bridge.orchestration.orchestrator import OpenMultiAgent

from .test_orchestrator import llm_config

pytestmark = pytest.mark.anyio

MARKER = "\n[truncated at 8192 characters]"


class MemoryStore:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    async def write(self, record: dict[str, Any]) -> None:
        self.records.append(record)


def result(run_id: str = "r", output: str = "out") -> dict[str, Any]:
    return {"runId": run_id, "success": True, "output": output, "status": {"code": "ok"}}


def test_cap_includes_the_marker() -> None:
    assert cap_text("x" * PAYLOAD_CAP) == "x" * PAYLOAD_CAP
    capped = cap_text("x" * (PAYLOAD_CAP + 1))
    assert len(capped) == PAYLOAD_CAP
    assert capped == "x" * (PAYLOAD_CAP - len(MARKER)) + MARKER


def test_none_mode_describes_without_content() -> None:
    assert describe_input("secret words", "none") == "[string input omitted; 12 characters]"
    assert describe_input([{}, {}, {}], "none") == "[array input omitted; 3 items]"


def test_redacted_mode_truncates_redacts_truncates() -> None:
    text = "api_key=" + "s" * 9000
    redacted = describe_input(text, "redacted")
    assert redacted == "api_key=[redacted]" + MARKER
    assert describe_input("password=hunter2", "full") == "password=hunter2"
    assert describe_input("password=hunter2", "redacted") == "password=[redacted]"


async def test_full_payload_equals_original_messages_despite_later_mutation() -> None:
    store = MemoryStore()
    seen: list[EvaluationInput] = []
    oma = OpenMultiAgent(
        evaluation=EvaluationConfig(
            scorers=[lambda e: seen.append(e) or Score(1, True)], store=store, store_payloads="full"
        )
    )
    original = [{"role": "user", "content": [{"type": "text", "text": "the real question"}]}]
    expected = orjson.loads(orjson.dumps(original))
    await oma.run_agent(llm_config(), original)
    original[0]["content"][0]["text"] = "MUTATED AFTER THE CALL"
    await oma.shutdown(5)
    assert orjson.loads(store.records[0]["payload"]["input"]) == expected
    assert orjson.loads(seen[0].input) == expected
    assert seen[0].output == "the real question "
    assert store.records[0]["scores"] == [
        {"scorer": "<lambda>", "score": 1.0, "pass": True, "reason": ""}
    ]


async def test_none_mode_scorer_sees_description_and_real_output() -> None:
    store = MemoryStore()
    seen: list[EvaluationInput] = []
    oma = OpenMultiAgent(
        evaluation=EvaluationConfig(
            scorers=[lambda e: seen.append(e) or {"score": 0.5, "pass": False, "reason": "meh"}],
            store=store,
        )
    )
    await oma.run_agent(llm_config(), "twelve chars")
    await oma.shutdown(5)
    assert seen[0].input == "[string input omitted; 12 characters]"
    assert seen[0].output == "twelve chars "
    assert "payload" not in store.records[0]
    assert oma.evaluator is not None
    assert oma.evaluator.stats.to_wire() == {
        "sampled": 1,
        "enqueued": 1,
        "completed": 1,
        "dropped": 0,
        "failed": 0,
        "storeFailed": 0,
    }


async def test_scorer_that_raises_counts_failed_and_changes_nothing() -> None:
    def broken(e: EvaluationInput) -> Score:
        raise RuntimeError("scorer bug token=abc")

    diagnostics: list[str] = []
    store = MemoryStore()
    oma = OpenMultiAgent(
        evaluation=EvaluationConfig(scorers=[broken], store=store, on_diagnostic=diagnostics.append)
    )
    run = await oma.run_agent(llm_config(), "x")
    await oma.shutdown(5)
    assert run.success is True
    assert oma.evaluator is not None and oma.evaluator.stats.failed == 1
    assert store.records[0]["scores"][0]["error"] == "RuntimeError: scorer bug token=[redacted]"
    assert any("broken" in d for d in diagnostics)


async def test_full_queue_drops_and_counts() -> None:
    release = anyio.Event()

    async def slow(e: EvaluationInput) -> Score:
        await release.wait()
        return Score(1, True)

    evaluator = OnlineEvaluator(
        EvaluationConfig(scorers=[slow], max_concurrent=1, max_queue_length=2)
    )
    for index in range(6):
        evaluator.submit("in", result(f"r{index}"), agent="a")
        await anyio.lowlevel.checkpoint()  # let the worker pick up the first job
    assert (evaluator.stats.sampled, evaluator.stats.enqueued, evaluator.stats.dropped) == (6, 3, 3)
    assert await evaluator.force_flush(0.05) is False
    release.set()
    assert await evaluator.force_flush(5) is True
    assert evaluator.stats.completed == 3


async def test_sampling_rate_and_predicate() -> None:
    never = OnlineEvaluator(EvaluationConfig(scorers=[lambda e: Score(1, True)], sample=0.0))
    never.submit("x", result(), agent="a")
    assert never.stats.sampled == 0
    picky = OnlineEvaluator(
        EvaluationConfig(scorers=[lambda e: Score(1, True)], sample=lambda e: e.run_id == "keep")
    )
    picky.submit("x", result("drop"), agent="a")
    picky.submit("x", result("keep"), agent="a")
    await picky.force_flush(5)
    assert (picky.stats.sampled, picky.stats.completed) == (1, 1)
    with pytest.raises(ValueError, match="sample rate"):
        EvaluationConfig(scorers=[], sample=1.5)


async def test_shutdown_drains_then_refuses() -> None:
    evaluator = OnlineEvaluator(EvaluationConfig(scorers=[lambda e: Score(1, True)]))
    evaluator.submit("x", result("a"), agent="a")
    assert await evaluator.shutdown(5) is True
    evaluator.submit("x", result("b"), agent="a")
    assert (evaluator.stats.completed, evaluator.stats.dropped) == (1, 1)


async def test_jsonl_store_and_store_failure(tmp_path: Path) -> None:
    path = tmp_path / "eval" / "records.jsonl"
    evaluator = OnlineEvaluator(
        EvaluationConfig(
            scorers=[lambda e: Score(0.9, True, "good")],
            store=JsonlFileStore(path),
            store_payloads="redacted",
        )
    )
    evaluator.submit("token=supersecret please", result("r1", "done"), agent="a", metadata={"k": 1})
    await evaluator.force_flush(5)
    [line] = path.read_bytes().splitlines()
    record = orjson.loads(line)
    assert record["runId"] == "r1" and record["metadata"] == {"k": 1}
    assert record["payload"] == {"input": "token=[redacted] please", "output": "done"}

    class Broken:
        async def write(self, record: dict[str, Any]) -> None:
            raise OSError("disk full")

    failing = OnlineEvaluator(EvaluationConfig(scorers=[lambda e: Score(1, True)], store=Broken()))
    failing.submit("x", result(), agent="a")
    await failing.force_flush(5)
    assert (failing.stats.completed, failing.stats.store_failed) == (1, 1)


async def test_evaluation_never_changes_the_result() -> None:
    def vandal(e: EvaluationInput) -> Score:
        e.result["output"] = "changed"
        return Score(0, False)

    journal = Journal()
    oma = OpenMultiAgent(evaluation=EvaluationConfig(scorers=[vandal]))
    from oma_bridge.agent import AgentConfig

    run = await oma.run_agent(AgentConfig(backend=ScriptedConfig(journal=journal)), "keep")
    await oma.shutdown(5)
    assert run.output == "keep "


async def test_an_entered_evaluator_scores_in_its_owners_task_group() -> None:
    release = anyio.Event()
    owner = anyio.get_current_task().id

    async def slow(e: EvaluationInput) -> Score:
        await release.wait()
        return Score(1, True)

    evaluator = OnlineEvaluator(EvaluationConfig(scorers=[slow], max_concurrent=2))
    async with evaluator:
        for index in range(3):
            evaluator.submit("in", result(f"r{index}"), agent="a")
        await anyio.lowlevel.checkpoint()
        workers = [t for t in anyio.get_running_tasks() if t.parent_id == owner]
        assert len(workers) == 2  # max_concurrent, both children of this block's group
        release.set()
        assert await evaluator.force_flush(5) is True
        assert evaluator.stats.completed == 3
        release = anyio.Event()  # the next jobs wait for good: the block's end stops them
        for index in range(3, 6):
            evaluator.submit("in", result(f"r{index}"), agent="a")
        await anyio.lowlevel.checkpoint()
    assert [t for t in anyio.get_running_tasks() if t.parent_id == owner] == []
    # Two were being scored when the block ended, one still queued: dropped.
    assert (evaluator.stats.completed, evaluator.stats.dropped) == (3, 1)
    evaluator.submit("in", result("late"), agent="a")
    assert evaluator.stats.dropped == 2
    assert await evaluator.force_flush(1) is True
