"""The live arena: the offline arena's comparison through the real system, at small scale (issue 21 item 2).

    borgctl eval arena --live [--quick] [--policies kube-default,extender,orchestrator] [--seed N] [--nodes N]
                              [--horizon-s S] [--task-events DIR | --synthetic JOBS]
                              [--extender-weight W] [--extender-corunner-weight C] --out DIR

For each policy, on the same arrivals (``simulator.arena.arrivals``: the Google 2011 trace or its
synthetic stand-in, held-out workload kinds only) and a fresh set of kwok nodes:

* a private kube-scheduler places the tasks: the default profile (``kube-default``), or the project's
  extender configuration calling a real ``scheduler-extender`` process (``extender``), which reads
  the regime labels of a real ``features`` → ``regime`` pipeline on Kafka (and, with
  ``--extender-corunner-weight`` > 0, watches the API server's pods for the co-runner term); ``orchestrator`` adds a
  real ``agent-admission`` and a real ``referee`` applying its decisions to the API server (taints the
  private scheduler then honours), as the offline ``orchestrator`` acts between ticks;
* each task is a Job that kwok keeps Running for its run time (time-compressed by ``time_scale``);
* every second the simulator (``simulator.arena.world.ArenaCluster``) turns the kinds actually
  running on each node (the pods' labels, where the API server says they run) into that node's PMU
  counters, published as NodeState to the pipeline, and the ledger accounts what every running task
  suffers from its co-runners (``simulator.workloads.task_slowdowns``: the worst co-runner).

Completion times stretch with the slowdown, as in the offline arena: each running task's remaining
work (arena seconds) wears down by ``dt / slowdown`` per tick, and when it is done the driver sets the
pod's kwok delay to 0 s, so kwok completes it then (``ArenaKube.complete``; the Job's own delay is only
a fallback, 3× the nominal time). ``--no-stretch`` runs every pod for its nominal time instead (the
slowdown then only accounted). Batch work's ``completion_inflation`` is (finish − submit) ÷ work, as
offline. Results: ``DIR/results.json`` in the bench format (``bench: "arena-live"``, ``case``: policy).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson

from contracts.topics import Topic, topic_spec
from loadtests.arena_live.kube import (
    CLASS_LABEL,
    JOB_LABEL,
    LATENCY_LABEL,
    ArenaKube,
    LiveTask,
    TaskRun,
    kube_scheduler_binary,
    private_scheduler,
    scheduler_config,
)
from loadtests.procs import free_port
from services.runtime.kafka_security import kafka_client_options

ROOT = Path(__file__).resolve().parents[2]
POLICIES: Final = ("kube-default", "extender", "orchestrator")
DEFAULT_POLICIES: Final = ("kube-default", "extender")
"""``orchestrator`` runs when asked (``--policies``): four more processes and a third pass."""
SLO_SLOWDOWN: Final = 1.25
NODE_CPU_M: Final = 16_000
NODE_MEMORY_MIB: Final = 64 * 1024
NODESTATE: Final = Topic.NODESTATE
WARMUP_LIMIT_S: Final = 120.0


@dataclass(frozen=True)
class LiveSize:
    nodes: int
    horizon_s: float
    """Arena seconds of arrivals."""
    time_scale: float
    """Arena seconds per wall-clock second."""
    target_load: float
    synthetic_jobs: int
    drain_s: float
    """Wall seconds to wait, after the last arrival, for running tasks to finish."""


QUICK: Final = LiveSize(nodes=6, horizon_s=600.0, time_scale=10.0, target_load=0.8, synthetic_jobs=300, drain_s=45.0)
FULL: Final = LiveSize(nodes=20, horizon_s=1800.0, time_scale=10.0, target_load=0.6, synthetic_jobs=400, drain_s=90.0)


@dataclass
class Ledger:
    """What the running tasks suffer, tick by tick (arena seconds)."""

    nodes: int
    slo: float = SLO_SLOWDOWN
    horizon_s: float = math.inf
    """Utilisation and nodes used are averaged over the arrival window [0, horizon_s), as offline
    (``simulator.arena.report``): the drain after it holds the last, often restarted, tasks on a near-empty
    cluster, and its length would otherwise decide the average. Violations count until the end."""
    violation_s: float = 0.0
    ls_running_s: float = 0.0
    util_s: float = 0.0
    useful_util_s: float = 0.0
    """Requested CPU in use divided by each task's slowdown: the work actually done, as offline."""
    nodes_used_s: float = 0.0
    elapsed_s: float = 0.0
    """Arena seconds accounted."""
    in_horizon_s: float = 0.0
    """Of those, inside the arrival window (the utilisation averages' denominator)."""
    slowdown_samples: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    """class → (slowdown, arena seconds at it)."""

    def tick(self, running: dict[int, list[Any]], dt_s: float) -> list[tuple[Any, float]]:
        """``running``: node index → the arrivals running there for the last ``dt_s`` arena seconds.

        Returns each running arrival with the slowdown it had (for ``Completions.advance``)."""
        from simulator.workloads import task_slowdowns

        cpu = useful = 0.0
        slowed: list[tuple[Any, float]] = []
        for tasks in running.values():
            if not tasks:
                continue
            slow = task_slowdowns([t.workload_class for t in tasks], np.array([t.pressure for t in tasks]))
            for task, s in zip(tasks, slow.tolist(), strict=True):
                slowed.append((task, s))
                self.slowdown_samples[task.workload_class].append((s, dt_s))
                if task.latency_sensitive:
                    self.ls_running_s += dt_s
                    if s > self.slo:
                        self.violation_s += dt_s
                cpu += task.cpu
                useful += task.cpu / max(s, 1.0)
        inside = max(0.0, min(dt_s, self.horizon_s - self.elapsed_s))  # the part of this tick in the window
        self.util_s += cpu / self.nodes * inside
        self.useful_util_s += useful / self.nodes * inside
        self.nodes_used_s += sum(1 for tasks in running.values() if tasks) * inside
        self.elapsed_s += dt_s
        self.in_horizon_s += inside
        return slowed

    def metrics(self) -> dict[str, float]:
        window = self.in_horizon_s
        out = {
            "slo_violation_task_s": self.violation_s,
            "latency_sensitive_task_s": self.ls_running_s,
            "mean_cpu_utilisation": self.util_s / window if window else 0.0,
            "useful_cpu_utilisation": self.useful_util_s / window if window else 0.0,
            "nodes_used": self.nodes_used_s / window if window else 0.0,
            "accounted_arena_s": self.elapsed_s,
        }
        for cls, samples in sorted(self.slowdown_samples.items()):
            values = np.array([s for s, _ in samples])
            weights = np.array([w for _, w in samples])
            order = np.argsort(values)
            cumulative = np.cumsum(weights[order]) / weights.sum()
            out[f"mean_slowdown_{cls}"] = float(np.average(values, weights=weights))
            at = min(int(np.searchsorted(cumulative, 0.95)), len(values) - 1)
            out[f"p95_slowdown_{cls}"] = float(values[order][at])
        return out


