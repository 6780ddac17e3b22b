"""The daemon's metrics (PROTOCOL §20.3): what ``GET /metrics`` answers, and the page's charts.

:class:`Metrics` is the one recorder of a daemon.  The owners of the events
are handed it and call it where the event happens, once per event:

* the runs (:class:`~oma_bridge.server.agents.runs.Runs`) at each run's end:
  ``oma_bridge_runs_total{profile,kind,status}``,
  ``oma_bridge_run_duration_seconds{profile,kind}`` (runs that started; one
  cancelled while queued never ran), ``oma_bridge_tokens_total{profile,direction}``;
* the audit log (:class:`~oma_bridge.server.audit.AuditLog`) at each record:
  a ``permission`` record is ``oma_bridge_permission_decisions_total{decision}``,
  with ``decision`` the ``optionId`` the record's ``outcome`` selected, or
  ``cancelled`` (counted when ``audit_log = false`` too).

Nothing is recorded per chunk or per event of a stream.  The gauges
(``oma_bridge_runs_in_flight``, ``_runs_queued``, ``_connections``,
``_child_processes``, ``_journal_bytes``) are read from their owners at
scrape time (:meth:`Metrics.gauge`), so they cost nothing between scrapes;
the standard process metrics come from ``prometheus_client``'s process
collector.  Every figure lives in this object's own registry, never in
``prometheus_client``'s global one.

The same run ends also go, per minute, into :class:`RunHistory`: the last
hour of runs by status and of their durations, which ``daemon/status``
carries as ``runStats`` for the status page's charts (``docs/status-page.md``).

:data:`NO_METRICS` records nothing: the baseline of ``bench/bench_metrics.py``
and the default of the owners when no daemon hands them a recorder.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics import Counter, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from oma_bridge.results import TokenUsage

__all__ = [
    "CONTENT_TYPE",
    "DURATION_BUCKETS",
    "MAX_DECISIONS",
    "NO_METRICS",
    "TEAM_KIND",
    "Metrics",
    "Recorder",
    "RunHistory",
    "permission_decision",
]

#: The text format ``generate_latest`` writes.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
#: From an echo's milliseconds to a coding agent's long turn.
DURATION_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    math.inf,
)
#: The ``kind`` of ``oma/runTasks`` and ``oma/runTeam`` runs (their ``profile`` is ``""``).
TEAM_KIND = "team"
#: Distinct ``decision`` values kept apart; past them, ``other`` (agents choose option ids).
MAX_DECISIONS = 32
#: What :class:`RunHistory` keeps: one bucket a minute, one hour.
BUCKET_S = 60
HISTORY_BUCKETS = 60


class Recorder(Protocol):
    """What the owners of the events call (see the module docstring)."""

    def run_ended(
        self,
        profile: str,
        kind: str,
        status: str,
        duration_s: float | None,
        usage: TokenUsage | None,
    ) -> None: ...

    def audited(self, event: str, fields: Mapping[str, Any]) -> None: ...

    def run_stats(self) -> dict[str, Any]:
        """``daemon/status``'s ``runStats``: the last hour of run ends, per minute."""
        ...


class _NoMetrics:
    """Records nothing."""

    def run_ended(
        self,
        profile: str,
        kind: str,
        status: str,
        duration_s: float | None,
        usage: TokenUsage | None,
    ) -> None:
        return None

    def audited(self, event: str, fields: Mapping[str, Any]) -> None:
        return None

    def run_stats(self) -> dict[str, Any]:
        return RunHistory().to_wire()


NO_METRICS: Recorder = _NoMetrics()


def permission_decision(outcome: Any) -> str:
    """The ``decision`` of an audit record's ``outcome``: the option chosen, or ``cancelled``."""
    if isinstance(outcome, Mapping) and outcome.get("outcome") == "selected":
        chosen = outcome.get("optionId")
        if isinstance(chosen, str) and chosen:
            return chosen
    return "cancelled"


class _Minute:
    __slots__ = ("count", "max", "runs", "start", "sum")

    def __init__(self, start: int) -> None:
        self.start = start
        self.runs: dict[str, int] = {}
        self.count = 0
        self.sum = 0.0
        self.max = 0.0


