"""One load run: topics, services, samplers and the driver, with a guaranteed, bounded teardown.

:meth:`Harness.run` creates the run's topics under a fresh prefix, starts the selected
services and waits for them to be ready, starts the observers, runs the driver
subprocess through the phase plan (aborting early when ``should_abort`` says so, a
service dies or the hard deadline passes), drains, and then — always, in ``finally`` —
stops the driver, the services and the samplers and deletes the run's topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loadtests.load_plan import Phase, plan_seconds
from loadtests.observe import LagSampler, OutputObserver, ProcSampler
from loadtests.procs import ROOT, Pipeline, PipelineError, delete_topics, kafka_pid

log = logging.getLogger(__name__)


class KafkaUnreachableError(Exception):
    pass


@dataclass
class RunConfig:
    bootstrap: str
    out_dir: Path
    services: list[str]
    phases: list[Phase]
    keys: str = "uniform"
    zipf_s: float = 1.1
    seed: int = 0
    task_rate: float = 0.0
    ready_timeout_s: float = 120.0
    drain_s: float = 20.0
    quiet_s: float = 0.0
    """After the driver: also wait until no output arrived for this long (soak), within drain_s."""
    keep_topics: bool = False
    keep_windows: bool = False
    ticks_out: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    otel: bool = False
    optional_services: bool = False
    """Drop (and report) services that exit during start-up instead of failing the run."""
    sample_interval_s: float = 1.0
    teardown_grace_s: float = 15.0

    def deadline_s(self) -> float:
        """Hard bound on the whole run: start-up + plan + drain + slack."""
        return self.ready_timeout_s + plan_seconds(self.phases) + self.drain_s + 60.0


@dataclass
class RunData:
    prefix: str
    started: float = field(default_factory=time.time)
    ready_s: dict[str, float] = field(default_factory=dict)
    phase_starts: dict[str, float] = field(default_factory=dict)
    progress: list[tuple[float, float]] = field(default_factory=list)
    done: dict[str, Any] | None = None
    aborted: str | None = None
    error: str | None = None
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    ended: float = 0.0

    def running(self, services: list[str]) -> list[str]:
        return [s for s in services if s not in self.dropped]


AbortCheck = Callable[["Harness", RunData], str | None]
PhaseHook = Callable[["Harness", RunData, str], None]


class Harness:
    def __init__(
        self,
        config: RunConfig,
        *,
        should_abort: AbortCheck | None = None,
        on_phase: PhaseHook | None = None,
        say: Callable[[str], None] = print,
    ) -> None:
        self.config = config
        self.on_phase = on_phase
        self.prefix = f"load{uuid.uuid4().hex[:8]}-"
        self.should_abort = should_abort
        self.say = say
        self.observer = OutputObserver(config.bootstrap, self.prefix, keep_windows=config.keep_windows)
        self.lag = LagSampler(config.bootstrap, self.prefix, interval_s=config.sample_interval_s)
        self.procs = ProcSampler(config.sample_interval_s)
        self.pipeline = Pipeline(config.bootstrap, self.prefix, config.out_dir, config.extra_env, config.otel)
        self.driver: asyncio.subprocess.Process | None = None

    async def run(self) -> RunData:
        from services.runtime.admin import create_topics

        cfg = self.config
        data = RunData(prefix=self.prefix)
        stop = asyncio.Event()
        tasks: list[asyncio.Task[None]] = []
        hard_deadline = time.monotonic() + cfg.deadline_s()
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        try:
            try:
                await asyncio.wait_for(create_topics(cfg.bootstrap, prefix=self.prefix), timeout=30)
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
                raise KafkaUnreachableError(f"cannot reach Kafka at {cfg.bootstrap}: {reason}") from None
            self.say(f"topics created under prefix {self.prefix!r}")
            if cfg.services:
                self.say(f"starting {', '.join(cfg.services)}")
                self.pipeline.start(cfg.services)
                data.ready_s = await self.pipeline.wait_ready(cfg.ready_timeout_s, optional=cfg.optional_services)
                for name, why in self.pipeline.dropped.items():
                    self.say(f"dropped {name}: {why}")
                data.dropped = dict(self.pipeline.dropped)
                if cfg.services and not self.pipeline.procs:
                    raise PipelineError("no service could be started")
                self.say("ready: " + ", ".join(f"{n} {s:.1f}s" for n, s in data.ready_s.items()))
            else:
                self.say("no stream or decision services in this build/selection: measuring the broker path only")
            for sp in self.pipeline.procs:
                data.pids[sp.name] = sp.pid
                self.procs.watch(sp.name, sp.pid)
            broker = kafka_pid()
            if broker is not None:
                data.pids["kafka"] = broker
                self.procs.watch("kafka", broker, resolve=kafka_pid)
            data.pids["runner"] = os.getpid()
            self.procs.watch("runner", os.getpid())
            await self.observer.start()
            await self.lag.start()
            tasks = [
                asyncio.create_task(self.observer.run(stop), name="observer"),
                asyncio.create_task(self.lag.run(stop), name="lag"),
                asyncio.create_task(self.procs.run(stop), name="procs"),
            ]
            await self._drive(data, hard_deadline)
            await self._drain(data, hard_deadline)
        except PipelineError as exc:
            data.error = str(exc)
        finally:
            data.ended = time.time()
            stop.set()
            await self._stop_driver()
            if tasks:
                await asyncio.wait(tasks, timeout=15)
                for task in tasks:
                    if not task.done():
                        task.cancel()
                    elif task.exception() is not None and data.error is None:
                        data.error = f"{task.get_name()} failed: {task.exception()!r}"
            data.exit_codes = await asyncio.to_thread(self.pipeline.stop, cfg.teardown_grace_s)
            await self.observer.stop()
            await self.lag.stop()
            if not cfg.keep_topics:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(delete_topics(cfg.bootstrap, self.prefix), timeout=30)
        return data

    async def _drive(self, data: RunData, hard_deadline: float) -> None:
        cfg = self.config
        plan = cfg.out_dir / "plan.json"
        plan.write_bytes(orjson.dumps([p.as_json() for p in cfg.phases]))
        argv = [
            "-m", "loadtests.driver", "--plan", str(plan), "--bootstrap", cfg.bootstrap,
            "--topic-prefix", self.prefix, "--keys", cfg.keys, "--zipf-s", str(cfg.zipf_s), "--seed", str(cfg.seed),
            "--task-rate", str(cfg.task_rate),
        ]
        if cfg.ticks_out is not None:
            argv += ["--ticks-out", str(cfg.ticks_out)]
        (cfg.out_dir / "logs").mkdir(parents=True, exist_ok=True)
        with (cfg.out_dir / "logs" / "driver.log").open("ab") as err:
            self.driver = await asyncio.create_subprocess_exec(
                sys.executable, *argv, stdout=asyncio.subprocess.PIPE, stderr=err, cwd=ROOT, start_new_session=True
            )
        data.pids["driver"] = self.driver.pid
        self.procs.watch("driver", self.driver.pid)
        assert self.driver.stdout is not None
        next_check = 0.0
        stopping = False
        while True:
            try:
                line = await asyncio.wait_for(self.driver.stdout.readline(), timeout=1.0)
            except TimeoutError:
                line = None
            if line == b"":
                break
            if line:
                self._on_driver_line(data, line)
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 1.0
                self.pipeline.check_alive()
                if data.aborted is not None:
                    pass
                elif now > hard_deadline:
                    data.aborted = "hard deadline reached"
                elif self.should_abort is not None:
                    data.aborted = self.should_abort(self, data)
                if data.aborted and not stopping and self.driver.returncode is None:
                    stopping = True
                    self.say(f"stopping the load: {data.aborted}")
                    with contextlib.suppress(ProcessLookupError):
                        self.driver.send_signal(signal.SIGTERM)
                    hard_deadline = now + 20
        await asyncio.wait_for(self.driver.wait(), timeout=30)
        if data.done is None and data.aborted is None:
            raise PipelineError(f"the load driver ended without finishing (exit {self.driver.returncode}); "
                                f"see {cfg.out_dir / 'logs' / 'driver.log'}")

    def _on_driver_line(self, data: RunData, line: bytes) -> None:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            return
        kind = event.get("event")
        if kind == "phase":
            data.phase_starts[event["name"]] = float(event["t"])
            self.say(f"phase {event['name']}: {event['rate']:,.0f} msg/s ({event['nodes']:,} nodes)")
            if self.on_phase is not None:
                self.on_phase(self, data, str(event["name"]))
        elif kind == "progress":
            data.progress.append((float(event["t"]), float(event["sent"])))
        elif kind == "done":
            data.done = event

    async def _drain(self, data: RunData, hard_deadline: float) -> None:
        """Wait (bounded) until every group of the run has caught up (and, if asked, outputs went quiet)."""
        cfg = self.config
        if data.error or cfg.drain_s <= 0:
            return
        deadline = min(time.monotonic() + cfg.drain_s, hard_deadline)
        while time.monotonic() < deadline:
            self.pipeline.check_alive()
            latest = self.lag.latest()
            fresh = [s for s in latest.values() if s.t > (data.done or {}).get("t", 0.0)]
            caught_up = all(s.lag == 0 for s in fresh) if fresh else not self.lag.known_groups
            quiet = time.time() - self.observer.last_record_at >= cfg.quiet_s
            if caught_up and quiet:
                return
            await asyncio.sleep(0.5)
        self.say(f"drain: not caught up within {cfg.drain_s:.0f}s")

    async def _stop_driver(self) -> None:
        driver = self.driver
        if driver is None or driver.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            driver.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(driver.wait(), timeout=15)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                driver.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(driver.wait(), timeout=5)


def rss_points(harness: Harness, name: str, start: float, end: float) -> list[tuple[float, float]]:
    return [(s.t, s.rss_mb) for s in harness.procs.series(name) if start <= s.t <= end]


def write_timeline(path: Path, harness: Harness, data: RunData, extra: dict[str, Any]) -> None:
    """Everything sampled over time (for plots and post-mortems), next to results.json."""
    doc = {
        "prefix": data.prefix,
        "phase_starts": data.phase_starts,
        "ready_s": data.ready_s,
        "pids": data.pids,
        "dropped": data.dropped,
        "exit_codes": data.exit_codes,
        "aborted": data.aborted,
        "error": data.error,
        "driver_done": data.done,
        "driver_progress": data.progress,
        "lag": [[s.t, s.group, s.topic, s.committed, s.end] for s in harness.lag.samples],
        "procs": [[s.t, s.name, s.cpu_pct, s.rss_mb] for s in harness.procs.samples],
        "outputs_per_second": {
            topic: sorted(series.per_second.items()) for topic, series in harness.observer.series.items()
        },
        "dead_letters": [[src, kind, n] for (src, kind), n in harness.observer.dead_letters.items()],
        "restarts": dict(harness.procs.restarts),
        "lag_sampling_errors": harness.lag.errors,
        **extra,
    }
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n")