@dataclass
class Completions:
    """When each task finishes, in arena seconds: its work worn down by its slowdown, tick by tick.

    Pure bookkeeping; the driver completes the pods ``advance`` returns (stretched completion times) or,
    with stretching off, reports the tasks it sees finished through ``finished``."""

    work_s: dict[str, float] = field(default_factory=dict)
    remaining_s: dict[str, float] = field(default_factory=dict)
    submitted_s: dict[str, float] = field(default_factory=dict)
    started_s: dict[str, float] = field(default_factory=dict)
    """When the driver first saw a pod of the task Running (arena seconds)."""
    finished_s: dict[str, float] = field(default_factory=dict)
    batch: set[str] = field(default_factory=set)
    restarts: int = 0
    lost_work_s: float = 0.0

    def submitted(self, task_id: str, arena_s: float, work_s: float, *, latency_sensitive: bool) -> None:
        self.work_s[task_id] = self.remaining_s[task_id] = work_s
        self.submitted_s[task_id] = arena_s
        if not latency_sensitive:
            self.batch.add(task_id)

    def advance(self, slowed: Sequence[tuple[str, float]], dt_s: float, arena_s: float) -> list[str]:
        """Wear each running task's remaining work down by ``dt_s / slowdown``; the tasks done now."""
        done = []
        for task_id, slowdown in slowed:
            if task_id in self.finished_s or task_id not in self.remaining_s:
                continue
            self.remaining_s[task_id] -= dt_s / max(slowdown, 1.0)
            if self.remaining_s[task_id] <= 1e-9:
                self.finished(task_id, arena_s)
                done.append(task_id)
        return done

    def finished(self, task_id: str, arena_s: float) -> None:
        self.finished_s.setdefault(task_id, arena_s)

    def running(self, task_ids: Sequence[str], arena_s: float) -> None:
        """The tasks seen Running at this tick (the first time counts: submit → start is the placement delay)."""
        for task_id in task_ids:
            if task_id in self.submitted_s:
                self.started_s.setdefault(task_id, arena_s)

    def start_delays(self) -> dict[str, float]:
        """Arena seconds from submission to the first tick a pod of the task ran: scheduling, binding and kwok's
        start, all in wall time and so magnified by the time compression (NaN when none started)."""
        delays = np.array([self.started_s[t] - self.submitted_s[t] for t in self.started_s])
        if not delays.size:
            return {"mean_start_delay_s": math.nan, "p95_start_delay_s": math.nan}
        return {"mean_start_delay_s": float(delays.mean()), "p95_start_delay_s": float(np.quantile(delays, 0.95))}

    def restart(self, task_id: str) -> float:
        """The task's pod was replaced (moved): its work starts again; the work lost (arena seconds)."""
        if task_id in self.finished_s or task_id not in self.remaining_s:
            return 0.0
        lost = self.work_s[task_id] - self.remaining_s[task_id]
        self.remaining_s[task_id] = self.work_s[task_id]
        self.restarts += 1
        self.lost_work_s += lost
        return lost

    def completion_inflation(self) -> float:
        """Finished batch tasks' (finish − submit) ÷ their work (NaN when none finished)."""
        ids = [t for t in self.batch if t in self.finished_s]
        work = sum(self.work_s[t] for t in ids)
        if not work:
            return math.nan
        return sum(self.finished_s[t] - self.submitted_s[t] for t in ids) / work


FALLBACK_DELAY_FACTOR: Final = 3.0
"""With stretched completions a Job's own kwok delay is this × its nominal time: only if the driver
never completes it (the model's worst slowdown is below 3)."""


def live_id(arrival: Any) -> str:
    """The task id (Job name, pod label) the live arena gives an arrival."""
    return f"t{arrival.task_id:05d}"


def live_task(arrival: Any, time_scale: float, *, stretch: bool = False) -> LiveTask:
    nominal = arrival.work_s / time_scale
    return LiveTask(
        task_id=live_id(arrival),
        kind=arrival.kind,
        workload_class=arrival.workload_class,
        cpu_m=max(1, round(arrival.cpu * NODE_CPU_M)),
        memory_mib=max(1, round(arrival.memory * NODE_MEMORY_MIB)),
        run_s=nominal * FALLBACK_DELAY_FACTOR if stretch else nominal,
        latency_sensitive=arrival.latency_sensitive,
        job_id=f"j{arrival.job_id}",
    )


def running_by_node(runs: Sequence[TaskRun], nodes: Sequence[str], by_id: dict[str, Any]) -> dict[int, list[Any]]:
    return {i: [a for a, _ in pods] for i, pods in running_pods_by_node(runs, nodes, by_id).items()}