class RunHistory:
    """The last hour of run ends, one bucket a minute (wall clock: the page shows times)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._minutes: dict[int, _Minute] = {}

    def add(self, status: str, duration_s: float | None) -> None:
        start = int(self._clock() // BUCKET_S) * BUCKET_S
        minute = self._minutes.get(start)
        if minute is None:
            minute = self._minutes[start] = _Minute(start)
            self._forget_before(start - (HISTORY_BUCKETS - 1) * BUCKET_S)
        minute.runs[status] = minute.runs.get(status, 0) + 1
        if duration_s is not None:
            minute.count += 1
            minute.sum += duration_s
            minute.max = max(minute.max, duration_s)

    def _forget_before(self, oldest: int) -> None:
        for start in [start for start in self._minutes if start < oldest]:
            del self._minutes[start]

    def to_wire(self) -> dict[str, Any]:
        """``daemon/status``'s ``runStats`` (docs/protocol.md): minutes with runs, oldest first."""
        now = self._clock()
        oldest = (int(now // BUCKET_S) - (HISTORY_BUCKETS - 1)) * BUCKET_S
        self._forget_before(oldest)
        return {
            "bucketS": BUCKET_S,
            "buckets": HISTORY_BUCKETS,
            "now": round(now, 3),
            "minutes": [
                {
                    "start": minute.start,
                    "runs": dict(minute.runs),
                    "durationCount": minute.count,
                    "durationSumS": minute.sum,
                    "durationMaxS": minute.max,
                }
                for minute in sorted(self._minutes.values(), key=lambda m: m.start)
            ],
        }


class _Gauges:
    """The gauges read from their owners at scrape time."""

    def __init__(self) -> None:
        self.reads: dict[str, tuple[str, Callable[[], float]]] = {}

    def collect(self) -> Iterable[Metric]:
        for name, (help_text, read) in self.reads.items():
            yield GaugeMetricFamily(name, help_text, value=float(read()))

    def describe(self) -> Iterable[Metric]:
        return []


class Metrics:
    """One daemon's figures, in its own registry; see the module docstring."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        registry = self.registry = CollectorRegistry()
        self._runs = Counter(
            "oma_bridge_runs",
            "Runs that ended, by profile, the profile's kind and the run's status.code.",
            ("profile", "kind", "status"),
            registry=registry,
        )
        self._duration = Histogram(
            "oma_bridge_run_duration_seconds",
            "How long the runs that started took, from their start to their end.",
            ("profile", "kind"),
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._tokens = Counter(
            "oma_bridge_tokens",
            "Tokens the runs' providers counted, by profile and direction (input, output).",
            ("profile", "direction"),
            registry=registry,
        )
        self._decisions = Counter(
            "oma_bridge_permission_decisions",
            "Permission decisions, by the outcome the audit log writes: "
            "the option chosen, or cancelled.",
            ("decision",),
            registry=registry,
        )
        self._decided: set[str] = set()
        self._gauges = _Gauges()
        registry.register(self._gauges)
        ProcessCollector(registry=registry)
        self.history = RunHistory(clock)

    # -- the recorder --------------------------------------------------------------

    def run_ended(
        self,
        profile: str,
        kind: str,
        status: str,
        duration_s: float | None,
        usage: TokenUsage | None,
    ) -> None:
        self._runs.labels(profile, kind, status).inc()
        if duration_s is not None:
            self._duration.labels(profile, kind).observe(duration_s)
        if usage is not None:
            if usage.input_tokens:
                self._tokens.labels(profile, "input").inc(usage.input_tokens)
            if usage.output_tokens:
                self._tokens.labels(profile, "output").inc(usage.output_tokens)
        self.history.add(status, duration_s)

    def audited(self, event: str, fields: Mapping[str, Any]) -> None:
        if event != "permission":
            return
        decision = permission_decision(fields.get("outcome"))
        if decision not in self._decided:
            if len(self._decided) >= MAX_DECISIONS:
                decision = "other"
            else:
                self._decided.add(decision)
        self._decisions.labels(decision).inc()

    def run_stats(self) -> dict[str, Any]:
        return self.history.to_wire()

    # -- scraping --------------------------------------------------------------------

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """Expose ``name``, read by ``read()`` at each scrape (it must be quick and not raise)."""
        self._gauges.reads[name] = (help_text, read)

    def render(self) -> str:
        """Every figure in the Prometheus text format (version 0.0.4)."""
        return generate_latest(self.registry).decode("utf-8")
