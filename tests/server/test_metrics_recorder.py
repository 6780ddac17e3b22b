"""The recorder behind ``/metrics`` and ``runStats`` (``oma_bridge/server/metrics.py``), alone."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from oma_bridge.results import TokenUsage
from oma_bridge.server.metrics import (
    MAX_DECISIONS,
    NO_METRICS,
    Metrics,
    RunHistory,
    permission_decision,
)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def samples(metrics: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(metrics.render())
        for sample in family.samples
        if sample.name == name
    }


def test_the_history_keeps_one_hour_by_minute() -> None:
    clock = Clock(1_000_000 * 60 + 5.0)
    history = RunHistory(clock)
    history.add("ok", 0.5)
    history.add("error", 1.5)
    history.add("cancelled", None)  # cancelled while queued: no duration
    clock.now += 60
    history.add("ok", 2.0)
    wire = history.to_wire()
    assert (wire["bucketS"], wire["buckets"], wire["now"]) == (60, 60, clock.now)
    first, second = wire["minutes"]
    assert first == {
        "start": 1_000_000 * 60,
        "runs": {"ok": 1, "error": 1, "cancelled": 1},
        "durationCount": 2,
        "durationSumS": 2.0,
        "durationMaxS": 1.5,
    }
    assert second["start"] == first["start"] + 60 and second["runs"] == {"ok": 1}
    # 59 minutes later the first minute is the oldest of the window; one more and it is gone.
    clock.now += 58 * 60
    assert [m["start"] for m in history.to_wire()["minutes"]] == [first["start"], second["start"]]
    clock.now += 60
    assert [m["start"] for m in history.to_wire()["minutes"]] == [second["start"]]
    clock.now += 3600
    assert history.to_wire()["minutes"] == []


def test_the_decision_is_the_option_or_cancelled() -> None:
    assert permission_decision({"outcome": "selected", "optionId": "allow_once"}) == "allow_once"
    assert permission_decision({"outcome": "cancelled"}) == "cancelled"
    assert permission_decision({"outcome": "selected"}) == "cancelled"
    assert permission_decision(None) == "cancelled"


def test_option_ids_cannot_grow_the_series_without_bound() -> None:
    metrics = Metrics()
    for n in range(MAX_DECISIONS + 5):
        metrics.audited("permission", {"outcome": {"outcome": "selected", "optionId": f"o{n}"}})
    metrics.audited("spawn", {"pid": 1})  # not a decision
    decisions = samples(metrics, "oma_bridge_permission_decisions_total")
    assert len(decisions) == MAX_DECISIONS + 1
    assert decisions[(("decision", "other"),)] == 5


def test_a_run_end_is_counted_once_everywhere() -> None:
    metrics = Metrics()
    metrics.run_ended("echo", "llm", "ok", 0.25, TokenUsage(3, 7))
    metrics.run_ended("echo", "llm", "timeout", 2.0, None)
    runs = samples(metrics, "oma_bridge_runs_total")
    assert runs == {
        (("kind", "llm"), ("profile", "echo"), ("status", "ok")): 1,
        (("kind", "llm"), ("profile", "echo"), ("status", "timeout")): 1,
    }
    assert samples(metrics, "oma_bridge_run_duration_seconds_sum") == {
        (("kind", "llm"), ("profile", "echo")): 2.25
    }
    assert samples(metrics, "oma_bridge_tokens_total") == {
        (("direction", "input"), ("profile", "echo")): 3,
        (("direction", "output"), ("profile", "echo")): 7,
    }
    (minute,) = metrics.run_stats()["minutes"]
    assert minute["runs"] == {"ok": 1, "timeout": 1} and minute["durationSumS"] == 2.25


def test_each_daemon_has_its_own_registry() -> None:
    one, two = Metrics(), Metrics()
    one.run_ended("echo", "llm", "ok", 0.1, None)
    assert samples(two, "oma_bridge_runs_total") == {}
    one.gauge("oma_bridge_runs_queued", "queued", lambda: 4)
    assert samples(one, "oma_bridge_runs_queued") == {(): 4}


def test_no_metrics_records_nothing() -> None:
    NO_METRICS.run_ended("echo", "llm", "ok", 0.1, None)
    NO_METRICS.audited("permission", {"outcome": {"outcome": "cancelled"}})
    assert NO_METRICS.run_stats()["minutes"] == []