def running_pods_by_node(runs: Sequence[TaskRun], nodes: Sequence[str], by_id: dict[str, Any]
                         ) -> dict[int, list[tuple[Any, str]]]:
    """Per node index: (arrival, pod UID) of every Running task pod bound there."""
    index = {n: i for i, n in enumerate(nodes)}
    out: dict[int, list[tuple[Any, str]]] = {i: [] for i in range(len(nodes))}
    for r in runs:
        if r.phase == "Running" and r.node in index and r.task_id in by_id:
            out[index[r.node]].append((by_id[r.task_id], r.uid))
    return out


def finished_tasks(runs: Sequence[TaskRun]) -> set[str]:
    """Tasks whose pod ended on its own: Succeeded, or Failed without being evicted (an evicted pod's Job
    makes a replacement)."""
    return {r.task_id for r in runs if r.phase == "Succeeded" or (r.phase == "Failed" and not r.evicted)}


def replaced(runs: Sequence[TaskRun], pod_of_task: dict[str, str]) -> list[str]:
    """Tasks now Running in another pod than the one last seen (a move's replacement); updates ``pod_of_task``."""
    out = []
    for r in runs:
        if r.phase != "Running" or not r.uid or r.evicted:  # an evicted pod still stopping is not the task's now
            continue
        last = pod_of_task.get(r.task_id)
        if last is not None and last != r.uid:
            out.append(r.task_id)
        pod_of_task[r.task_id] = r.uid
    return out


def score_pod_pressure(records: Sequence[Any], truth: dict[str, tuple[float, ...]]) -> dict[str, float]:
    """The live estimates (PodPressure records) against each pod's true pressure: record counts, the share
    answered, and per resource the mean absolute error and the log-ratio spread where the truth exceeds the
    free pressure (``training.pod_pressure.errors``, the offline figures' definitions)."""
    from simulator.workloads import RESOURCES
    from training.pod_pressure import errors

    known = [r for r in records if r.pod_uid in truth]
    ok = [r for r in known if r.status == "ok"]
    out: dict[str, float] = {"pod_pressure_records": float(len(records)),
                             "pod_pressure_pods": float(len({r.pod_uid for r in known})),
                             "pod_pressure_answered": len(ok) / len(known) if known else 0.0}
    if not ok:
        return out
    pred = np.array([[getattr(r, name) for name in RESOURCES] for r in ok], dtype=np.float64)
    true = np.array([truth[r.pod_uid] for r in ok], dtype=np.float64)
    for name, e in errors(pred, true).items():
        out[f"pod_pressure_{name}_mae"] = e["mae"]
        if e["hot_share"] > 0:
            out[f"pod_pressure_{name}_log_sigma"] = e["log_ratio_sigma"]
    return out


@dataclass
class _Proc:
    name: str
    proc: subprocess.Popen[bytes]
    health: int
    log: Path


def _spawn(name: str, args: list[str], env: dict[str, str], work: Path) -> _Proc:
    health = free_port()
    log = work / f"{name}.log"
    full = {
        **os.environ,
        "HEALTH_PORT": str(health),
        "LOG_FORMAT": "text",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **env,
    }
    full.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "borgctl.main", "serve", *args],
            cwd=ROOT,
            env=full,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return _Proc(name, proc, health, log)


