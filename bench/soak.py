"""Soak: a daemon under mixed load for a while; does anything grow?

A daemon subprocess serves three profiles: ``echo`` (the offline LLM
provider), ``catter`` (``cat`` as a process agent) and ``demo`` (the demo ACP
agent).  ``--clients`` clients each loop over a fixed mix of calls:
``agent/run`` and ``agent/stream`` on an echo, a cat and an ACP agent they
opened, and one-off ``oma/runAgent`` runs of all three kinds (the ACP one
spawns a fresh agent).  Every client reconnects (closing its agents first)
every ``RECONNECT_EVERY`` calls, so connections and ACP agents churn too.
Every run must succeed with the expected output.

``--churn`` more clients (0 by default; ``make soak`` runs 4) follow the
pattern of clients that come and go (PROTOCOL §23): each, in a loop,
connects, opens an echo agent, streams a ``CHURN_WORDS``-word prompt
(that many journal entries), closes the agent and disconnects.  A daemon
that keeps anything of a client that left grows with their count.

Every ``--sample-every`` seconds (10 by default) the daemon's RSS, open fds,
threads and live child processes (zombies excluded; the supervisor's
watchdog counts) go into ``OUT/soak.csv``; ``OUT/soak.png`` charts them when
matplotlib is installed (``make soak`` installs it through the ``soak`` extra).

The verdict ("growth beyond noise"), printed and written to
``OUT/verdict.txt``; the exit status is 1 when it fails:

* **RSS**: the load's samples are cut in thirds; the median of the last third
  may exceed the median of the second third by at most
  ``max(5 MB, 10 % of it)`` (the first third is warm-up: arenas, caches).
* **fds, threads, children**: once the clients are gone (the load over, every
  agent closed), each must come back to its idle baseline, measured after a
  warm-up round of every call and before the load: fds and children exactly
  (up to ``settle_s`` seconds allowed for it), threads within the event
  loop's worker pool (at most ``THREAD_SLACK`` more; a pool does not shrink).
* **runs**: none failed.

Run: ``.venv/bin/python bench/soak.py --minutes 30 --clients 20 --churn 4 --out bench/out/soak``
(``make soak``).  ``tests/soak/`` runs a 2-minute version in ``make test``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil

from oma_bridge.client import Client, RemoteAgent, connect

PY = sys.executable
RECONNECT_EVERY = 40
#: Words (journal entries) each churning client streams before it leaves.
CHURN_WORDS = 2000
THREAD_SLACK = 8
RSS_NOISE_MB = 5.0
RSS_NOISE_RATIO = 0.10

CONFIG = """
[server]
socket = "{folder}/bridge.sock"
max_concurrent_runs = 64
max_connections = 128

