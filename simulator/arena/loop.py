"""The arena loop: discrete ticks over N nodes; arrivals placed by a policy; interference slows tasks.

Per tick of ``tick_s`` (time ``T``):

1. tasks submitted up to ``T`` join the pending queue (FIFO); the policy places pending tasks (at most
   ``max_attempts`` tries per tick; a task no node takes waits, as a pending pod does);
2. each task's true slowdown is the simulator's model on its node's co-runners (the worst co-runner,
   never summed: :func:`simulator.workloads.task_slowdowns`);
3. a task with slowdown ``s`` does ``tick_s / s`` seconds of its work this tick, so it finishes ``s``
   times later than alone (a task finishing inside the tick leaves at its exact finish time; its share
   of the tick is what is accounted);
4. when the policy reads model outputs (``extender``), every node's counters for the tick come from
   :class:`~simulator.arena.world.ArenaCluster` and go through the live feature/model/abstention path
   (:class:`~simulator.arena.world.RegimeObserver`); the labels are read at the next tick's decisions
   (the live extender also acts on the last published window).

Accounting (``ArenaOutcome``): per finished task, slowdown = running time / work; SLO violation
task-seconds = running seconds of latency-sensitive tasks while their slowdown exceeded
``slo_slowdown``; utilisation = requested CPU of running tasks / cluster CPU, averaged over the arrival
horizon (the same window for every policy); nodes used = nodes with at least one task, averaged
likewise. After the horizon the loop drains (no arrivals) until empty or ``drain_factor`` × horizon.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import numpy as np

from simulator.arena.arrivals import Arrival
from simulator.arena.aware import SLO_SLOWDOWN, ArenaView, TaskPod
from simulator.arena.kube_default import NodeResources
from simulator.arena.policies import PlacementPolicy
from simulator.arena.world import ArenaCluster, LabelObserver, arena_pod_uid
from simulator.cluster import TickBatch
from simulator.workloads import CLASS_INDEX, excess, task_slowdowns

NODE_MILLI_CPU: Final = 16_000
NODE_MEMORY: Final = 64 << 30


@dataclass(slots=True)
class _Running:
    arrival: Arrival
    pod: TaskPod
    node: int
    start_s: float
    remaining_s: float
    slowdown: float = 1.0
    violation_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Finished:
    arrival: Arrival
    node: int
    start_s: float
    finish_s: float
    violation_s: float

    @property
    def slowdown(self) -> float:
        return (self.finish_s - self.start_s) / self.arrival.work_s


@dataclass
class ArenaOutcome:
    policy: str
    ticks: int
    tick_s: float
    horizon_ticks: int
    finished: list[Finished]
    unfinished: int
    unplaced: int
    decisions: int
    placements: int
    util: np.ndarray
    """Requested-CPU utilisation per tick (0–1 of the cluster)."""
    nodes_used: np.ndarray
    useful: np.ndarray
    """Requested CPU of running tasks times their progress rate (1 / slowdown) per tick, 0–1 of the cluster."""
    violation_s: np.ndarray
    """SLO-violation task-seconds accrued per tick."""
    policy_cpu_s: float
    model_cpu_s: float
    observer: LabelObserver | None = None
    extra: dict[str, float] = field(default_factory=dict)
    node_load: np.ndarray | None = None
    """Per tick and node: requested CPU and memory as fractions of the node, shape (ticks, nodes, 2)
    (the actual load the forecast section of the report scores forecasts against)."""


Reporter = Callable[[str], None]


class Controller(Protocol):
    """Acts on the cluster between ticks (the ``orchestrator``'s agents and referee).

    ``step`` runs at the start of every tick, before placement: it may evict (``Arena.evict``), hold
    arrivals back from ``pending`` and put them back later; ``extra`` is merged into the metrics.
    """

    def step(self, tick: int, t_s: float, arena: Arena, pending: deque[Arrival]) -> None: ...

    def extra(self, outcome_ticks: int, tick_s: float) -> dict[str, float]: ...

    def held(self) -> int:
        """Arrivals kept out of ``pending`` right now (admission on hold)."""
        ...


def pod_of(a: Arrival) -> TaskPod:
    return TaskPod(max(1, round(a.cpu * NODE_MILLI_CPU)), max(1, round(a.memory * NODE_MEMORY)),
                   a.workload_class, a.pressure, a.latency_sensitive, a.task_id, a.job_id)


class Arena:
    """One run of one policy over ``arrivals`` on ``nodes`` identical nodes."""

    def __init__(self, arrivals: Sequence[Arrival], nodes: int, policy: PlacementPolicy, view: ArenaView, *,
                 horizon_s: float, tick_s: float = 10.0, cluster: ArenaCluster | None = None,
                 observer: LabelObserver | None = None, max_attempts: int = 200, drain_factor: float = 2.0,
                 slo_slowdown: float = SLO_SLOWDOWN, controller: Controller | None = None) -> None:
        if nodes < 1 or tick_s <= 0 or horizon_s <= 0:
            raise ValueError("nodes, tick_s and horizon_s must be positive")
        if view.nodes != nodes:
            raise ValueError(f"view has {view.nodes} nodes, arena {nodes}")
        self.arrivals = sorted(arrivals, key=lambda a: (a.submit_s, a.task_id))
        self.n = nodes
        self.policy = policy
        self.view = view
        self.tick_s = tick_s
        self.horizon_ticks = max(1, math.ceil(horizon_s / tick_s))
        self.max_ticks = max(self.horizon_ticks, math.ceil(horizon_s * drain_factor / tick_s))
        self.cluster = cluster
        self.observer = observer
        self.max_attempts = max_attempts
        self.slo = slo_slowdown
        self.resources = [NodeResources(NODE_MILLI_CPU, NODE_MEMORY) for _ in range(nodes)]
        self.residents: list[list[_Running]] = [[] for _ in range(nodes)]
        self._dirty: set[int] = set()
        self.controller = controller
        self.last_batch: TickBatch | None = None
        """The counters of the last observed tick (what a node agent last published)."""
        self.evictions = 0

    # ------------------------------------------------------------------ node state
    def _refresh(self, i: int) -> None:
        """Recompute the true slowdown of every task on node ``i`` and the view the policies read."""
        tasks = self.residents[i]
        classes = np.array([CLASS_INDEX[t.arrival.workload_class] for t in tasks], dtype=np.int64)
        pressures = np.array([t.arrival.pressure for t in tasks], dtype=np.float64).reshape(-1, 4)
        ex = excess(pressures)
        slow = task_slowdowns([t.arrival.workload_class for t in tasks], pressures)
        for t, s in zip(tasks, slow.tolist(), strict=True):
            t.slowdown = s
        self.view.classes[i], self.view.excess[i], self.view.slowdown[i] = classes, ex, slow
        self.view.latency_sensitive[i] = np.array([t.arrival.latency_sensitive for t in tasks], dtype=bool)
        self.view.task_ids[i] = [t.arrival.task_id for t in tasks]
        self._dirty.add(i)

    def _place(self, t_s: float, pending: deque[Arrival]) -> tuple[int, int, float]:
        decisions = placed = 0
        cpu = 0.0
        kept: deque[Arrival] = deque()
        while pending:
            a = pending.popleft()
            if decisions >= self.max_attempts:
                kept.append(a)
                continue
            pod = pod_of(a)
            started = time.process_time()
            i = self.policy.choose(pod, self.resources)
            cpu += time.process_time() - started
            decisions += 1
            if i is None:
                kept.append(a)
                continue
            self.resources[i] = self.resources[i].add(pod)
            self.residents[i].append(_Running(a, pod, i, t_s, a.work_s))
            self._refresh(i)
            placed += 1
        pending.extend(kept)
        return decisions, placed, cpu

    def _observe(self, tick: int) -> None:
        if self.cluster is None or self.observer is None:
            return
        for i in sorted(self._dirty):
            tasks = self.residents[i]
            self.cluster.set_corunners(i, [t.arrival.kind for t in tasks], [t.arrival.intensity for t in tasks],
                                       [arena_pod_uid(t.arrival.task_id, t.arrival.job_id) for t in tasks])
        self._dirty.clear()
        batch = self.cluster.tick()
        self.observer.observe(batch)
        self.last_batch = batch
        self.view.labels = list(self.observer.labels)
        self.view.now_ms = self.cluster.start_ms + (tick + 1) * self.cluster.interval_ms

    def evict(self, i: int, task: _Running) -> Arrival:
        """Stop ``task`` on node ``i`` (its work so far is lost: a replacement pod starts over)."""
        self.residents[i] = [t for t in self.residents[i] if t is not task]
        self.resources[i] = self.resources[i].remove(task.pod)
        self._refresh(i)
        self.evictions += 1
        return task.arrival

    def resize(self, i: int, task: _Running, pod: TaskPod) -> None:
        """Replace a running task's requests (an in-place resize: the memory balloon)."""
        self.resources[i] = self.resources[i].remove(task.pod).add(pod)
        task.pod = pod

    # ------------------------------------------------------------------ run
    def run(self, progress: Reporter | None = None) -> ArenaOutcome:
        pending: deque[Arrival] = deque()
        finished: list[Finished] = []
        util, used, viol, useful = [], [], [], []
        node_load: list[list[tuple[float, float]]] = []
        decisions = placements = 0
        policy_cpu = 0.0
        nxt = 0
        step = max(1, self.horizon_ticks // 5)
        if self.cluster is not None:
            self.view.now_ms = self.cluster.start_ms
        tick = held = 0
        while tick < self.max_ticks:
            t_s = tick * self.tick_s
            while nxt < len(self.arrivals) and self.arrivals[nxt].submit_s <= t_s:
                pending.append(self.arrivals[nxt])
                nxt += 1
            if self.controller is not None:
                self.controller.step(tick, t_s, self, pending)
            d, p, c = self._place(t_s, pending)
            decisions, placements, policy_cpu = decisions + d, placements + p, policy_cpu + c
            util.append(sum(r.requested_milli_cpu for r in self.resources) / (NODE_MILLI_CPU * self.n))
            node_load.append([(r.requested_milli_cpu / NODE_MILLI_CPU, r.requested_memory / NODE_MEMORY)
                              for r in self.resources])
            used.append(sum(1 for r in self.residents if r))
            useful.append(sum(t.pod.milli_cpu / t.slowdown for r in self.residents for t in r)
                          / (NODE_MILLI_CPU * self.n))
            viol.append(self._advance(t_s, finished))
            self._observe(tick)
            tick += 1
            if progress is not None and tick % step == 0 and tick <= self.horizon_ticks:
                progress(f"{self.policy.name}: tick {tick}/{self.horizon_ticks}, {placements:,} placed, "
                         f"{len(pending):,} pending, {len(finished):,} finished")
            held = self.controller.held() if self.controller is not None else 0
            if (tick >= self.horizon_ticks and nxt >= len(self.arrivals) and not pending and not held
                    and not any(self.residents)):
                break
        running = sum(len(r) for r in self.residents)
        model_cpu = self.observer.cpu_s if self.observer is not None else 0.0
        extra = {"evictions": float(self.evictions)}
        if self.controller is not None:
            extra |= self.controller.extra(tick, self.tick_s)
        return ArenaOutcome(self.policy.name, tick, self.tick_s, self.horizon_ticks, finished, running,
                            len(pending) + len(self.arrivals) - nxt + held, decisions, placements, np.asarray(util),
                            np.asarray(used, dtype=np.float64), np.asarray(useful), np.asarray(viol), policy_cpu,
                            model_cpu, self.observer, extra,
                            np.asarray(node_load, dtype=np.float64).reshape(len(node_load), self.n, 2))

    def _advance(self, t_s: float, finished: list[Finished]) -> float:
        """One tick of work on every node; returns the SLO-violation task-seconds accrued."""
        dt = self.tick_s
        accrued = 0.0
        for i, tasks in enumerate(self.residents):
            if not tasks:
                continue
            left: list[_Running] = []
            for t in tasks:
                s = t.slowdown
                if t.remaining_s * s <= dt:
                    ran = t.remaining_s * s
                    t.remaining_s = 0.0
                else:
                    ran = dt
                    t.remaining_s -= dt / s
                if t.arrival.latency_sensitive and s > self.slo:
                    t.violation_s += ran
                    accrued += ran
                if t.remaining_s <= 0.0:
                    finished.append(Finished(t.arrival, i, t.start_s, t_s + ran, t.violation_s))
                    self.resources[i] = self.resources[i].remove(t.pod)
                else:
                    left.append(t)
            if len(left) != len(tasks):
                self.residents[i] = left
                self._refresh(i)
        return accrued