async def _wait_ready(procs: Sequence[_Proc], limit_s: float = 120.0) -> None:
    import aiohttp

    deadline = time.monotonic() + limit_s
    async with aiohttp.ClientSession() as http:
        for p in procs:
            while True:
                if p.proc.poll() is not None:
                    raise RuntimeError(f"{p.name} exited ({p.proc.returncode}); log {p.log}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"http://127.0.0.1:{p.health}/readyz") as r:
                        if r.status == 200:
                            break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{p.name} not ready within {limit_s:.0f}s; log {p.log}")
                await asyncio.sleep(0.3)


def _stop(procs: Sequence[_Proc]) -> None:
    for p in procs:
        if p.proc.poll() is None:
            p.proc.terminate()
    for p in procs:
        try:
            p.proc.wait(20)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait(5)


async def _metric_samples(port: int) -> list[Any]:
    """Every sample a local process serves on its /metrics (prometheus_client's ``Sample``s)."""
    import aiohttp
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as r:
        text = await r.text()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


async def _extender_counts(port: int) -> dict[str, float]:
    """From the extender's /metrics: the scheduler's calls it answered and the regime labels it read.

    kube-scheduler calls ``filter`` for every pod and ``prioritize`` only when more than one node is left
    (one feasible node is bound without scoring)."""
    out = {"extender_filter_calls": 0.0, "extender_prioritize_calls": 0.0, "extender_regime_labels": 0.0,
           "extender_corunner_updates": 0.0, "extender_load_updates": 0.0, "extender_pressure_records": 0.0}
    for sample in await _metric_samples(port):
        if sample.name == "borg_extender_request_seconds_count":
            key = f"extender_{sample.labels.get('verb', '')}_calls"
            if key in out:
                out[key] += sample.value
        elif sample.name == "borg_extender_state_messages_total" and "regimes" in sample.labels.get("topic", ""):
            out["extender_regime_labels"] += sample.value
        elif sample.name == "borg_extender_corunner_updates_total":
            out["extender_corunner_updates"] += sample.value
        elif sample.name == "borg_extender_load_updates_total":  # the load term (EXTENDER_LOAD_TERM)
            out["extender_load_updates"] += sample.value
        elif sample.name == "borg_extender_pressure_records_total":
            out["extender_pressure_records"] += sample.value
    return out


async def _agent_counts(port: int) -> dict[str, float]:
    """From the reliability agent's /metrics: its interference re-plans, the nodes it knew (every pod with an
    estimate) or not at the last one, the hot ones, and the evict proposals it made."""
    out = {"agent_plans": 0.0, "agent_nodes_known": 0.0, "agent_nodes_unknown": 0.0, "agent_hot_nodes": 0.0,
           "agent_move_proposals": 0.0}
    names = {"borg_agent_interference_plans_total": "agent_plans", "borg_agent_interference_hot_nodes":
             "agent_hot_nodes", "borg_agent_interference_moves_total": "agent_move_proposals"}
    for sample in await _metric_samples(port):
        if sample.name in names:
            out[names[sample.name]] = sample.value
        elif sample.name == "borg_agent_interference_nodes":
            out[f"agent_nodes_{sample.labels.get('state', '')}"] = sample.value
    return out


async def _pod_pressure_sources(port: int) -> dict[str, float]:
    """From the pod-pressure stage's /metrics: answered pod windows per monitored resource by where its value came
    from (``pod_pressure_<resource>_from_<source>``: reading, reading_or_model, model)."""
    out: dict[str, float] = {}
    for sample in await _metric_samples(port):
        if sample.name == "borg_pod_pressure_monitored_total":
            key = f"pod_pressure_{sample.labels.get('resource', '')}_from_{sample.labels.get('source', '')}"
            out[key] = out.get(key, 0.0) + sample.value
    return out


def name_of(run_id: str, policy: str) -> str:
    """The private scheduler's name (and the orchestrator's cluster name) of one policy's pass."""
    return f"arena-{run_id}-{policy}"


async def _read_topic(bootstrap: str, topic: str, partitions: int, limit_s: float = 20.0) -> list[Any]:
    """Every record of ``topic`` up to its end offsets now (at most ``limit_s`` of reading)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **kafka_client_options())
    await consumer.start()
    out: list[Any] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + limit_s

        async def behind() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in tps])

        while await behind() and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out.extend(records)
    finally:
        await consumer.stop()
    return out


async def _action_counts(bootstrap: str, prefix: str, say: Callable[[str], None]) -> dict[str, float]:
    """The referee's ActionResults of the pass, by outcome (``actions_applied``, ``actions_refused`` …) and the
    taints and evictions among those applied; each refusal or failure is told through ``say``."""
    from contracts import ActionResult

    out: dict[str, float] = {f"actions_{o}": 0.0 for o in ("applied", "refused", "failed")}
    out["decisions_declined"] = 0.0
    out["taints_applied"] = 0.0
    out["evictions_applied"] = 0.0
    for result in await _decoded(bootstrap, prefix, Topic.ACTIONS, ActionResult):
        # a "none" decision (no proposal qualified) is the referee declining, not a refused write
        key = "decisions_declined" if result.action == "none" else f"actions_{result.outcome}"
        out[key] = out.get(key, 0.0) + 1
        if result.action == "none":
            say(f"orchestrator: declined on {result.target.key()}: {result.message[:200]}")
        elif result.outcome in ("refused", "failed"):
            say(f"orchestrator: {result.action} on {result.target.key()} {result.outcome}: {result.message[:200]}")
        elif result.outcome == "applied" and result.action == "taint":
            out["taints_applied"] += 1
        elif result.outcome == "applied" and result.action == "evict":
            out["evictions_applied"] += 1
    return out


def tally_proposals(proposals: Sequence[Any]) -> dict[str, float]:
    """Proposals by agent and kind (``proposals_<agent>_<kind>``)."""
    out: dict[str, float] = {}
    for p in proposals:
        key = f"proposals_{p.agent}_{p.kind}"
        out[key] = out.get(key, 0.0) + 1
    return out


def tally_risk(records: Sequence[Any], threshold: float = 0.6) -> dict[str, float]:
    """risk.v2 records: how many, the share whose inputs were in the model's range, how many in-range ones
    reached ``threshold`` (the reliability and admission agents' default) at any horizon, the highest
    probability, and which inputs were out of range (``risk_out_of_range_<input>``: records naming it)."""
    in_range = [r for r in records if r.in_range]
    out = {"risk_records": float(len(records)),
           "risk_in_range_share": len(in_range) / len(records) if records else 0.0,
           "risk_at_threshold": float(sum(1 for r in in_range if max(h.probability for h in r.horizons) >= threshold)),
           "risk_max_p": max((h.probability for r in records for h in r.horizons), default=0.0)}
    for r in records:
        for name in r.out_of_range:
            out[f"risk_out_of_range_{name}"] = out.get(f"risk_out_of_range_{name}", 0.0) + 1
    return out


async def _decoded(bootstrap: str, prefix: str, topic: str, model: Any) -> list[Any]:
    """Every record of the pass's ``topic`` that decodes as ``model`` (others are skipped)."""
    from contracts import ContractError, decode

    out = []
    for r in await _read_topic(bootstrap, f"{prefix}{topic}", topic_spec(topic).partitions):
        with contextlib.suppress(ContractError):
            out.append(decode(model, r.value))
    return out


async def _pod_pressure_scores(bootstrap: str, prefix: str, truth: dict[str, tuple[float, ...]]) -> dict[str, float]:
    """The pass's podpressure.v1 records scored against the pods' true pressure (``score_pod_pressure``)."""
    from contracts.models import PodPressure

    return score_pod_pressure(await _decoded(bootstrap, prefix, Topic.PODPRESSURE, PodPressure), truth)


@dataclass(frozen=True)
class LiveContext:
    bootstrap: str
    kubeconfig: Path
    work: Path
    seed: int
    progress: Callable[[str], None]
    extender_weight: int | None = None
    """The extender's weight in the private scheduler's config (None: the deploy file's)."""
    corunner_weight: float = 0.0
    """EXTENDER_WEIGHT_CORUNNER of the extender process (0: off, as the service's default)."""
    stretch: bool = True
    """Complete each pod when its slowed-down work is done (False: after its nominal time)."""
    risk: bool = False
    """The orchestrator pass also runs the cluster watcher and the risk stage (risk evictions, admission holds)."""
    load_term: bool = False
    """The orchestrator pass's extender scores on the pods' podpressure.v1 estimates (EXTENDER_LOAD_TERM)."""
    move_slo_slowdown: float | None = None
    """AGENT_RELIABILITY_MOVE_SLO_SLOWDOWN of the orchestrator pass (None: the agent's default, the SLO)."""
    corunner_slo_slowdown: float | None = None
    """EXTENDER_CORUNNER_SLO_SLOWDOWN of the orchestrator pass's extender (None: its default, the SLO)."""
    max_disruptions: int | None = None
    """REFEREE_MAX_DISRUPTIONS of the orchestrator pass (None: the referee's default)."""
    disruption_window_s: float = 300.0
    """The referee's disruption window in arena seconds (the referee gets it in wall seconds)."""
    rdt_noise: float | None = None
    """Per-pod resctrl readings (LLC occupancy, memory traffic) beside the counters, with this spread (None: the
    counters only, as on a node without the monitoring)."""


def orchestrator_overrides(ctx: LiveContext, time_scale: float) -> dict[str, dict[str, str]]:
    """The orchestrator pass's settings that the run's flags change, per service (the services' own defaults
    for everything not set)."""
    referee = {"REFEREE_DISRUPTION_WINDOW_S": f"{ctx.disruption_window_s / time_scale:g}"}
    if ctx.max_disruptions is not None:
        referee["REFEREE_MAX_DISRUPTIONS"] = str(ctx.max_disruptions)
    return {
        "agent-reliability": ({"AGENT_RELIABILITY_MOVE_SLO_SLOWDOWN": f"{ctx.move_slo_slowdown:g}"}
                              if ctx.move_slo_slowdown is not None else {}),
        "referee": referee,
        "scheduler-extender": ({"EXTENDER_CORUNNER_SLO_SLOWDOWN": f"{ctx.corunner_slo_slowdown:g}"}
                               if ctx.corunner_slo_slowdown is not None else {}),
    }


async def run_policy(policy: str, arrivals: Sequence[Any], size: LiveSize, ctx: LiveContext) -> dict[str, float]:
    """One policy on fresh kwok nodes; the ledger's metrics plus counts."""
    from aiokafka import AIOKafkaProducer
    from kubernetes_asyncio import config

    from contracts.headers import build_headers
    from simulator.arena.world import ArenaCluster

    run_id = uuid.uuid4().hex[:8]
    prefix = f"arena{run_id}-"
    api = await config.new_client_from_config(config_file=str(ctx.kubeconfig))
    arena = ArenaKube(api, run_id=run_id, namespace=f"arena-{run_id}")
    procs: list[_Proc] = []
    producer = AIOKafkaProducer(bootstrap_servers=ctx.bootstrap, **kafka_client_options(), linger_ms=5)
    ledger = Ledger(size.nodes, horizon_s=size.horizon_s)
    completions = Completions()
    by_id = {live_id(a): a for a in arrivals}
    submitted = 0
    started = time.monotonic()
    try:
        from services.runtime.admin import create_topics

        await create_topics(ctx.bootstrap, prefix=prefix)
        nodes = await arena.create(size.nodes, cpu=str(NODE_CPU_M // 1000), memory=f"{NODE_MEMORY_MIB}Mi")
        extender_url = None
        if policy in ("extender", "orchestrator"):
            port = free_port()
            env = {"KAFKA_BOOTSTRAP": ctx.bootstrap, "BORG_TOPIC_PREFIX": prefix}
            overrides = orchestrator_overrides(ctx, size.time_scale) if policy == "orchestrator" else {}
            if policy == "orchestrator":
                # the deciding side: the admission agent's taints, applied by the referee to this run's nodes
                procs = [
                    _spawn("agent-admission", ["agent-admission"],
                           {**env, "AGENT_ADMISSION_GROUP_ID": f"{prefix}agent-admission"}, ctx.work),
                    # per-pod pressure from the pods' cgroup counters (published with each node's NodeState), and
                    # the reliability agent's interference moves on it (evict proposals for the referee)
                    _spawn("pod-pressure", ["pod-pressure"], env, ctx.work),
                    _spawn("agent-reliability", ["agent-reliability"],
                           {**env, "AGENT_RELIABILITY_GROUP_ID": f"{prefix}agent-reliability",
                            "AGENT_RELIABILITY_INTERFERENCE": "true",
                            "AGENT_RELIABILITY_KUBECONFIG": str(ctx.kubeconfig),
                            "AGENT_RELIABILITY_CLASS_LABEL": CLASS_LABEL,
                            "AGENT_RELIABILITY_LATENCY_LABEL": LATENCY_LABEL,
                            "AGENT_RELIABILITY_JOB_LABEL": JOB_LABEL,
                            "AGENT_RELIABILITY_PODS_REFRESH_S": "1", **overrides["agent-reliability"]},
                           ctx.work),
                    _spawn("referee", ["referee"],
                           {**env, "REFEREE_MODE": "apply", "REFEREE_KUBECONFIG": str(ctx.kubeconfig),
                            "REFEREE_GROUP_ID": f"{prefix}referee", "REFEREE_CLUSTER": name_of(run_id, policy),
                            "LOG_LEVEL": "INFO",
                            # the disruption budget (5 per 300 s) in arena time, as the offline orchestrator has it
                            **overrides["referee"]},
                           ctx.work),
                ]
                if ctx.risk:
                    # task events and queue state from this run's namespace, and failure risk on them (Kubernetes
                    # units scaled by the kwok nodes' size, featurelib.borg_units): the admission agent's risk
                    # evictions and holds can act
                    procs += [
                        _spawn("cluster-watcher", ["cluster-watcher"],
                               {**env, "WATCHER_KUBECONFIG": str(ctx.kubeconfig), "WATCHER_NAMESPACE": arena.namespace,
                                "WATCHER_CLUSTER": name_of(run_id, policy)}, ctx.work),
                        _spawn("risk", ["risk"],
                               {**env, "RISK_LARGEST_NODE_CPU": f"{NODE_CPU_M / 1000:g}",
                                "RISK_LARGEST_NODE_MEMORY_GIB": f"{NODE_MEMORY_MIB / 1024:g}"}, ctx.work),
                    ]
            procs += [
                _spawn("features", ["features"], env, ctx.work),
                _spawn("regime", ["regime"], env, ctx.work),
                _spawn(
                    "scheduler-extender",
                    ["scheduler-extender"],
                    {**env, "EXTENDER_HOST": "127.0.0.1", "EXTENDER_PORT": str(port),
                     "EXTENDER_WEIGHT_CORUNNER": str(ctx.corunner_weight),
                     "EXTENDER_KUBECONFIG": str(ctx.kubeconfig),
                     # only the orchestrator pass runs the pod-pressure stage the load term reads; its estimates
                     # re-read once per counter window (10 arena-s), as the offline arena's load term sees them
                     **({"EXTENDER_LOAD_TERM": "true", "EXTENDER_LOAD_RECHECK_S": f"{10.0 / size.time_scale:g}"}
                        if ctx.load_term and policy == "orchestrator" else {}),
                     **overrides.get("scheduler-extender", {})},
                    ctx.work,
                ),
            ]
            await _wait_ready(procs)
            extender_url = f"http://127.0.0.1:{port}"
        name = name_of(run_id, policy)
        sched = scheduler_config(name, ctx.kubeconfig.parent / "scheduler.kubeconfig", extender_url,
                                 ctx.extender_weight)
        await producer.start()
        cluster = ArenaCluster(size.nodes, ctx.seed, interval_ms=1000, node_names=nodes,
                               monitor_noise=ctx.rdt_noise or 0.0)
        headers = build_headers(NODESTATE)

        reliability = next((p for p in procs if p.name == "agent-reliability"), None)
        pod_cgroups = policy == "orchestrator"
        truth: dict[str, tuple[float, ...]] = {}
        pod_of_task: dict[str, str] = {}

        async def publish() -> None:
            ts_ms = int(time.time() * 1000)
            for i, state in enumerate(cluster.tick().nodestate_dicts(ts_ms=ts_ms)):
                if pod_cgroups:
                    interval_s = cluster.interval_ms / 1000.0
                    cgroups = cluster.cgroup_dicts(i, interval_s)
                    if ctx.rdt_noise is not None:  # what an agent with NODE_AGENT_RESCTRL_ROOT adds
                        for cgroup, readings in cluster.resctrl_dicts(i, interval_s).items():
                            cgroups.setdefault(cgroup, {}).update(readings)
                        state["metrics"] = cluster.monitored_metrics()
                    state["cgroups"] = cgroups
                    truth.update(cluster.pod_pressures(i))
                await producer.send(
                    prefix + NODESTATE, key=state["node"].encode(), value=orjson.dumps(state), headers=headers
                )

        if procs:
            # warm-up: the idle nodes' counters until the extender holds a regime label per node, so the
            # extender policy starts informed (and a slow machine does not turn it into kube-default)
            warm_until = time.monotonic() + WARMUP_LIMIT_S
            while (await _extender_counts(procs[-1].health))["extender_regime_labels"] < len(nodes):
                if time.monotonic() > warm_until:
                    raise RuntimeError(
                        f"the extender read no regime label per node within {WARMUP_LIMIT_S:.0f}s (logs in {ctx.work})"
                    )
                await publish()
                await asyncio.sleep(1.0)
            ctx.progress(f"{policy}: pipeline warm (a regime label per node at the extender)")
        with private_scheduler(kube_scheduler_binary(), sched, ctx.work / policy, free_port()):
            t0 = time.monotonic()
            last = t0
            horizon_wall = size.horizon_s / size.time_scale
            while True:
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - last)))
                now = time.monotonic()
                dt_arena = (now - last) * size.time_scale
                last = now
                arena_now = (now - t0) * size.time_scale
                while submitted < len(arrivals) and arrivals[submitted].submit_s <= arena_now:
                    a = arrivals[submitted]
                    task = live_task(a, size.time_scale, stretch=ctx.stretch)
                    await arena.submit(task, name)
                    completions.submitted(task.task_id, arena_now, a.work_s, latency_sensitive=a.latency_sensitive)
                    submitted += 1
                runs = await arena.runs()
                pods_by_node = running_pods_by_node(runs, nodes, by_id)
                running = {i: [t for t, _ in pods] for i, pods in pods_by_node.items()}
                completions.running([live_id(t) for tasks in running.values() for t in tasks], arena_now)
                for i, bound in pods_by_node.items():
                    cluster.set_corunners(i, [t.kind for t, _ in bound], [t.intensity for t, _ in bound],
                                          [uid for _, uid in bound])
                await publish()
                slowed = ledger.tick(running, dt_arena)
                if ctx.stretch:
                    pods = {r.task_id: r.pod for r in runs if r.phase == "Running"}
                    for task_id in completions.advance([(live_id(t), s) for t, s in slowed], dt_arena, arena_now):
                        await arena.complete(pods[task_id])
                for task_id in replaced(runs, pod_of_task):
                    completions.restart(task_id)  # moved: its replacement starts the work again
                finished = finished_tasks(runs)
                for task_id in finished:
                    completions.finished(task_id, arena_now)
                done = len(finished)
                if int(now - t0) % 15 == 0:
                    agent = ""
                    if reliability is not None:
                        a = await _agent_counts(reliability.health)
                        agent = (f"; agent: nodes known {a['agent_nodes_known']:.0f}/"
                                 f"{a['agent_nodes_known'] + a['agent_nodes_unknown']:.0f}, hot "
                                 f"{a['agent_hot_nodes']:.0f}, moves proposed {a['agent_move_proposals']:.0f}")
                    ctx.progress(
                        f"{policy}: t={arena_now:.0f}s submitted {submitted}/{len(arrivals)}, "
                        f"running {sum(len(t) for t in running.values())}, done {done}, "
                        f"violation {ledger.violation_s:.0f} task-s{agent}"
                    )
                if submitted == len(arrivals) and done == len(arrivals):
                    break
                if now - t0 > horizon_wall + size.drain_s:
                    ctx.progress(f"{policy}: stopping at the drain limit with {len(arrivals) - done} tasks not done")
                    break
        runs = await arena.runs()
        out = ledger.metrics()
        out["completion_inflation"] = completions.completion_inflation()
        out.update(completions.start_delays())
        out["tasks_restarted"] = float(completions.restarts)
        out["lost_work_task_s"] = completions.lost_work_s
        if procs:
            out.update(await _extender_counts(procs[-1].health))
        if reliability is not None:
            out.update(await _agent_counts(reliability.health))
        stage = next((p for p in procs if p.name == "pod-pressure"), None)
        if stage is not None:
            out.update(await _pod_pressure_sources(stage.health))
        if policy == "orchestrator":
            out.update(await _action_counts(ctx.bootstrap, prefix, ctx.progress))
            out.update(await _pod_pressure_scores(ctx.bootstrap, prefix, truth))
            from contracts.models import FailureRiskV2, Proposal

            out.update(tally_proposals(await _decoded(ctx.bootstrap, prefix, Topic.PROPOSALS, Proposal)))
            if ctx.risk:
                out.update(tally_risk(await _decoded(ctx.bootstrap, prefix, Topic.RISK, FailureRiskV2)))
        out["placed"] = float(len({r.task_id for r in runs if r.node}))
        out["unfinished"] = float(len({r.task_id for r in runs} - finished_tasks(runs)))
        out["wall_s"] = time.monotonic() - started
        return out
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
        _stop(procs)
        await arena.delete()
        await api.close()
        from loadtests.procs import delete_topics

        with contextlib.suppress(Exception):
            await delete_topics(ctx.bootstrap, prefix)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="borgctl eval arena --live", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true")
    p.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                   help=f"comma-separated, of {', '.join(POLICIES)} (default {','.join(DEFAULT_POLICIES)})")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--synthetic", type=int, default=None, metavar="JOBS", help="synthetic arrivals instead of the trace"
    )
    p.add_argument("--task-events", type=Path, default=None)
    p.add_argument("--nodes", type=int, default=None, help="kwok nodes (quick 6, full 20)")
    p.add_argument("--horizon-s", type=float, default=None, help="arena seconds of arrivals (quick 600, full 1800)")
    p.add_argument("--extender-weight", type=int, default=None,
                   help="the extender's weight in the private kube-scheduler config (default: "
                        "deploy/scheduler-extender/kube-scheduler-config.yaml's)")
    p.add_argument("--extender-corunner-weight", type=float, default=0.0,
                   help="EXTENDER_WEIGHT_CORUNNER of the live extender, 0-1 (0 = off; > 0 watches the pods)")
    p.add_argument("--no-stretch", dest="stretch", action="store_false",
                   help="run every pod for its nominal time (slowdown accounted only), as before 2026-11-27")
    p.add_argument("--orchestrator-risk", action="store_true",
                   help="orchestrator pass: also run the cluster watcher and the risk stage (task events, failure "
                        "risk: the admission agent's risk evictions and queue holds)")
    p.add_argument("--orchestrator-load-term", action="store_true",
                   help="orchestrator pass: the extender's co-runner term on the pods' podpressure.v1 estimates "
                        "(EXTENDER_LOAD_TERM; needs --extender-corunner-weight > 0)")
    p.add_argument("--pod-estimates", choices=("counters", "rdt"), default="counters",
                   help="orchestrator pass: the nodes' per-pod data, counters only, or (rdt) with each pod's LLC "
                        "occupancy and memory traffic as resctrl monitoring reads them (shares on a saturated node, "
                        "--rdt-noise spread); the pod-pressure stage takes llc and membw from those")
    p.add_argument("--rdt-noise", type=float, default=0.1, metavar="S",
                   help="--pod-estimates rdt: log-normal spread of each pod's readings, one factor per pod and "
                        "resource (default 0.1, as offline)")
    p.add_argument("--move-slo-slowdown", type=float, default=None, metavar="X",
                   help="orchestrator pass: AGENT_RELIABILITY_MOVE_SLO_SLOWDOWN, the moves' threshold (default: the "
                        "agent's, 1.25 = the SLO; lower = a guard band, docs/arena.md)")
    p.add_argument("--extender-corunner-slo-slowdown", type=float, default=None, metavar="X",
                   help="orchestrator pass: EXTENDER_CORUNNER_SLO_SLOWDOWN, the slowdown the load term counts as a "
                        "crossing (default: the extender's, 1.25)")
    p.add_argument("--referee-max-disruptions", type=int, default=None, metavar="N",
                   help="orchestrator pass: REFEREE_MAX_DISRUPTIONS, disruptive actions per window (default: the "
                        "referee's, 5)")
    p.add_argument("--referee-disruption-window-s", type=float, default=300.0, metavar="S",
                   help="orchestrator pass: the disruption window in arena seconds, compressed like the arena's "
                        "time for REFEREE_DISRUPTION_WINDOW_S (default 300)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quiet", action="store_true")
    return p