[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"

[agents.catter]
kind = "process"
command = "cat"

[agents.demo]
kind = "acp"
command = "@python"
args = ["-m", "oma_bridge.demo.acp_agent"]
fs = "none"
permission = "reject"
"""

CSV_FIELDS = ("t_s", "phase", "rss_mb", "fds", "threads", "children", "runs_ok", "runs_failed")


@dataclass(frozen=True)
class Sample:
    """One look at the daemon process."""

    t_s: float
    phase: str  # "idle-before", "load", "idle-after"
    rss_mb: float
    fds: int
    threads: int
    children: int
    runs_ok: int
    runs_failed: int


@dataclass
class Tally:
    """Runs so far, and the first few failures (for the verdict)."""

    ok: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)

    def check(self, what: str, success: bool, output: str, expected: str, detail: str) -> None:
        if success and expected in output:
            self.ok += 1
            return
        self.failed += 1
        if len(self.failures) < 5:
            self.failures.append(f"{what}: success={success} output={output[:80]!r} {detail}")


@dataclass
class Verdict:
    """Whether anything grew beyond noise, and why."""

    ok: bool
    reasons: list[str]
    figures: dict[str, float]

    def text(self) -> str:
        lines = ["verdict: " + ("no growth beyond noise" if self.ok else "FAILED")]
        lines += [f"  {reason}" for reason in self.reasons]
        lines += [f"  {name} = {value:g}" for name, value in self.figures.items()]
        return "\n".join(lines)


def look(daemon: psutil.Process, t0: float, phase: str, tally: Tally) -> Sample:
    """Sample the daemon: RSS, fds, threads, live children (zombies are dead)."""
    with daemon.oneshot():
        rss = daemon.memory_info().rss / 2**20
        fds = daemon.num_fds()
        threads = daemon.num_threads()
    children = 0
    for child in daemon.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.status() != psutil.STATUS_ZOMBIE:
                children += 1
    return Sample(
        round(time.monotonic() - t0, 1),
        phase,
        round(rss, 2),
        fds,
        threads,
        children,
        tally.ok,
        tally.failed,
    )


@contextlib.asynccontextmanager
async def daemon_subprocess(folder: Path) -> AsyncIterator[subprocess.Popen[bytes]]:
    """``oma-bridge serve`` on ``folder``; ready once its discovery file exists; SIGTERM at exit."""
    config = folder / "bridge.toml"
    config.write_text(CONFIG.format(folder=folder))
    log = (folder / "daemon.log").open("wb")
    env = {**os.environ, "XDG_STATE_HOME": str(folder / "state")}
    command = [PY, "-m", "oma_bridge.cli", "serve", "--config", str(config)]
    # Popen, not anyio.open_process: the daemon is measured, not driven, by this loop.
    process = subprocess.Popen(command, env=env, stdout=log, stderr=log)  # noqa: ASYNC220
    try:
        with anyio.fail_after(30):
            while not (folder / "bridge.json").exists():  # a file of another process
                if process.poll() is not None:
                    raise RuntimeError(f"the daemon exited at start: {folder / 'daemon.log'}")
                await anyio.sleep(0.05)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await anyio.to_thread.run_sync(process.wait, 30)
            except subprocess.TimeoutExpired:
                process.kill()
                await anyio.to_thread.run_sync(process.wait)
        log.close()


Call = Callable[[], Awaitable[None]]


def calls(client: Client, echo: RemoteAgent, cat: RemoteAgent, acp: RemoteAgent, tally: Tally,
          tag: str) -> list[Call]:  # fmt: skip
    """The mix of one client: runs and streams of all three kinds, and one-off runs."""

    async def run(agent: RemoteAgent, kind: str, text: str) -> None:
        result = await agent.run(text)
        tally.check(f"{kind} run", result.success, result.output, text, str(result.status))

    async def stream(agent: RemoteAgent, kind: str, text: str) -> None:
        events = 0
        handle = agent.stream(text)
        async for _ in handle:
            events += 1
        result = handle.result
        assert result is not None
        tally.check(f"{kind} stream", result.success, result.output, text, f"events={events}")

    async def one_off(profile: str, text: str) -> None:
        result = await client.run_agent(profile, text)
        tally.check(f"{profile} oma/runAgent", result.success, result.output, text, "")

    n = iter(range(1_000_000))

    def text() -> str:
        return f"soak {tag} {next(n)}"

    return [
        lambda: run(echo, "echo", text()),
        lambda: stream(cat, "cat", text()),
        lambda: run(acp, "acp", text()),
        lambda: stream(echo, "echo", text()),
        lambda: run(cat, "cat", text()),
        lambda: one_off("echo", text()),
        lambda: stream(acp, "acp", text()),
        lambda: one_off("catter", text()),
        lambda: run(echo, "echo", text()),
        lambda: one_off("demo", text()),
    ]


async def client_loop(
    folder: Path, index: int, stop: anyio.Event, tally: Tally, pause_s: float, rounds: int | None
) -> None:
    """Connect, open one agent of each kind, run the mix; reconnect every so often."""
    done = 0
    while not stop.is_set():
        async with connect(discovery_dir=folder, client_name=f"soak-{index}") as client:
            agents = [await client.open(name) for name in ("echo", "catter", "demo")]
            try:
                echo, cat, acp = agents
                mix = calls(client, echo, cat, acp, tally, f"c{index}")
                for k in range(RECONNECT_EVERY):
                    if stop.is_set() or (rounds is not None and done >= rounds * len(mix)):
                        return
                    await mix[(index + k) % len(mix)]()
                    done += 1
                    await anyio.sleep(pause_s)
            finally:
                with anyio.CancelScope(shield=True):
                    for agent in agents:
                        await agent.close()


async def churn_loop(
    folder: Path, index: int, stop: anyio.Event, tally: Tally, rounds: int | None
) -> None:
    """Connect, open, stream, close, disconnect; again, until ``stop`` (or ``rounds``)."""
    prompt = " ".join(f"churn{index}-{k}" for k in range(CHURN_WORDS))
    done = 0
    while not stop.is_set() and (rounds is None or done < rounds):
        async with connect(discovery_dir=folder, client_name=f"churn-{index}") as client:
            agent = await client.open("echo")
            try:
                handle = agent.stream(prompt)
                events = 0
                async for _ in handle:
                    events += 1
                result = handle.result
                assert result is not None
                tally.check(
                    "churn stream", result.success, result.output, prompt, f"events={events}"
                )
            finally:
                with anyio.CancelScope(shield=True):
                    await agent.close()
        done += 1


async def idle_until(
    daemon: psutil.Process, baseline: Sample, t0: float, tally: Tally, within: float
) -> Sample:
    """Sample until fds and children are back at ``baseline`` (or ``within`` s passed)."""
    deadline = time.monotonic() + within
    while True:
        sample = look(daemon, t0, "idle-after", tally)
        back = sample.fds <= baseline.fds and sample.children <= baseline.children
        if back or time.monotonic() >= deadline:
            return sample
        await anyio.sleep(0.5)


def judge(samples: list[Sample], tally: Tally) -> Verdict:
    """The verdict of the module docstring."""
    load = [s for s in samples if s.phase == "load"]
    before = next(s for s in samples if s.phase == "idle-before")
    after = samples[-1]
    reasons: list[str] = []
    figures: dict[str, float] = {}
    if len(load) < 6:
        reasons.append(f"only {len(load)} load samples: too few to judge (need 6)")
    else:
        third = len(load) // 3
        second = statistics.median(s.rss_mb for s in load[third : 2 * third])
        last = statistics.median(s.rss_mb for s in load[2 * third :])
        allowed = max(RSS_NOISE_MB, RSS_NOISE_RATIO * second)
        figures |= {
            "rss_second_third_median_mb": round(second, 2),
            "rss_last_third_median_mb": round(last, 2),
            "rss_growth_mb": round(last - second, 2),
            "rss_allowed_growth_mb": round(allowed, 2),
        }
        if last - second > allowed:
            reasons.append(f"RSS grew {last - second:.1f} MB (allowed {allowed:.1f} MB)")
    figures |= {
        "rss_idle_before_mb": before.rss_mb,
        "rss_idle_after_mb": after.rss_mb,
        "rss_max_mb": max(s.rss_mb for s in samples),
        "fds_idle_before": before.fds,
        "fds_idle_after": after.fds,
        "fds_max": max(s.fds for s in samples),
        "threads_idle_before": before.threads,
        "threads_idle_after": after.threads,
        "children_idle_before": before.children,
        "children_idle_after": after.children,
        "children_max": max(s.children for s in samples),
        "runs_ok": tally.ok,
        "runs_failed": tally.failed,
    }
    if after.fds > before.fds:
        reasons.append(f"fds did not come back: {before.fds} before, {after.fds} after")
    if after.children > before.children:
        reasons.append(f"children left: {before.children} before, {after.children} after")
    if after.threads > before.threads + THREAD_SLACK:
        reasons.append(f"threads grew: {before.threads} before, {after.threads} after")
    if tally.failed:
        reasons.append(f"{tally.failed} runs failed, e.g. {tally.failures}")
    if tally.ok == 0:
        reasons.append("no run succeeded")
    return Verdict(not reasons, reasons, figures)


def write_csv(path: Path, samples: list[Sample]) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_FIELDS)
        for s in samples:
            writer.writerow([getattr(s, name) for name in CSV_FIELDS])


def write_chart(path: Path, samples: list[Sample], title: str) -> bool:
    """Four stacked panels (RSS, fds, threads, children) over time; False without matplotlib."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return False
    t = [s.t_s / 60 for s in samples]
    panels = (("rss_mb", "RSS (MB)"), ("fds", "open fds"), ("threads", "threads"),
              ("children", "child processes"))  # fmt: skip
    figure, axes = plt.subplots(len(panels), 1, sharex=True, figsize=(9, 9))
    # The load starts right after the idle-before sample.
    load = [s.t_s / 60 for s in samples if s.phase != "idle-after"]
    for ax, (name, label) in zip(axes, panels, strict=True):
        ax.plot(t, [getattr(s, name) for s in samples], marker=".", linewidth=1)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        if load:
            ax.axvspan(load[0], load[-1], color="tab:orange", alpha=0.08)
        ax.grid(alpha=0.3)
    axes[0].set_title(title)
    axes[-1].set_xlabel("minutes (shaded: under load)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


async def soak(
    minutes: float,
    clients: int,
    out: Path,
    *,
    sample_every: float = 10.0,
    pause_s: float = 1.0,
    settle_s: float = 15.0,
    chart: bool = True,
    churn: int = 0,
) -> Verdict:
    """Run the soak; write ``out/soak.csv`` (and ``soak.png``, ``verdict.txt``)."""
    await anyio.Path(out).mkdir(parents=True, exist_ok=True)
    samples: list[Sample] = []
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="omab-soak-", dir="/tmp") as name:
        folder = Path(name)
        async with daemon_subprocess(folder) as process:
            daemon = psutil.Process(process.pid)
            t0 = time.monotonic()
            # Warm-up: every call of the mix once per client, then every client gone.
            never = anyio.Event()
            async with anyio.create_task_group() as tg:
                for i in range(clients):
                    tg.start_soon(client_loop, folder, i, never, tally, 0.0, 1)
                for i in range(churn):
                    tg.start_soon(churn_loop, folder, i, never, tally, 1)
            await anyio.sleep(2)
            baseline = look(daemon, t0, "idle-before", tally)
            samples.append(baseline)
            stop = anyio.Event()
            end = time.monotonic() + minutes * 60

            async def sampler() -> None:
                while time.monotonic() < end:
                    await anyio.sleep(min(sample_every, max(0.0, end - time.monotonic())))
                    samples.append(look(daemon, t0, "load", tally))
                    last = samples[-1]
                    print(f"[soak] {last}", flush=True)
                stop.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(sampler)
                for i in range(clients):
                    tg.start_soon(client_loop, folder, i, stop, tally, pause_s, None)
                for i in range(churn):
                    tg.start_soon(churn_loop, folder, i, stop, tally, None)
            samples.append(await idle_until(daemon, baseline, t0, tally, settle_s))
    verdict = judge(samples, tally)
    load = f"{clients} clients" + (f" + {churn} churning" if churn else "")
    title = f"oma-bridge daemon soak: {minutes:g} min, {load}" if chart else None
    write_outputs(out, samples, verdict, title)
    return verdict


def write_outputs(out: Path, samples: list[Sample], verdict: Verdict, title: str | None) -> None:
    """``soak.csv``, ``verdict.txt`` and (with a ``title``, if matplotlib is there) ``soak.png``."""
    write_csv(out / "soak.csv", samples)
    (out / "verdict.txt").write_text(verdict.text() + "\n")
    if title is not None and not write_chart(out / "soak.png", samples, title):
        print("[soak] matplotlib is not installed: no soak.png (pip install -e '.[soak]')")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("bench/out/soak"))
    parser.add_argument("--sample-every", type=float, default=10.0)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between a client's calls")
    parser.add_argument("--churn", type=int, default=0, help="clients that come and go (see above)")
    args = parser.parse_args()
    verdict = anyio.run(
        lambda: soak(
            args.minutes, args.clients, args.out,
            sample_every=args.sample_every, pause_s=args.pause, churn=args.churn,
        )
    )  # fmt: skip
    print(verdict.text())
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
