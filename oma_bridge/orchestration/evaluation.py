"""Online evaluation of finished runs, with its payload privacy policy.

Observe-only and best effort: a scorer that raises, a store that fails, a
full queue or a slow scorer never changes a run's result or its timing; they
show only in :attr:`OnlineEvaluator.stats` and in diagnostics.

What scorers and the store see of a run's *input* is set by
``store_payloads``:

``none`` (default)
    a description only: ``[string input omitted; N characters]`` or
    ``[array input omitted; N items]``; nothing is stored.
``redacted``
    the input as JSON text (a string stays as is), capped at 8,192
    characters, redacted, capped again; output likewise.
``full``
    the same without redaction.

Scorers always receive the real output in memory.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeAlias

import anyio
import anyio.abc
import anyio.to_thread
import orjson

from oma_bridge.callbacks import invoke
from oma_bridge.private_files import make_private_folder, open_private
from oma_bridge.redaction import redact

__all__ = [
    "BUILTIN_SCORERS",
    "PAYLOAD_CAP",
    "EvaluationConfig",
    "EvaluationInput",
    "EvaluationStats",
    "EvaluationStore",
    "JsonlFileStore",
    "OnlineEvaluator",
    "Score",
    "Scorer",
    "cap_text",
    "resolve_scorer",
]

logger = logging.getLogger(__name__)

PayloadMode: TypeAlias = Literal["none", "redacted", "full"]

#: Characters kept of a payload, the truncation marker included.
PAYLOAD_CAP = 8192
_MARKER = f"\n[truncated at {PAYLOAD_CAP} characters]"


def cap_text(text: str) -> str:
    """Cap ``text`` at 8,192 characters including the truncation marker."""
    if len(text) <= PAYLOAD_CAP:
        return text
    return text[: PAYLOAD_CAP - len(_MARKER)] + _MARKER


@dataclass(frozen=True)
class Score:
    score: float
    passed: bool
    reason: str = ""


@dataclass(frozen=True)
class EvaluationInput:
    """What a scorer sees of one run."""

    run_id: str
    agent: str
    #: The input as the payload policy allows (a description, or JSON text).
    input: str
    #: The run's real output, always.
    output: str
    #: The run's result in its wire shape, an independent copy.
    result: dict[str, Any]
    metadata: Mapping[str, Any] | None = None


#: A scorer returns a :class:`Score`, or a mapping with ``score``, ``pass``
#: and ``reason``; sync or async.
Scorer: TypeAlias = Callable[[EvaluationInput], Any]


class EvaluationStore(Protocol):
    async def write(self, record: dict[str, Any]) -> None: ...


class JsonlFileStore:
    """Appends one JSON object per line to a file (the default store)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    async def write(self, record: dict[str, Any]) -> None:
        line = orjson.dumps(record) + b"\n"
        await anyio.to_thread.run_sync(self._append, line)

    def _append(self, line: bytes) -> None:
        # Records may hold prompts and outputs (``store_payloads``): the file
        # is created 0600, and the folders it needs 0700.
        make_private_folder(self.path.parent, forbidden=None)
        with os.fdopen(open_private(self.path), "ab") as handle:
            handle.write(line)


@dataclass
class EvaluationConfig:
    scorers: Sequence[Scorer]
    #: A rate in [0, 1], or a predicate on the :class:`EvaluationInput`.
    sample: float | Callable[[EvaluationInput], bool] = 1.0
    max_concurrent: int = 1
    max_queue_length: int = 100
    store: EvaluationStore | None = None
    store_payloads: PayloadMode = "none"
    on_result: Callable[[dict[str, Any]], Any] | None = None
    on_diagnostic: Callable[[str], Any] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.sample, int | float) and not 0 <= self.sample <= 1:
            raise ValueError(f"evaluation sample rate must be within [0, 1], got {self.sample}")
        if self.max_concurrent < 1:
            raise ValueError("evaluation max_concurrent must be at least 1")
        if self.max_queue_length < 0:
            raise ValueError("evaluation max_queue_length must not be negative")
        if self.store_payloads not in ("none", "redacted", "full"):
            raise ValueError(
                f'store_payloads must be "none", "redacted" or "full", got {self.store_payloads!r}'
            )


@dataclass
class EvaluationStats:
    sampled: int = 0
    enqueued: int = 0
    completed: int = 0
    dropped: int = 0
    failed: int = 0
    store_failed: int = 0

    def to_wire(self) -> dict[str, int]:
        return {
            "sampled": self.sampled,
            "enqueued": self.enqueued,
            "completed": self.completed,
            "dropped": self.dropped,
            "failed": self.failed,
            "storeFailed": self.store_failed,
        }


@dataclass
class _Job:
    evaluation: EvaluationInput
    payload: dict[str, str] | None
    enqueued_at: float = field(default_factory=time.time)