async def run(args: argparse.Namespace) -> int:
    from borgctl.paths import bootstrap
    from services.regime.model import load_regime_model
    from services.runtime.model_watch import resolve
    from simulator.arena.arrivals import load_trace_tasks, synthetic_tasks, to_arrivals

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"[arena live {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        print(
            f"eval arena --live: unknown policy {unknown or policies}; choose from {', '.join(POLICIES)}",
            file=sys.stderr,
        )
        return 2
    if not 0.0 <= args.extender_corunner_weight <= 1.0 or (args.extender_weight is not None
                                                           and args.extender_weight < 0):
        print("eval arena --live: --extender-corunner-weight must be in [0, 1] and --extender-weight >= 0",
              file=sys.stderr)
        return 2
    if args.orchestrator_load_term and args.extender_corunner_weight <= 0:
        print("eval arena --live: --orchestrator-load-term needs --extender-corunner-weight > 0", file=sys.stderr)
        return 2
    for flag, value in (("--move-slo-slowdown", args.move_slo_slowdown),
                        ("--extender-corunner-slo-slowdown", args.extender_corunner_slo_slowdown)):
        if value is not None and not value > 1.0:
            print(f"eval arena --live: {flag} must be > 1 (a slowdown), got {value:g}", file=sys.stderr)
            return 2
    if args.rdt_noise < 0:
        print("eval arena --live: --rdt-noise must be >= 0", file=sys.stderr)
        return 2
    if (args.referee_max_disruptions is not None and args.referee_max_disruptions < 0) or not (
            args.referee_disruption_window_s > 0):
        print("eval arena --live: --referee-max-disruptions must be >= 0 and --referee-disruption-window-s > 0",
              file=sys.stderr)
        return 2
    size = QUICK if args.quick else FULL
    if args.nodes is not None or args.horizon_s is not None:
        if (args.nodes is not None and args.nodes < 1) or (args.horizon_s is not None and args.horizon_s <= 0):
            print("eval arena --live: --nodes and --horizon-s must be positive", file=sys.stderr)
            return 2
        size = dataclasses.replace(size, nodes=args.nodes or size.nodes, horizon_s=args.horizon_s or size.horizon_s)
    model = load_regime_model(resolve(ROOT / "models" / "regime"))
    kinds = list(model.card.get("data", {}).get("heldout_kinds") or [])
    if args.task_events is not None:
        if not args.task_events.is_dir():
            print(f"eval arena --live: {args.task_events} is not a directory", file=sys.stderr)
            return 2
        tasks = load_trace_tasks(args.task_events, 1)
    else:
        tasks = synthetic_tasks(args.synthetic or size.synthetic_jobs, seed=args.seed, span_s=size.horizon_s)
    arrivals, stats = to_arrivals(
        tasks,
        kinds=kinds,
        nodes=size.nodes,
        seed=args.seed,
        horizon_s=size.horizon_s,
        target_load=size.target_load,
        max_work_s=size.horizon_s / 4,
    )
    if not arrivals:
        print("eval arena --live: no arrivals", file=sys.stderr)
        return 2
    kube = await asyncio.to_thread(
        subprocess.run,
        ["bash", str(ROOT / "infra" / "kube" / "kube.sh"), "kubeconfig"],
        capture_output=True,
        text=True,
        check=False,
    )
    if kube.returncode != 0:
        print(f"eval arena --live: no local control plane ({kube.stderr.strip()}); run `borgctl up`", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    ctx = LiveContext(bootstrap(), Path(kube.stdout.strip()), args.out, args.seed, progress,
                      args.extender_weight, args.extender_corunner_weight, args.stretch, args.orchestrator_risk,
                      args.orchestrator_load_term, args.move_slo_slowdown, args.extender_corunner_slo_slowdown,
                      args.referee_max_disruptions, args.referee_disruption_window_s,
                      args.rdt_noise if args.pod_estimates == "rdt" else None)
    progress(
        f"{len(arrivals)} arrivals over {size.horizon_s:.0f} arena s ({size.time_scale:.0f}x faster than "
        f"that in wall time) on {size.nodes} kwok nodes; held-out kinds {', '.join(kinds)}"
    )
    results: list[dict[str, Any]] = []
    summary: dict[str, dict[str, float]] = {}
    for policy in policies:
        m = await run_policy(policy, arrivals, size, ctx)
        summary[policy] = m
        results += [
            {
                "bench": "arena-live",
                "case": policy,
                "metric": k,
                "value": v,
                "unit": "task_s" if k.endswith("_task_s") else "s" if k == "wall_s" else "ratio",
            }
            for k, v in m.items()
            if math.isfinite(v)
        ]
        progress(
            f"{policy}: SLO violation {m['slo_violation_task_s']:.0f} task-s, utilisation "
            f"{m['mean_cpu_utilisation']:.3f}, {m['placed']:.0f} placed, {m['wall_s']:.0f}s"
        )
    from loadtests.bench_format import machine

    doc = {
        "machine": machine(),
        "results": results,
        "details": {
            "arrivals": stats.as_dict(),
            "size": size.__dict__,
            "model_version": model.version,
            "heldout_kinds": kinds,
            "extender_weight": args.extender_weight,
            "extender_corunner_weight": args.extender_corunner_weight,
            "orchestrator_risk": args.orchestrator_risk,
            "orchestrator_load_term": args.orchestrator_load_term,
            "orchestrator_settings": orchestrator_overrides(ctx, size.time_scale),
            "pod_estimates": args.pod_estimates,
            "rdt_noise": ctx.rdt_noise,
            "summary": summary,
            "completion": ("stretched: each pod completes when its work, worn down by its slowdown, is done"
                           if args.stretch else
                           "nominal: pods run for their nominal time; slowdown is accounted, not applied"),
        },
    }
    (args.out / "results.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    progress(f"wrote {args.out / 'results.json'}")
    return 0


async def _run_until_terminated(args: argparse.Namespace) -> int:
    """``run``, cancelled by SIGTERM / SIGINT so every pass's clean-up (its kwok nodes, namespace, private
    scheduler, services and topics) still runs; a stopped run otherwise left them behind."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        return await run(args)
    except asyncio.CancelledError:
        print("eval arena --live: stopped; the run's nodes, processes and topics were cleaned up", file=sys.stderr)
        return 130
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return asyncio.run(_run_until_terminated(args))


if __name__ == "__main__":
    sys.exit(main())
