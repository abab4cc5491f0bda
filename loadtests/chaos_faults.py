"""The chaos scenario's faults: injecting them, restarting what was killed, deciding when each recovered.

:class:`Controller` runs inside the harness's event loop (started when the driver enters the
``chaos`` phase): one fault at a time, then it waits until the fault recovered (rules in
``loadtests/chaos_rules.py``) or the bound passed, keeps ``gap_s`` of steady load, and goes
on; after the last fault it sends the driver SIGUSR1 (on to the flush phase).
:class:`SupervisedPipeline` is the harness's pipeline plus restarts (a killed service at once,
a crashed one while supervising); :class:`ChaosObserver` the output observer plus every
ActionResult and clusterstate.v1 record, surviving the broker restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from contracts.topics import Topic
from loadtests import harness as harness_module
from loadtests.accounting import FLUSH_PHASE
from loadtests.chaos_rules import Applied, group_series, lag_bound, recovered_at
from loadtests.harness import Harness, RunData
from loadtests.observe import OBSERVED, OutputObserver, watching_consumer
from loadtests.private_stack import PrivateApiserver, PrivateBroker, StackError
from loadtests.procs import Pipeline, PipelineError, ServiceProc

WATCHER = "cluster-watcher"
MAX_CRASHES = 5
"""Unprovoked exits of one service after which the run gives up on it (a crash loop)."""
APISERVER_GRACE_S = 10.0
"""SIGTERM, then SIGKILL after this: a graceful kube-apiserver stop waits ~20 s for its watches."""
QUICK_APISERVER_GRACE_S = 3.0
"""The same for ``--quick``: the stop ran into the SIGKILL at 10 s as well, so the wait bought nothing."""
API_OUTCOMES = ("applied", "duplicate")
"""ActionResult outcomes that needed a successful API round trip."""


def progress(message: str) -> None:
    print(f"chaos: {message}", flush=True)


@dataclass
class Fault:
    kind: str  # kill | kafka | apiserver
    target: str

    name: str = ""
    t_inject: float | None = None
    t_back: float | None = None
    """The service answered /readyz again, the broker served, the API server was ready."""
    t_recovered: float | None = None
    skipped: str | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"kill:{self.target}" if self.kind == "kill" else f"restart:{self.target}"

    @property
    def recovery_s(self) -> float | None:
        """From the fault until the pipeline processes and commits again (includes the restart)."""
        if self.t_inject is None or self.t_recovered is None:
            return None
        return self.t_recovered - self.t_inject

    @property
    def back_s(self) -> float | None:
        """From the fault until the restarted process was back (ready, serving)."""
        if self.t_inject is None or self.t_back is None:
            return None
        return self.t_back - self.t_inject

    @property
    def bound_from(self) -> float | None:
        """Where the recovery bound is counted from: a killed service's restart is part of its
        recovery; a broker's or API server's own start-up time is the infrastructure's, not the pipeline's."""
        return self.t_inject if self.kind == "kill" else self.t_back


def plan_faults(services: list[str], kube: bool) -> list[Fault]:
    faults = [Fault("kill", s) for s in services]
    faults.append(Fault("kafka", "kafka"))
    if kube:
        faults.append(Fault("apiserver", "kube-apiserver"))
    return faults


@dataclass
class SupervisedPipeline(Pipeline):
    """The harness's pipeline, plus restarts: of a killed service at once, of a crashed one when supervising."""

    supervise: bool = False
    closed: bool = False
    crashes: list[tuple[float, str, int]] = field(default_factory=list)
    on_restart: Any = None

    def service(self, name: str) -> ServiceProc:
        return next(sp for sp in self.procs if sp.name == name)

    def restart(self, name: str, *, kill: bool) -> ServiceProc:
        """SIGKILL (when asked) and start again, in one synchronous step: the harness's liveness
        check runs on the same event loop and never sees the service missing."""
        if self.closed:
            raise PipelineError(f"not restarting {name}: the pipeline is stopping")
        sp = self.service(name)
        if kill and sp.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sp.proc.pid, signal.SIGKILL)
        sp.proc.wait(timeout=10)
        self.procs.remove(sp)
        self.start([name])
        new = self.service(name)
        if self.on_restart is not None:
            self.on_restart(new)
        return new

    def check_alive(self) -> None:
        if not self.supervise or self.closed:
            super().check_alive()
            return
        for sp in list(self.procs):
            code = sp.proc.poll()
            if code is None:
                continue
            self.crashes.append((time.time(), sp.name, code))
            if sum(1 for _, n, _ in self.crashes if n == sp.name) > MAX_CRASHES:
                raise PipelineError(f"service {sp.name} keeps exiting (last code {code}):\n{sp.tail()}")
            progress(f"{sp.name} exited on its own (code {code}); restarting it. Last log lines:\n{sp.tail(4)}")
            self.restart(sp.name, kill=False)

    def stop(self, grace_s: float = 15.0) -> dict[str, int | None]:
        self.closed = True
        return super().stop(grace_s)