def describe_input(run_input: str | Sequence[Any], mode: PayloadMode) -> str:
    """The input as the payload policy lets scorers and the store see it."""
    if mode == "none":
        if isinstance(run_input, str):
            return f"[string input omitted; {len(run_input)} characters]"
        return f"[array input omitted; {len(run_input)} items]"
    text = run_input if isinstance(run_input, str) else orjson.dumps(run_input).decode()
    return _apply_policy(text, mode)


def _apply_policy(text: str, mode: PayloadMode) -> str:
    text = cap_text(text)
    if mode == "redacted":
        text = cap_text(redact(text))
    return text


class OnlineEvaluator:
    """Samples finished runs and scores them in the background.

    Its workers (at most ``max_concurrent``) start when work arrives and end
    when the queue is empty.  An owner with a task of its own hosts them:
    inside ``async with evaluator:`` they run in a task group of that block
    (the daemon enters its evaluator for as long as it serves), and leaving
    the block stops them and drops what is still queued.  Without an owner,
    as open-multi-agent's API is used, the event loop holds them
    (docs/decisions.md, D14).  Call :meth:`shutdown` (or :meth:`force_flush`)
    first to let queued work finish.
    """

    def __init__(self, config: EvaluationConfig) -> None:
        self.config = config
        self.stats = EvaluationStats()
        self._queue: deque[_Job] = deque()
        #: Live workers, hosted or not.
        self._workers = 0
        #: The owner's task group, while an owner has the evaluator entered.
        self._task_group: anyio.abc.TaskGroup | None = None
        #: The workers the loop holds when nobody owns the evaluator (kept
        #: referenced: the loop keeps only weak references to its tasks).
        self._unowned: set[asyncio.Task[None]] = set()
        # asyncio's Event binds no loop when made, so an evaluator can be built
        # before the loop runs.
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False

    def submit(
        self,
        run_input: str | Sequence[Any],
        result: dict[str, Any],
        *,
        agent: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Offer one finished run; never raises, never waits.

        ``run_input`` must already be the caller's own copy (``run_agent``
        hands over a copy taken at call time).
        """
        try:
            self._submit(run_input, result, agent=agent, metadata=metadata)
        except Exception as error:  # observe-only: nothing reaches the run
            self._diagnose(f"evaluation submit failed: {error!r}")

    def _submit(
        self,
        run_input: str | Sequence[Any],
        result: dict[str, Any],
        *,
        agent: str,
        metadata: Mapping[str, Any] | None,
    ) -> None:
        mode = self.config.store_payloads
        evaluation = EvaluationInput(
            run_id=str(result.get("runId", "")),
            agent=agent,
            input=describe_input(run_input, mode),
            output=str(result.get("output", "")),
            result=orjson.loads(orjson.dumps(result)),
            metadata=metadata,
        )
        if not self._sampled(evaluation):
            return
        self.stats.sampled += 1
        if self._closed or len(self._queue) >= self.config.max_queue_length:
            self.stats.dropped += 1
            self._diagnose(f"evaluation queue full or closed; run {evaluation.run_id} dropped")
            return
        payload = None
        if mode != "none":
            payload = {"input": evaluation.input, "output": _apply_policy(evaluation.output, mode)}
        self._queue.append(_Job(evaluation, payload))
        self.stats.enqueued += 1
        self._idle.clear()
        if self._workers < self.config.max_concurrent:
            self._start_worker()

    def _sampled(self, evaluation: EvaluationInput) -> bool:
        sample = self.config.sample
        if callable(sample):
            try:
                return bool(sample(evaluation))
            except Exception as error:
                self._diagnose(f"evaluation sample predicate raised: {error!r}")
                return False
        return sample >= 1 or random.random() < sample

    def _start_worker(self) -> None:
        self._workers += 1
        if self._task_group is not None:
            self._task_group.start_soon(self._work)
            return
        task = asyncio.get_running_loop().create_task(self._work())
        self._unowned.add(task)
        task.add_done_callback(self._unowned.discard)

    async def _work(self) -> None:
        hosted = self._task_group is not None
        cancelled = False
        try:
            while self._queue:
                job = self._queue.popleft()
                try:
                    await self._score(job)
                except Exception as error:  # observe-only: never into the owner's group
                    self.stats.failed += 1
                    self._diagnose(f"evaluation of run {job.evaluation.run_id} failed: {error!r}")
        except anyio.get_cancelled_exc_class():
            cancelled = True
            raise
        finally:
            self._workers -= 1
            if not self._workers and not self._queue:
                self._idle.set()
            elif (
                cancelled
                and not hosted
                and self._queue
                and self._workers < self.config.max_concurrent
            ):
                # An unowned worker died (the loop cancelled it) with work left:
                # keep the queue moving.  A hosted one is cancelled only by its
                # owner leaving.
                self._start_worker()

    async def __aenter__(self) -> OnlineEvaluator:
        """Host the workers in a task group of the calling task until the block ends."""
        if self._task_group is not None:
            raise RuntimeError("an evaluator is entered by one owner at a time")
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Stop the workers and drop what is queued (:meth:`shutdown` first drains it)."""
        task_group, self._task_group = self._task_group, None
        if task_group is None:
            return
        self._closed = True
        task_group.cancel_scope.cancel()
        await task_group.__aexit__(None, None, None)
        if self._queue:
            self.stats.dropped += len(self._queue)
            self._diagnose(f"evaluator closed; {len(self._queue)} queued run(s) dropped")
            self._queue.clear()
        if not self._workers:
            self._idle.set()

    async def _score(self, job: _Job) -> None:
        scores: list[dict[str, Any]] = []
        failed = False
        for scorer in self.config.scorers:
            name = getattr(scorer, "__name__", type(scorer).__name__)
            try:
                answer = await invoke(scorer, job.evaluation)
                scores.append({"scorer": name, **_score_of(answer)})
            except Exception as error:
                failed = True
                scores.append({"scorer": name, "error": redact(f"{type(error).__name__}: {error}")})
                self._diagnose(f"scorer {name} failed on run {job.evaluation.run_id}: {error!r}")
        record: dict[str, Any] = {
            "runId": job.evaluation.run_id,
            "agent": job.evaluation.agent,
            "timestamp": job.enqueued_at,
            "scores": scores,
            "metadata": dict(job.evaluation.metadata or {}),
        }
        if job.payload is not None:
            record["payload"] = job.payload
        await self._store(record)
        # Counted once stored: a caller that sees the count read the store can find the record.
        if failed:
            self.stats.failed += 1
        else:
            self.stats.completed += 1
        if self.config.on_result is not None:
            await self._notify(self.config.on_result, record)

    async def _store(self, record: dict[str, Any]) -> None:
        if self.config.store is None:
            return
        try:
            await self.config.store.write(record)
        except Exception as error:
            self.stats.store_failed += 1
            self._diagnose(f"evaluation store failed: {error!r}")

    async def _notify(self, callback: Callable[[Any], Any], value: Any) -> None:
        try:
            await invoke(callback, value)
        except Exception as error:
            self._diagnose(f"evaluation callback failed: {error!r}")

    def _diagnose(self, message: str) -> None:
        logger.warning(message)
        if self.config.on_diagnostic is not None:
            try:
                self.config.on_diagnostic(message)
            except Exception:
                logger.exception("evaluation on_diagnostic raised")

    async def force_flush(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - OMA's API
        """Wait until the queue is empty and no scorer runs; ``False`` on timeout."""
        with anyio.move_on_after(timeout):
            await self._idle.wait()
            return True
        return False

    async def shutdown(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Refuse new work, then drain what is queued (see :meth:`force_flush`)."""
        self._closed = True
        return await self.force_flush(timeout)


def _score_of(answer: Any) -> dict[str, Any]:
    score: Any
    passed: Any
    reason: Any
    if isinstance(answer, Score):
        score, passed, reason = answer.score, answer.passed, answer.reason
    elif isinstance(answer, Mapping):
        score, passed, reason = answer.get("score"), answer.get("pass"), answer.get("reason", "")
    else:
        raise TypeError(f"a scorer must return a Score or a mapping, got {type(answer).__name__}")
    if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
        raise TypeError(f"a scorer's score must be a finite number, got {score!r}")
    return {"score": float(score), "pass": bool(passed), "reason": str(reason)}


# ---------------------------------------------------------------------------
# Scorers named in a config file


def success_scorer(evaluation: EvaluationInput) -> Score:
    """1 when the run succeeded, else 0; the reason is the status code."""
    status = evaluation.result.get("status") or {}
    passed = bool(evaluation.result.get("success"))
    return Score(1.0 if passed else 0.0, passed, str(status.get("code", "")))


def non_empty_scorer(evaluation: EvaluationInput) -> Score:
    """1 when the output has any non-blank text."""
    passed = bool(evaluation.output.strip())
    return Score(1.0 if passed else 0.0, passed, "" if passed else "empty output")


#: Scorers a config can name without code of its own.
BUILTIN_SCORERS: dict[str, Scorer] = {"success": success_scorer, "non_empty": non_empty_scorer}


def resolve_scorer(spec: str) -> Scorer:
    """A built-in scorer's name, or ``"package.module:function"``.

    Raises ``ValueError`` saying what could not be found.
    """
    if spec in BUILTIN_SCORERS:
        return BUILTIN_SCORERS[spec]
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        names = ", ".join(sorted(BUILTIN_SCORERS))
        raise ValueError(f'{spec!r} is neither a built-in scorer ({names}) nor "module:function"')
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name!r}: {error}") from None
    scorer = getattr(module, attribute, None)
    if not callable(scorer):
        raise ValueError(f"{module_name!r} has no callable {attribute!r}")
    return scorer  # type: ignore[no-any-return]