class ChaosObserver(OutputObserver):
    """The harness's output observer, plus what the chaos rules need: every ActionResult and
    clusterstate.v1 (the watcher's output); and it survives the broker restart."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        super().__init__(bootstrap, prefix, keep_windows=True)
        self.actions: list[Applied] = []
        self.clusterstates: list[float] = []
        self.poll_errors = 0

    async def start(self) -> None:
        self._consumer = await watching_consumer(
            self.bootstrap, [f"{self.prefix}{t}" for t in (*OBSERVED, Topic.CLUSTERSTATE)])

    async def run(self, stop: asyncio.Event) -> None:
        assert self._consumer is not None, "start() first"
        while not stop.is_set():
            try:
                batch = await self._consumer.getmany(timeout_ms=200, max_records=5000)
            except Exception as exc:  # the broker is being restarted: the consumer reconnects
                self.poll_errors += 1
                harness_module.log.info("observer poll failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            for tp, records in batch.items():
                base = self.base(tp.topic)
                for record in records:
                    self.take(base, record.key, record.value, record.timestamp)
                # the watcher's heartbeat never stops: it must not keep the drain from seeing quiet outputs
                if records and base != Topic.CLUSTERSTATE:
                    self.last_record_at = time.time()

    def take(self, base: str, key: bytes | None, raw: bytes | None, record_ts_ms: int) -> None:
        if raw is not None and base in (Topic.ACTIONS, Topic.CLUSTERSTATE):
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                value = None
            if isinstance(value, dict) and base == Topic.ACTIONS:
                self.actions.append(Applied(record_ts_ms / 1000.0, str(value.get("decision_id")),
                                            str(value.get("outcome"))))
            elif value is not None:
                self.clusterstates.append(record_ts_ms / 1000.0)
        super().take(base, key, raw, record_ts_ms)


def group_of(prefix: str, service: str, known: set[str]) -> str | None:
    """The consumer group a service of the run uses (stream processors: <prefix>borg-<name>)."""
    for candidate in (f"{prefix}borg-{service}", f"{prefix}{service}"):
        if candidate in known:
            return candidate
    return None


class Controller:
    """Injects the faults one after the other while the driver keeps the load steady."""

    def __init__(self, harness: Harness, pipeline: SupervisedPipeline, faults: list[Fault], *,
                 broker: PrivateBroker, apiserver: PrivateApiserver | None,
                 recovery_bound_s: float, gap_s: float, apiserver_grace_s: float = APISERVER_GRACE_S) -> None:
        self.harness = harness
        self.pipeline = pipeline
        self.faults = faults
        self.broker = broker
        self.apiserver = apiserver
        self.recovery_bound_s = recovery_bound_s
        self.gap_s = gap_s
        self.apiserver_grace_s = apiserver_grace_s
        self.task: asyncio.Task[None] | None = None
        self.data: RunData | None = None
        self.bounds: dict[str, dict[str, float]] = {}

    def on_phase(self, harness: Harness, data: RunData, phase: str) -> None:
        if phase == "chaos" and self.task is None:
            self.data = data
            self.task = asyncio.get_running_loop().create_task(self.run(), name="chaos")

    def _flushing(self) -> bool:
        return self.data is not None and FLUSH_PHASE in self.data.phase_starts

    async def run(self) -> None:
        self.pipeline.supervise = True
        try:
            await asyncio.sleep(self.gap_s)
            for fault in self.faults:
                if self._flushing():
                    fault.skipped = "the load's chaos phase ended first"
                    continue
                await self.inject(fault)
                await asyncio.sleep(self.gap_s)
        finally:
            driver = self.harness.driver
            if driver is not None and driver.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    driver.send_signal(signal.SIGUSR1)  # on to the flush phase
            progress("faults done; flushing the last windows and draining")

    def groups(self) -> list[str]:
        return sorted(self.harness.lag.known_groups)

    async def inject(self, fault: Fault) -> None:
        prefix = self.harness.prefix
        fault.t_inject = time.time()
        progress(f"fault {fault.name} at +{fault.t_inject - self.harness_t0():.0f}s")
        watched: list[str]
        try:
            if fault.kind == "kill":
                # not in a thread: the harness's liveness check must not run between the kill and the start
                sp = self.pipeline.restart(fault.target, kill=True)
                fault.t_back = await self.wait_ready(sp)
                group = group_of(prefix, fault.target, set(self.groups()))
                watched = [group] if group else []
            elif fault.kind == "kafka":
                await asyncio.to_thread(self.broker.stop)
                await asyncio.to_thread(self.broker.start)
                await self.broker.wait_serving(self.recovery_bound_s)
                fault.t_back = time.time()
                watched = self.groups()
            else:
                assert self.apiserver is not None
                await asyncio.to_thread(self.apiserver.stop, self.apiserver_grace_s)
                await asyncio.to_thread(self.apiserver.start)
                fault.t_back = time.time()
                group = group_of(prefix, "referee", set(self.groups()))
                watched = [group] if group else []
        except (StackError, PipelineError, TimeoutError) as exc:
            fault.notes.append(f"{type(exc).__name__}: {exc}")
            progress(f"fault {fault.name}: {exc}")
            return
        fault.t_recovered = await self.wait_recovered(fault, watched)
        if fault.recovery_s is None:
            progress(f"fault {fault.name}: NOT recovered within {self.recovery_bound_s:.0f}s")
        else:
            progress(f"fault {fault.name}: back after {fault.back_s or 0:.1f}s, "
                     f"recovered after {fault.recovery_s:.1f}s")

    def harness_t0(self) -> float:
        data = self.data
        return min(data.phase_starts.values()) if data and data.phase_starts else time.time()

    async def wait_ready(self, sp: ServiceProc) -> float | None:
        import aiohttp

        deadline = time.monotonic() + self.recovery_bound_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while time.monotonic() < deadline:
                current = self.pipeline.service(sp.name)  # replaced if it crashed meanwhile
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    async with session.get(f"http://127.0.0.1:{current.port}/readyz") as resp:
                        if resp.status == 200:
                            return time.time()
                await asyncio.sleep(0.25)
        return None

    def recovered_now(self, fault: Fault, groups: list[str]) -> float | None:
        """When the fault counts as recovered (None: not yet), from what was sampled so far."""
        assert fault.t_inject is not None
        if fault.t_back is None:
            return None
        points = [fault.t_back]
        samples = self.harness.lag.samples
        for group in groups:
            series = group_series(samples, group)
            bound = lag_bound(series, fault.t_inject, floor=100.0)
            self.bounds.setdefault(fault.name, {})[group[len(self.harness.prefix):]] = bound
            t = recovered_at(series, fault.t_inject, bound, not_before=fault.t_back)
            if t is None:
                return None
            points.append(t)
        obs = self.harness.observer
        assert isinstance(obs, ChaosObserver)
        if fault.kind == "kill" and fault.target == WATCHER:
            later = [t for t in obs.clusterstates if t > fault.t_back]
            if not later:
                return None
            points.append(min(later))
        if fault.kind == "kafka":
            later_sec = [s for s, n in obs.series[Topic.FEATURES].per_second.items() if n and s + 1 > fault.t_back]
            if not later_sec:
                return None
            points.append(float(min(later_sec)))
        if fault.kind == "apiserver" and any(a.outcome in API_OUTCOMES and a.t < fault.t_inject for a in obs.actions):
            later = [a.t for a in obs.actions if a.outcome in API_OUTCOMES and a.t > fault.t_back]
            if not later:
                return None
            points.append(min(later))
        return max(points)

    async def wait_recovered(self, fault: Fault, groups: list[str]) -> float | None:
        start = fault.bound_from
        if start is None:
            return None
        deadline = start + self.recovery_bound_s
        while time.time() < deadline + 2.0:  # + one lag sampling round after the bound
            t = self.recovered_now(fault, groups)
            if t is not None:
                return t if t - start <= self.recovery_bound_s else None
            await asyncio.sleep(0.5)
        return None
