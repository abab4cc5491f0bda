"""``orchestrator``: the extender's placement plus the three agents and the referee acting on the arena.

Every ``every_ticks`` ticks (default 1: the regime stage publishes a window every 10 s, the live agents
react to each input within seconds) :class:`Orchestrator` does what the live decision plane does,
through the same pure code, without Kafka or Kubernetes:

1. **inputs → ClusterView** (``services.agents.view``), as the agents' consumer would have it: a
   RegimeLabelV2 per node from the :class:`~simulator.arena.world.RegimeObserver`'s latest label
   (``unknown`` stays ``unknown``), a NodeState per node (CPU / memory utilisation of the tick's
   simulated counters), a SCHEDULE TaskEvent per running task and a terminal one when it leaves, and
   ClusterState (queue health by the cluster watcher's own thresholds) cluster-wide and per namespace.
   Namespaces: ``arena-ls`` (latency-sensitive) and ``arena-batch``. The arena has no anomaly or
   risk stage and its jobs are not Deployments: those inputs are absent (an optional ``risk`` hook
   can fill task risk in, the tests use it);
2. **agents**: ``reliability_policy`` / ``efficiency_policy`` / ``admission_policy`` ``evaluate`` with
   their default settings on ``view.everything()``; a proposal identical to one sent less than
   ``repropose_s`` ago is not re-sent (``services.agents.wiring.Agent._is_news``);
3. **referee**: the tick's proposals grouped per target (the 500 ms decision window is shorter than a
   tick), ``services.referee.policy.resolve`` in target order with the given RefereeSettings (default: the
   live defaults of min score, cooldown, hysteresis, rate limit, disruption budget), then ``settle`` with the
   arena's outcome;
4. **acting** (what the actuator would write, and what kube-scheduler then does with it):

   * ``taint`` → the node's taint ``(key, effect)`` is set for ``taint_ttl_s``; ``NoSchedule`` removes the
     node at the Filter, ``PreferNoSchedule`` is scored by TaintToleration (weight 3, reverse-normalised
     count of intolerable PreferNoSchedule taints: kubernetes v1.36.3 ``tainttoleration`` and
     ``helper.DefaultNormalizeScore``). The live referee never removes a taint; the arena lets one expire
     so a node is not lost for the rest of the run after the model stops calling it contended (while it
     still does, the agent re-proposes and the taint is set again). The same taint already present is
     ``refused`` ("no change"), as the actuator does;
   * ``cordon`` / ``consolidate`` → the node is unschedulable (NodeUnschedulable Filter) for
     ``cordon_ttl_s``; its tasks keep running and drain as they finish;
   * ``evict`` → the pod stops and its task is re-queued at the end of the pending queue; the work done
     is lost (a replacement pod starts over). PDB-like rule: the last running task of a job is never
     evicted (``refused``, as a PodDisruptionBudget with ``maxUnavailable: 1`` would);
   * ``hold_admission`` → for ``hold_s`` no new task of the namespace enters the pending queue (the
     admission webhook rejects new pods; they are resubmitted when the hold lifts); pods already pending
     still schedule;
   * ``memory_balloon`` → the pod's memory request shrinks in place (``payload.memory_request_mib``);
   * Deployment actions (``scale_out``, ``replicate``, ``scale_in``, ``throttle``, ``deprioritize``) cannot
     arise (no Deployments) and would be ``refused``.

:class:`OrchestratorPolicy` places like :class:`~simulator.arena.aware.ExtenderPolicy` (default Filter,
extender filter, ``fit + balanced + weight × 10 × extender score``) with the node taints and cordons
applied: unschedulable and NoSchedule nodes filtered, ``+ 3 × TaintToleration``.
"""

from __future__ import annotations

import random
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final, Literal

import numpy as np

from contracts.models import (
    UNKNOWN_REGIME,
    WORKLOAD_CLASSES,
    ClusterState,
    NodeState,
    Proposal,
    RegimeLabelV2,
    TaskEvent,
)
from contracts.topics import Topic
from featurelib.pod import WINDOW_S, pod_features
from services.agents import admission_policy, efficiency_policy, interference_policy, reliability_policy
from services.agents.clearance import Clearance
from services.agents.interference_policy import MoveSettings, NodeLoad, PodLoad
from services.agents.proposals import Candidate
from services.agents.settings import AdmissionSettings, EfficiencySettings, ReliabilitySettings
from services.agents.view import ClusterView
from services.cluster_watcher.model import queue_health
from services.cluster_watcher.settings import WatcherSettings
from services.referee.policy import RefereeState, resolve, settle
from services.referee.settings import RefereeSettings
from services.scheduler_extender.corunner import load_harm
from services.scheduler_extender.scoring import NodeCard, RegimeIn, ScoringConfig, score_with_penalty
from simulator.arena.arrivals import Arrival
from simulator.arena.aware import EXTENDER_SCALE, EXTENDER_WEIGHT, ArenaView, ExtenderPolicy, TaskPod
from simulator.arena.kube_default import NodeResources, PodRequest, fits, score
from simulator.arena.world import MONITORED, held_shares
from simulator.cluster import node_specs_for, workload_rates
from simulator.workloads import CLASS_INDEX, CLASS_PRESSURE_GUESS
from training.pod_pressure import pod_counts, train

if TYPE_CHECKING:
    from simulator.arena.loop import Arena

NS_LS: Final = "arena-ls"
NS_BATCH: Final = "arena-batch"
CLUSTER: Final = "arena"
TAINT_WEIGHT: Final = 3  # TaintToleration's weight in the default profile (default_plugins.go)
MAX_NODE_SCORE: Final = 100
VIOLATION_CAUSES: Final = ("missed", "move_found", "no_eligible", "no_relief", "no_target", "after_own_move")
"""Why a latency-sensitive task over the SLO was not moved away (docs/arena.md, "Where the violation left comes
from"): its estimates put it under the SLO; a move was found (it waits for the referee's budget or the round's
cap); its node is hot but no pod there may move, none relieves it alone, or no node takes the one that would;
it was itself moved before and is slowed again."""
Outcome = Literal["applied", "refused"]
RiskHook = Callable[[ClusterView, "Arena", int], None]
"""Fills ``view.task_risk`` / ``view.node_risk`` before the agents run (the arena has no risk stage)."""


def namespace_of(a: Arrival) -> str:
    return NS_LS if a.latency_sensitive else NS_BATCH


def task_key(a: Arrival) -> str:
    """Kubernetes-style task id ``<namespace>/<pod>`` (what ``proposals.pod_ref`` splits)."""
    return f"{namespace_of(a)}/t{a.task_id}"


@dataclass(frozen=True)
class OrchestratorConfig:
    every_ticks: int = 1
    taint_ttl_s: float = 300.0
    cordon_ttl_s: float = 600.0
    hold_s: float = 60.0
    extender_weight: int = EXTENDER_WEIGHT
    actions: frozenset[str] | None = None
    """Action kinds the arena applies (None: all); the others are ``refused`` as an actuator that may not."""
    moves: MoveSettings | None = None
    """Corrective moves (``services.agents.interference_policy``) on per-pod load estimates; None: off."""
    load_term: bool = False
    """Placement reads the per-pod estimates too (``corunner.load_harm`` instead of the class table)."""
    pod_noise: float = 0.2
    """Per-pod pressure estimate = true pressure × exp(N(0, pod_noise)) per resource (:class:`PodEstimates`)."""
    noise_seed: int = 0
    min_age_s: float = 10.0
    """A pod's counters are read once it has run this long (one window)."""
    victims: Literal["predicted", "cpi"] = "predicted"
    """Moves: who suffers, from the estimated pressures (predicted) or from each pod's IPC against its job's
    (cpi; needs counter estimates)."""
    cpi_window: int = 1
    """victims cpi: a pod's IPC is the mean of its last this many windows (:class:`JobCpi`)."""
    cpi_reference: Literal["samples", "pods"] = "samples"
    """victims cpi: the job's reference IPC from its pods' samples or from its pods' means (:class:`JobCpi`)."""
    cpi_quantile: float = 0.9
    """victims cpi: the quantile of that reference taken as the job's undisturbed IPC."""
    job_prior: bool = False
    """A pod not measured yet is guessed at the mean estimate of its job's measured pods (the pods of a job run
    the same code), before falling back on its class's guess."""
    cpi_clearance: float | None = None
    """victims cpi: blame by history (:mod:`services.agents.clearance`) with this limit; None: off. The moves'
    ``MoveSettings.attribute`` must be set for the rule to read it."""


@dataclass
class NodeControl:
    """What the referee has written on the arena's nodes (taints, cordons) and namespaces (holds)."""

    nodes: int
    taints: list[dict[tuple[str, str], tuple[str, float]]] = field(default_factory=list)
    """Per node: (key, effect) → (value, until_s)."""
    cordoned_until: list[float] = field(default_factory=list)
    holds: dict[str, float] = field(default_factory=dict)
    """Namespace → until_s."""

    def __post_init__(self) -> None:
        self.taints = self.taints or [{} for _ in range(self.nodes)]
        self.cordoned_until = self.cordoned_until or [float("-inf")] * self.nodes

    def expire(self, t_s: float) -> None:
        for taints in self.taints:
            for k in [k for k, (_, until) in taints.items() if until <= t_s]:
                del taints[k]
        for ns in [ns for ns, until in self.holds.items() if until <= t_s]:
            del self.holds[ns]

    def schedulable(self, i: int, t_s: float) -> bool:
        return self.cordoned_until[i] <= t_s and not any(e == "NoSchedule" for _, e in self.taints[i])

    def prefer_no_schedule(self, i: int) -> int:
        return sum(1 for _, e in self.taints[i] if e == "PreferNoSchedule")


class CounterEstimator:
    """Pressure estimates from simulated per-cgroup counters (``training.pod_pressure``): the node's residents run
    through the simulator's per-workload counter model (``simulator.cluster.workload_rates``, one of its SKUs per
    node), each measured pod's 10 s counts become ``featurelib.pod`` features, and a regressor trained on the
    regime model's training kinds only predicts its pressure."""

    def __init__(self, train_kinds: Sequence[str], seed: int, pods: int = 8000) -> None:
        self.model = train(train_kinds, extended=True, pods=pods, seed=0)
        self.specs = node_specs_for(seed)
        self._rng = np.random.default_rng(seed)

    def _rates(self, node: int, residents: Sequence[Arrival]) -> np.ndarray:
        """Counter rates per resident (rows) on this node's SKU, co-runners' slowdown included."""
        inten = np.array([a.intensity for a in residents], dtype=np.float64)
        pressures = np.array([a.pressure for a in residents], dtype=np.float64).reshape(len(residents), 4)
        per, _, _, _ = workload_rates(self.specs[node % len(self.specs)], [a.kind for a in residents], inten,
                                      pressures, self._rng)
        return per

    def estimate(self, node: int, residents: Sequence[Arrival],
                 which: Sequence[int]) -> list[tuple[float, float, float, float]]:
        per = self._rates(node, residents)
        x = np.array([pod_features(pod_counts(per[k], self._rng), WINDOW_S) for k in which])
        return [(float(a), float(b), float(c), float(d)) for a, b, c, d in self.model.predict(x).tolist()]

    def ipc(self, node: int, residents: Sequence[Arrival]) -> list[float]:
        """Each resident's IPC over the current window, from its simulated counts (co-runners' slowdown included)."""
        out = []
        for rates in self._rates(node, residents):
            c = pod_counts(rates, self._rng)
            out.append(c["instructions"] / c["cycles"] if c["cycles"] > 0 else 0.0)
        return out


def monitored_readings(pressures: np.ndarray, which: Sequence[int], noise: float,
                       rng: np.random.Generator) -> np.ndarray:
    """What per-cgroup LLC-occupancy and memory-bandwidth monitoring (Intel RDT CMT/MBM, AMD PQoS, read through
    resctrl's monitoring groups) shows of residents ``which``, on the scale of their llc and membw pressure
    (rows of ``pressures``: every resident of the node). A pod holds its demand while the node's residents together
    demand no more than the resource (sum <= 1); beyond that each holds its proportional share, so under
    saturation a reading understates the demand. Times ``exp(N(0, noise))`` per reading (sampling, and the map
    from bytes to pressure), clipped to [0, 1]."""
    out = held_shares(pressures)[list(which)] * np.exp(rng.normal(0.0, noise, size=(len(which), len(MONITORED))))
    return np.asarray(np.clip(out, 0.0, 1.0))


RESCALE_MIN_READING: Final = 0.05
"""``rescaled``: the calm-read residents' readings must sum to this much of the resource to scale the others by."""


class MonitoredEstimator(CounterEstimator):
    """:class:`CounterEstimator` with llc and membw read from per-cgroup resource monitoring
    (:func:`monitored_readings`) instead of estimated from counters; core and frontend still from the counter
    regressor (no hardware meters them per cgroup). A what-if for nodes whose CPUs have the monitoring: the
    counters' error on unseen kinds is largest on exactly those two (docs/arena.md, "How close do per-pod counters
    get?").

    ``reading``: ``once`` — a pod's llc and membw are its first reading (drawn with fresh noise), kept for its life;
    ``unsaturated`` — every pod is re-read each window (:meth:`observe`) and a reading counts as its demand only
    while the node's readings of that resource sum below ``saturated_at`` (a saturated node's readings are shares);
    a pod's estimate is the mean of those, else (never seen unsaturated) the larger of its highest reading (a lower
    bound of the demand) and the counter regressor's estimate. There the noise is one persistent factor per pod and
    resource (the map from bytes to the pressure scale does not average away over windows). ``rescaled`` — as
    ``unsaturated``, and a pod never read calm but read on a saturated node beside residents that were read calm
    takes its reading times the node's oversubscription estimated from them (their calm demand over their share
    now): a proportional share, as :func:`monitored_readings` models it, scales every resident's reading alike.
    ``window`` — what the ``pod-pressure`` stage does with resctrl readings (``services/pod_pressure/monitored.py``):
    stateless, a pod's llc and membw are its latest window's reading while its node's readings sum below
    ``saturated_at``, else the larger of that reading and the counter regressor's estimate.
    """

    def __init__(self, train_kinds: Sequence[str], seed: int, noise: float, pods: int = 8000,
                 reading: Literal["once", "unsaturated", "rescaled", "window"] = "once",
                 saturated_at: float = 0.9) -> None:
        if noise < 0:
            raise ValueError(f"monitoring noise must be >= 0, got {noise}")
        if not 0.0 < saturated_at <= 1.0:
            raise ValueError(f"saturated_at must be in (0, 1], got {saturated_at}")
        super().__init__(train_kinds, seed, pods)
        self.noise = noise
        self.reading = reading
        self.saturated_at = saturated_at
        self._monitor_rng = np.random.default_rng(seed + 1)
        self._factor: dict[int, np.ndarray] = {}
        self._calm_sum: dict[int, np.ndarray] = {}
        self._calm_n: dict[int, np.ndarray] = {}
        self._highest: dict[int, np.ndarray] = {}
        self._counted: dict[int, np.ndarray] = {}
        self._scaled_sum: dict[int, np.ndarray] = {}
        self._scaled_n: dict[int, np.ndarray] = {}
        self._latest: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        """``window``: a pod's latest reading and whether its node was calm in each resource then."""

    @property
    def rereads(self) -> bool:
        return self.reading in ("unsaturated", "rescaled", "window")

    def estimate(self, node: int, residents: Sequence[Arrival],
                 which: Sequence[int]) -> list[tuple[float, float, float, float]]:
        counted = np.asarray(super().estimate(node, residents, which), dtype=np.float64).reshape(len(which), 4)
        if self.rereads:
            for k, row in zip(which, counted, strict=True):
                tid = residents[k].task_id
                self._counted[tid] = row[list(MONITORED)].copy()
                row[list(MONITORED)] = self.monitored(tid)
        else:
            pressures = np.array([a.pressure for a in residents], dtype=np.float64).reshape(len(residents), 4)
            counted[:, list(MONITORED)] = monitored_readings(pressures, which, self.noise, self._monitor_rng)
        return [(float(a), float(b), float(c), float(d)) for a, b, c, d in counted.tolist()]

    def observe(self, residents: Sequence[Arrival], which: Sequence[int]) -> None:
        """One window's readings of a node (``reading="unsaturated"``): every resident is read (the node's sum tells
        saturation); the pods ``which`` (old enough to be measured) keep what the window showed."""
        if not residents:
            return
        pressures = np.array([a.pressure for a in residents], dtype=np.float64).reshape(len(residents), 4)
        factors = np.array([self._factor_of(a.task_id) for a in residents])
        read = monitored_readings(pressures, range(len(residents)), 0.0, self._monitor_rng) * factors
        read = np.clip(read, 0.0, 1.0)
        calm = read.sum(axis=0) < self.saturated_at
        scale = self._oversubscription(residents, read) if self.reading == "rescaled" else None
        zero = np.zeros(len(MONITORED))
        for k in which:
            tid = residents[k].task_id
            if self.reading == "window":
                self._latest[tid] = (read[k].copy(), calm.copy())
                continue
            self._calm_sum[tid] = self._calm_sum.get(tid, zero) + np.where(calm, read[k], 0.0)
            self._calm_n[tid] = self._calm_n.get(tid, zero) + calm
            self._highest[tid] = np.maximum(self._highest.get(tid, zero), read[k])
            if scale is not None:
                scaled = ~calm & np.isfinite(scale)
                self._scaled_sum[tid] = self._scaled_sum.get(tid, zero) + np.where(scaled, read[k] * scale, 0.0)
                self._scaled_n[tid] = self._scaled_n.get(tid, zero) + scaled

    def _oversubscription(self, residents: Sequence[Arrival], read: np.ndarray) -> np.ndarray:
        """Per monitored resource: the residents' calm demand over their reading now, summed over those read calm
        before (``nan`` where none was, or their readings are too small to scale by); at least 1."""
        known, now = np.zeros(len(MONITORED)), np.zeros(len(MONITORED))
        for k, a in enumerate(residents):
            n = self._calm_n.get(a.task_id)
            if n is None:
                continue
            has = n > 0
            known += np.where(has, self._calm_sum[a.task_id] / np.maximum(n, 1.0), 0.0)
            now += np.where(has, read[k], 0.0)
        out = np.full(len(MONITORED), np.nan)
        enough = now >= RESCALE_MIN_READING
        out[enough] = np.maximum(1.0, known[enough] / now[enough])
        return out

    def monitored(self, task_id: int) -> np.ndarray:
        """llc and membw of a pod from its readings so far (``reading`` unsaturated or rescaled: the class
        docstring)."""
        zero = np.zeros(len(MONITORED))
        if self.reading == "window":
            counted = self._counted.get(task_id, zero)
            latest = self._latest.get(task_id)
            if latest is None:
                return np.asarray(counted)
            read, node_calm = latest
            return np.asarray(np.where(node_calm, read, np.maximum(read, counted)))
        n = self._calm_n.get(task_id, zero)
        calm = self._calm_sum.get(task_id, zero) / np.maximum(n, 1.0)
        bound = np.maximum(self._highest.get(task_id, zero), self._counted.get(task_id, zero))
        m = self._scaled_n.get(task_id, zero)
        scaled = np.clip(self._scaled_sum.get(task_id, zero) / np.maximum(m, 1.0), 0.0, 1.0)
        return np.asarray(np.where(n > 0, calm, np.where(m > 0, scaled, bound)))

    def refined(self, task_id: int, known: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        """``known`` with llc and membw from the pod's readings so far."""
        out = list(known)
        for r, v in zip(MONITORED, self.monitored(task_id).tolist(), strict=True):
            out[r] = float(v)
        return out[0], out[1], out[2], out[3]

    def _factor_of(self, task_id: int) -> np.ndarray:
        f = self._factor.get(task_id)
        if f is None:
            f = self._factor[task_id] = np.exp(self._monitor_rng.normal(0.0, self.noise, size=len(MONITORED)))
        return f


class JobCpi:
    """Observed slowdown of a pod from its IPC against its job's other pods (the CPI² idea: Zhang et al., EuroSys
    2013): baseline = the ``quantile`` of the job's recent IPC, slowdown = baseline / the pod's IPC now, at least 1
    (the pods of a job run the same code, so the job's best IPC is what an undisturbed pod reaches).

    "The pod's IPC now" is the mean of its last ``window`` samples: a window's IPC carries count and phase noise
    that is independent from window to window (unlike a kind's bias), so a few windows average it away where one
    window's low draw would name a pod that is not slowed at all.

    The job's reference (``reference``): ``samples`` — the quantile of its last ``keep`` per-window samples of any
    of its pods, answered once there are ``min_samples`` (so a job's single pod is judged against its own noise and
    looks unslowed); ``pods`` — the quantile of its pods' own ``window`` means (the last ``keep`` pods seen), answered
    only when ``min_samples`` distinct pods were measured: a job too small to compare gives no answer, and the
    reference carries no more window noise than the pod it is compared with.
    """

    def __init__(self, quantile: float = 0.9, keep: int = 200, min_samples: int = 3, window: int = 1,
                 reference: Literal["samples", "pods"] = "samples") -> None:
        if not 0.0 < quantile <= 1.0 or keep < 1 or min_samples < 1 or window < 1:
            raise ValueError("need 0 < quantile <= 1 and keep, min_samples, window >= 1")
        self.quantile = quantile
        self.keep = keep
        self.min_samples = min_samples
        self.window = window
        self.reference = reference
        self.samples: dict[int, deque[float]] = {}
        self.pods: dict[int, dict[int, None]] = {}  # job → its last ``keep`` pods, oldest first
        self.recent: dict[int, deque[float]] = {}

    def record(self, job: int, task_id: int, ipc: float) -> None:
        self.samples.setdefault(job, deque(maxlen=self.keep)).append(ipc)
        self.recent.setdefault(task_id, deque(maxlen=self.window)).append(ipc)
        pods = self.pods.setdefault(job, {})
        pods.pop(task_id, None)
        pods[task_id] = None
        if len(pods) > self.keep:
            gone = next(iter(pods))
            del pods[gone]
            self.recent.pop(gone, None)

    def ipc_now(self, task_id: int) -> float | None:
        mine = self.recent.get(task_id)
        return None if not mine else sum(mine) / len(mine)

    def _baseline(self, job: int) -> float | None:
        if self.reference == "pods":
            means = [m for t in self.pods.get(job, ()) if (m := self.ipc_now(t)) is not None]
            values = np.asarray(means, dtype=np.float64)
        else:
            values = np.fromiter(self.samples.get(job, ()), dtype=np.float64)
        return None if len(values) < self.min_samples else float(np.quantile(values, self.quantile))

    def slowdown(self, job: int, task_id: int) -> float | None:
        mine, baseline = self.ipc_now(task_id), self._baseline(job)
        if mine is None or mine <= 0 or baseline is None:
            return None
        return max(1.0, baseline / mine)


class PodEstimates:
    """Per-pod pressure estimates, as per-pod (cgroup) counters would give them.

    A pod is measured once it has run ``min_age_s``: its true pressure times ``exp(N(0, noise))`` per resource,
    clipped to [0, 1], drawn once per task (a persistent per-pod error, not one that averages away); or, with a
    :class:`CounterEstimator`, what a regressor reads from the pod's simulated counters in that window. Until then,
    and for a pod never seen, the guess is its class's mean over the regime model's training kinds
    (``simulator.workloads.CLASS_PRESSURE_GUESS``). A re-queued task keeps its estimate (its replacement is the
    same work).
    """

    def __init__(self, noise: float, seed: int, min_age_s: float, counters: CounterEstimator | None = None) -> None:
        if noise < 0 or min_age_s < 0:
            raise ValueError("noise and min_age_s must be >= 0")
        self.noise = noise
        self.min_age_s = min_age_s
        self.counters = counters
        self._rng = random.Random(seed)
        self.known: dict[int, tuple[float, float, float, float]] = {}
        self.cpi: JobCpi | None = None
        """Set (with ``counters``): every measured pod's IPC is read each evaluation for job-relative slowdowns."""
        self.job_prior = False
        """Set: an unmeasured pod of a job with measured pods is guessed at their mean estimate."""
        self._job_sums: dict[int, tuple[np.ndarray, int]] = {}
        self._job_of: dict[int, int] = {}
        self.clearance: Clearance | None = None
        """Set (with ``cpi``): who ran beside each latency-sensitive pod while it was not slowed."""

    def observe(self, arena: Arena, t_s: float) -> None:
        for i, tasks in enumerate(arena.residents):
            if self.cpi is not None and self.counters is not None and tasks:
                for t, ipc in zip(tasks, self.counters.ipc(i, [t.arrival for t in tasks]), strict=True):
                    if t_s - t.start_s >= self.min_age_s:
                        self.cpi.record(t.arrival.job_id, t.arrival.task_id, ipc)
                        if self.clearance is not None and t.arrival.latency_sensitive:
                            me = task_key(t.arrival)
                            self.clearance.record(me, frozenset(task_key(o.arrival) for o in tasks) - {me})
            if self.job_prior:
                for t in tasks:
                    self._job_of[t.arrival.task_id] = t.arrival.job_id
            if isinstance(self.counters, MonitoredEstimator) and self.counters.rereads and tasks:
                old_enough = [k for k, t in enumerate(tasks) if t_s - t.start_s >= self.min_age_s]
                self.counters.observe([t.arrival for t in tasks], old_enough)
                for k in old_enough:
                    tid = tasks[k].arrival.task_id
                    if tid in self.known:
                        self.known[tid] = self.counters.refined(tid, self.known[tid])
            new = [k for k, t in enumerate(tasks)
                   if t.arrival.task_id not in self.known and t_s - t.start_s >= self.min_age_s]
            if not new:
                continue
            if self.counters is not None:
                estimates = self.counters.estimate(i, [t.arrival for t in tasks], new)
            else:
                estimates = [self._measure(tasks[k].arrival.pressure) for k in new]
            for k, e in zip(new, estimates, strict=True):
                self.known[tasks[k].arrival.task_id] = e
                if self.job_prior:
                    total, n = self._job_sums.get(tasks[k].arrival.job_id, (np.zeros(4), 0))
                    self._job_sums[tasks[k].arrival.job_id] = (total + np.asarray(e), n + 1)

        if self.clearance is not None and self.cpi is not None:
            running = set()
            for tasks in arena.residents:
                for t in tasks:
                    if t.arrival.latency_sensitive and t_s - t.start_s >= self.min_age_s:
                        me = task_key(t.arrival)
                        running.add(me)
                        self.clearance.judge(me, self.cpi.slowdown(t.arrival.job_id, t.arrival.task_id))
            self.clearance.retain(running)

    def cleared(self, a: Arrival) -> frozenset[str]:
        return frozenset() if self.clearance is None else self.clearance.cleared(task_key(a))

    def _measure(self, pressure: Sequence[float]) -> tuple[float, float, float, float]:
        v = [min(1.0, max(0.0, p * (self._rng.lognormvariate(0.0, self.noise) if self.noise > 0 else 1.0)))
             for p in pressure]
        return v[0], v[1], v[2], v[3]

    def slowdown_of(self, job: int, task_id: int) -> float | None:
        return None if self.cpi is None else self.cpi.slowdown(job, task_id)

    def of(self, task_id: int, workload_class: str, job_id: int | None = None) -> tuple[float, float, float, float]:
        """``job_id``: the pod's job when the caller knows it (else the one seen running, with ``job_prior``)."""
        known = self.known.get(task_id)
        if known is not None:
            return known
        if self.job_prior:
            seen = self._job_sums.get(self._job_of.get(task_id, -1) if job_id is None else job_id)
            if seen is not None:
                m = seen[0] / seen[1]
                return float(m[0]), float(m[1]), float(m[2]), float(m[3])
        return CLASS_PRESSURE_GUESS[CLASS_INDEX[workload_class]]


def taint_toleration_scores(counts: Sequence[int]) -> list[int]:
    """TaintToleration Score + NormalizeScore(reverse) over the scored nodes (int64 arithmetic)."""
    top = max(counts, default=0)
    if top == 0:
        return [MAX_NODE_SCORE] * len(counts)
    return [MAX_NODE_SCORE - MAX_NODE_SCORE * c // top for c in counts]


class OrchestratorPolicy:
    """The extender's placement on nodes the referee has tainted or cordoned (module docstring)."""

    name = "orchestrator"

    def __init__(self, seed: int, view: ArenaView, control: NodeControl, cfg: ScoringConfig | None = None,
                 weight: int = EXTENDER_WEIGHT) -> None:
        self.extender = ExtenderPolicy(seed, view, cfg, weight)
        self.control = control
        self.now_s = 0.0
        self.excluded = 0  # decisions where a taint or cordon removed at least one feasible node
        self.estimates: PodEstimates | None = None
        """Set: the co-runner term reads per-pod estimates (``corunner.load_harm``), not the class table."""
        self._residents: list[list[tuple[int, str, bool]]] | None = None

    def choose(self, pod: PodRequest, nodes: Sequence[NodeResources]) -> int | None:
        feasible = [i for i, node in enumerate(nodes) if fits(pod, node)]
        allowed = [i for i in feasible if self.control.schedulable(i, self.now_s)]
        if len(allowed) < len(feasible):
            self.excluded += 1
        if not allowed:
            return None
        c = CLASS_INDEX[pod.workload_class if isinstance(pod, TaskPod) else "cpu_bound"]
        cards = self.extender.cards()
        passed = [i for i in allowed if cards[i].reasons[c] is None]
        if len(passed) < len(allowed):
            self.extender.filtered += 1
        if not passed:
            return None
        tt = taint_toleration_scores([self.control.prefer_no_schedule(i) for i in passed])
        w = self.extender.weight * EXTENDER_SCALE
        node_score = self.extender.node_score if self.estimates is None else self._load_score(pod)
        totals = [score(pod, nodes[i]).total + w * node_score(i, c, cards) + TAINT_WEIGHT * t
                  for i, t in zip(passed, tt, strict=True)]
        best = max(totals)
        return self.extender._rng.choice([i for i, t in zip(passed, totals, strict=True) if t == best])


    def _load_score(self, pod: PodRequest) -> Callable[[int, int, Sequence[NodeCard]], int]:
        """The extender's score with the load term: harm on per-pod estimates of the pod and the residents."""
        assert self.estimates is not None
        est = self.estimates
        view = self.extender._view
        cfg = self.extender.cfg
        cls = pod.workload_class if isinstance(pod, TaskPod) else "cpu_bound"
        ls = isinstance(pod, TaskPod) and pod.latency_sensitive
        mine = (est.of(pod.task_id, cls, pod.job_id) if isinstance(pod, TaskPod)
                else CLASS_PRESSURE_GUESS[CLASS_INDEX[cls]])

        def node_score(i: int, c: int, cards: Sequence[NodeCard]) -> int:
            residents = [(int(k), est.of(tid, WORKLOAD_CLASSES[int(k)]), bool(sensitive))
                         for k, tid, sensitive in zip(view.classes[i].tolist(), view.task_ids[i],
                                              view.latency_sensitive[i].tolist(), strict=True)]
            harm = load_harm(c, mine, ls, residents, cfg.corunner_slo_slowdown)
            return score_with_penalty(cards[i], c, harm / (cfg.max_slowdown - 1.0), cfg)

        return node_score


@dataclass
class _Sent:
    fingerprint: tuple[tuple[str, object], ...]
    ts_ms: int


class Orchestrator:
    """The agents and the referee between the arena's ticks (module docstring); a ``loop.Controller``."""

    def __init__(self, node_names: Sequence[str], policy: OrchestratorPolicy, *, model_version: str = "arena",
                 cfg: OrchestratorConfig | None = None, epoch_ms: int = 1_700_000_000_000,
                 risk: RiskHook | None = None, reliability: ReliabilitySettings | None = None,
                 efficiency: EfficiencySettings | None = None, admission: AdmissionSettings | None = None,
                 referee: RefereeSettings | None = None, counters: CounterEstimator | None = None) -> None:
        self.names = list(node_names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.policy = policy
        self.control = policy.control
        self.cfg = cfg or OrchestratorConfig()
        self.model_version = model_version
        self.epoch_ms = epoch_ms
        self.risk = risk
        self.rel = reliability or ReliabilitySettings()
        self.eff = efficiency or EfficiencySettings()
        self.adm = admission or AdmissionSettings()
        self.ref = referee or RefereeSettings(mode="shadow")
        self.view = ClusterView()
        self.state = RefereeState()
        self.held_back: deque[Arrival] = deque()
        self._labels: list[RegimeIn | None] = [None] * len(self.names)
        self._running: dict[str, int] = {}  # task key → node index
        self._sent: dict[tuple[str, str, str], _Sent] = {}
        self._seq = 0
        self.proposals: Counter[str] = Counter()
        self.actions: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.decisions = 0
        self.cpu_s = 0.0
        self.taint_effects: Counter[str] = Counter()
        self.taints_truly_contended = 0
        self._watcher = WatcherSettings()
        self._t_s = 0.0
        self._created: dict[str, float] = {}  # task key → when its current pod was created (re-queued)
        self._hold_started: dict[str, float] = {}
        self.estimates: PodEstimates | None = None
        if self.cfg.moves is not None or self.cfg.load_term:
            self.estimates = PodEstimates(self.cfg.pod_noise, self.cfg.noise_seed, self.cfg.min_age_s, counters)
            self.estimates.job_prior = self.cfg.job_prior
            if counters is not None and self.cfg.victims == "cpi":
                self.estimates.cpi = JobCpi(self.cfg.cpi_quantile, window=self.cfg.cpi_window,
                                         reference=self.cfg.cpi_reference)
                if self.cfg.cpi_clearance is not None:
                    self.estimates.clearance = Clearance(self.cfg.cpi_window, self.cfg.cpi_clearance)
            if self.cfg.load_term:
                policy.estimates = self.estimates
        self.moved: set[str] = set()
        self.victim_confusion: Counter[tuple[bool, bool]] = Counter()
        """victims cpi: (observed over the SLO, truly over it) → pod-evaluations (latency-sensitive, observed)."""
        self.moves_applied = 0
        self.moved_latency_sensitive = 0
        self.lost_work_s = 0.0
        """Nominal work (task-s) moved pods had done before their eviction: redone after the restart."""
        self.lost_cpu_s = 0.0
        self.move_cpu_s = 0.0
        self.violation_causes: dict[str, float] = dict.fromkeys(VIOLATION_CAUSES, 0.0)
        """Task-s over the SLO at the moves' evaluations, by cause (:meth:`_attribute`; VIOLATION_CAUSES)."""

    # ------------------------------------------------------------------ loop.Controller
    def held(self) -> int:
        return len(self.held_back)

    def extra(self, outcome_ticks: int, tick_s: float) -> dict[str, float]:
        minutes = outcome_ticks * tick_s / 60.0
        out = {
            "referee_decisions_per_min": self.decisions / minutes if minutes else 0.0,
            "actions_per_min": sum(self.actions.values()) / minutes if minutes else 0.0,
            "orchestrator_cpu_us_per_decision": self.cpu_s / self.decisions * 1e6 if self.decisions else 0.0,
            "placements_excluded_by_taint_or_cordon": float(self.policy.excluded),
            "taints_noschedule": float(self.taint_effects["NoSchedule"]),
            "taints_prefer_noschedule": float(self.taint_effects["PreferNoSchedule"]),
            "taint_precision": (self.taints_truly_contended / self.actions["taint"]) if self.actions["taint"] else 0.0,
        }
        if self.cfg.moves is not None:
            per_min = self.moves_applied / minutes if minutes else 0.0
            out |= {"moves": float(self.moves_applied), "moves_per_min": per_min,
                    "moved_latency_sensitive": float(self.moved_latency_sensitive),
                    "lost_work_task_s": self.lost_work_s, "lost_work_node_cpu_s": self.lost_cpu_s,
                    "move_cpu_s": self.move_cpu_s}
            seen = sum(self.violation_causes.values())
            out["violation_attributed_task_s"] = seen
            for cause in VIOLATION_CAUSES:
                out[f"violation_share_{cause}"] = self.violation_causes[cause] / seen if seen else 0.0
        if self.victim_confusion:
            c = self.victim_confusion
            flagged, victims = c[(True, True)] + c[(True, False)], c[(True, True)] + c[(False, True)]
            out |= {"observed_victim_evaluations": float(sum(c.values())),
                    "observed_victim_precision": c[(True, True)] / flagged if flagged else 0.0,
                    "observed_victim_recall": c[(True, True)] / victims if victims else 0.0}
        for kind in ("taint", "cordon", "consolidate", "evict", "hold_admission", "memory_balloon"):
            out[f"proposals_{kind}"] = float(self.proposals[kind])
            out[f"actions_{kind}"] = float(self.actions[kind])
        return out

    def now_ms(self, arena: Arena, t_s: float) -> int:
        start = arena.cluster.start_ms if arena.cluster is not None else self.epoch_ms
        return start + round(t_s * 1000)

    def step(self, tick: int, t_s: float, arena: Arena, pending: deque[Arrival]) -> None:
        started = time.process_time()
        self.policy.now_s = self._t_s = t_s
        self.control.expire(t_s)
        if self.estimates is not None:
            self.estimates.observe(arena, t_s)
        self._admit(pending)
        if tick % self.cfg.every_ticks == 0:
            now = self.now_ms(arena, t_s)
            self._update_view(arena, pending, now)
            if self.risk is not None:
                self.risk(self.view, arena, now)
            proposals = self._propose(now)
            if self.cfg.moves is not None:
                proposals += self._moves(arena, t_s, now)
            self._decide(proposals, arena, pending, t_s, now)
        self.cpu_s += time.process_time() - started

    # ------------------------------------------------------------------ corrective moves
    def node_loads(self, arena: Arena, t_s: float) -> list[NodeLoad]:
        """Every node's running pods as their per-pod counters would describe them (:class:`PodEstimates`)."""
        assert self.estimates is not None
        est = self.estimates
        out: list[NodeLoad] = []
        for i, tasks in enumerate(arena.residents):
            r = arena.resources[i]
            pods = tuple(PodLoad(task_key(t.arrival), f"j{t.arrival.job_id}", t.arrival.workload_class,
                                 t.arrival.latency_sensitive, est.of(t.arrival.task_id, t.arrival.workload_class),
                                 t_s - t.start_s, t.pod.milli_cpu, t.pod.memory,
                                 est.slowdown_of(t.arrival.job_id, t.arrival.task_id),
                                 cleared=est.cleared(t.arrival)) for t in tasks)
            if est.cpi is not None:
                self._score_victims([t.slowdown for t in tasks], pods)
            out.append(NodeLoad(self.names[i], pods, r.allocatable_milli_cpu - r.requested_milli_cpu,
                                r.allocatable_memory - r.requested_memory, self.control.schedulable(i, t_s)))
        return out

    def _score_victims(self, true_slowdowns: Sequence[float], pods: Sequence[PodLoad]) -> None:
        """Tally observed (IPC) against true slowdown of the latency-sensitive pods that have an observation."""
        assert self.cfg.moves is not None
        limit = self.cfg.moves.slo_slowdown
        for true, p in zip(true_slowdowns, pods, strict=True):
            if p.latency_sensitive and p.slowdown is not None:
                self.victim_confusion[(p.slowdown > limit, true > limit)] += 1

    def _moves(self, arena: Arena, t_s: float, now: int) -> list[Proposal]:
        assert self.cfg.moves is not None
        started = time.process_time()
        loads = self.node_loads(arena, t_s)
        assessed = interference_policy.assess(loads, self.cfg.moves, frozenset(self.moved))
        self._attribute(arena, assessed)
        plan = assessed.moves[: self.cfg.moves.max_per_round]
        out = [c.proposal for c in interference_policy.proposals(plan, self.cfg.moves, now)]
        self.proposals["evict"] += len(out)
        self.move_cpu_s += time.process_time() - started
        return out

    def _attribute(self, arena: Arena, assessed: interference_policy.Assessment) -> None:
        """Tally each latency-sensitive task truly over the SLO now by what the moves' rule saw of it (the
        arena's truth against the estimates' predicted slowdown: why the violation was not moved away)."""
        assert self.cfg.moves is not None
        weight = arena.tick_s * self.cfg.every_ticks
        for tasks, verdict, predicted in zip(arena.residents, assessed.verdicts, assessed.predicted, strict=True):
            for t, p in zip(tasks, predicted, strict=True):
                if not (t.arrival.latency_sensitive and t.slowdown > arena.slo):
                    continue
                if task_key(t.arrival) in self.moved:
                    cause = "after_own_move"
                elif p <= self.cfg.moves.slo_slowdown or verdict == "calm":
                    cause = "missed"
                else:
                    cause = "move_found" if verdict == "move" else verdict
                self.violation_causes[cause] += weight

    # ------------------------------------------------------------------ admission holds
    def _admit(self, pending: deque[Arrival]) -> None:
        """Hold back what a held namespace submits; put back what a lifted hold kept out.

        Only pods created after the hold began are rejected (a pod pending before it was admitted
        already); a held-back task re-enters the queue, at its end, when the hold lifts.
        """
        if self.held_back:
            back = [a for a in self.held_back if namespace_of(a) not in self.control.holds]
            if back:
                self.held_back = deque(a for a in self.held_back if namespace_of(a) in self.control.holds)
                for a in back:
                    self._created[task_key(a)] = self._t_s
                pending.extend(back)
        if not self.control.holds or not pending:
            return
        keep: deque[Arrival] = deque()
        for a in pending:
            ns = namespace_of(a)
            if ns in self.control.holds and self._created.get(task_key(a), a.submit_s) > self._hold_started[ns]:
                self.held_back.append(a)
            else:
                keep.append(a)
        pending.clear()
        pending.extend(keep)

    # ------------------------------------------------------------------ inputs
    def _update_view(self, arena: Arena, pending: deque[Arrival], now: int) -> None:
        v = self.view
        for i, label in enumerate(arena.view.labels):
            if label is not None and label != self._labels[i]:
                v.update(Topic.REGIMES, self.names[i], self._regime(self.names[i], label))
                self._labels[i] = label
        batch = arena.last_batch
        self._seq += 1
        for i, name in enumerate(self.names):
            if batch is not None:
                cpu, mem = float(batch.cpu_util[i]), float(batch.mem_util[i])
            else:  # no counters simulated (tests): requested fractions stand in for utilisation
                r = arena.resources[i]
                cpu, mem = r.requested_milli_cpu / r.allocatable_milli_cpu, r.requested_memory / r.allocatable_memory
            v.update(Topic.NODESTATE, name, NodeState(
                node=name, ts_ms=now, seq=self._seq, interval_ms=max(1, round(arena.tick_s * 1000)),
                source="synthetic", pmu="hardware", supported_events=[], cpu_util=min(1.0, max(0.0, cpu)),
                mem_util=min(1.0, max(0.0, mem))))
        running: dict[str, tuple[int, Arrival, TaskPod]] = {}
        for i, tasks in enumerate(arena.residents):
            for t in tasks:
                running[task_key(t.arrival)] = (i, t.arrival, t.pod)
        for key in [k for k in self._running if k not in running]:
            del self._running[key]
            v.update("task_events.v1", key, TaskEvent(task_id=key, job_id="gone", task_index=0, ts_ms=now,
                                                      event="FINISH", source="synthetic"))
        for key, (i, a, pod) in running.items():
            if self._running.get(key) == i:
                continue
            self._running[key] = i
            v.update("task_events.v1", key, TaskEvent(
                task_id=key, job_id=f"j{a.job_id}", task_index=0, ts_ms=now, event="SCHEDULE", source="synthetic",
                machine=self.names[i], scheduling_class=2 if a.latency_sensitive else 0, cpu_request=a.cpu,
                memory_request=pod.memory / float(1 << 30), namespace=namespace_of(a)))
        ready = sum(1 for i in range(len(self.names)) if self.control.cordoned_until[i] <= self._t_s)
        for ns, state in self._queues(pending, now, ready).items():
            v.update(Topic.CLUSTERSTATE, ns or "_", state)

    def _regime(self, node: str, label: RegimeIn) -> RegimeLabelV2:
        unknown = label.regime == UNKNOWN_REGIME
        return RegimeLabelV2(
            node=node, ts_ms=label.ts_ms, regime=label.regime,  # type: ignore[arg-type]
            confidence=0.0 if unknown else min(1.0, max(0.0, label.confidence)),
            raw_regime=label.regime,  # type: ignore[arg-type]
            changed=False,
            interference={} if unknown else {c: min(100.0, max(1.0, s)) for c, s in label.interference},
            abstain=list(label.abstain or ("low_confidence",))[:3] if unknown else [],  # type: ignore[arg-type]
            model_version=self.model_version, input_ts_ms=label.ts_ms)

    def _queues(self, pending: deque[Arrival], now: int, ready: int) -> dict[str | None, ClusterState]:
        """Queue health as the cluster watcher computes it (its default thresholds)."""
        w = self._watcher
        running = Counter(k.split("/", 1)[0] for k in self._running)
        out: dict[str | None, ClusterState] = {}
        for ns in (None, NS_LS, NS_BATCH):
            mine = [a for a in pending if ns is None or namespace_of(a) == ns]
            oldest = max((self._t_s - self._created.get(task_key(a), a.submit_s) for a in mine), default=0.0)
            oldest = max(0.0, oldest)
            health = queue_health(len(mine), oldest, w)
            out[ns] = ClusterState(
                cluster=CLUSTER, namespace=ns, ts_ms=now, pending_pods=len(mine),
                running_pods=sum(running.values()) if ns is None else running[ns], oldest_pending_s=round(oldest, 3),
                queue_health=health, nodes_total=len(self.names), nodes_ready=ready)
        return out

    # ------------------------------------------------------------------ agents
    def _propose(self, now: int) -> list[Proposal]:
        scope = self.view.everything()
        out: list[Proposal] = []
        agents: tuple[tuple[str, list[Candidate], float], ...] = (
            ("reliability", reliability_policy.evaluate(self.view, self.rel, scope, now), self.rel.repropose_s),
            ("efficiency", efficiency_policy.evaluate(self.view, self.eff, scope, now), self.eff.repropose_s),
            ("admission", admission_policy.evaluate(self.view, self.adm, scope, now), self.adm.repropose_s),
        )
        for agent, candidates, repropose_s in agents:
            for c in candidates:
                p = c.proposal
                slot = (agent, p.target.key(), p.kind)
                fingerprint = tuple(sorted(p.payload.items()))
                last = self._sent.get(slot)
                if last is not None and last.fingerprint == fingerprint and now - last.ts_ms < repropose_s * 1000:
                    continue
                self._sent[slot] = _Sent(fingerprint, now)
                self.proposals[p.kind] += 1
                out.append(p)
        return out

    # ------------------------------------------------------------------ referee
    def _decide(self, proposals: list[Proposal], arena: Arena, pending: deque[Arrival], t_s: float,
                now: int) -> None:
        windows: dict[str, list[Proposal]] = {}
        for p in proposals:
            windows.setdefault(p.target.key(), []).append(p)
        for key in sorted(windows):
            group = windows[key]
            res = resolve(group[0].target, group, now_ms=now, state=self.state, s=self.ref)
            self.decisions += 1
            outcome: Outcome = "refused"
            if res.chosen is not None and not res.replay:
                outcome = self._apply(res.chosen, arena, pending, t_s)
                (self.actions if outcome == "applied" else self.refused)[res.chosen.kind] += 1
            settle(self.state, res, outcome)

    def _apply(self, p: Proposal, arena: Arena, pending: deque[Arrival], t_s: float) -> Outcome:
        kind, target = p.kind, p.target
        if self.cfg.actions is not None and kind not in self.cfg.actions:
            return "refused"
        if kind == "taint":
            i = self.index.get(target.name)
            if i is None:
                return "refused"
            slot = (str(p.payload.get("key")), str(p.payload.get("effect")))
            value = str(p.payload.get("value", ""))
            current = self.control.taints[i].get(slot)
            if current is not None and current[0] == value:
                return "refused"  # the actuator's "no change: taint already present"
            self.control.taints[i][slot] = (value, t_s + self.cfg.taint_ttl_s)
            self.taint_effects[slot[1]] += 1
            batch = arena.last_batch
            if batch is not None:  # the simulator's side channel, never an input: was the node contended?
                self.taints_truly_contended += int(float(batch.slowdown[i].max()) >= self.adm.taint_interference)
            return "applied"
        if kind in ("cordon", "consolidate"):
            i = self.index.get(target.name)
            if i is None or self.control.cordoned_until[i] > t_s:
                return "refused"
            self.control.cordoned_until[i] = t_s + self.cfg.cordon_ttl_s
            return "applied"
        if kind == "hold_admission":
            ns = target.name
            if ns in self.ref.protected_namespaces or ns in self.control.holds:
                return "refused"
            self.control.holds[ns] = t_s + self.cfg.hold_s
            self._hold_started[ns] = t_s
            return "applied"
        if kind in ("evict", "memory_balloon"):
            key = f"{target.namespace}/{target.name}"
            node = self._running.get(key)
            if node is None:
                return "refused"
            task = next((t for t in arena.residents[node] if task_key(t.arrival) == key), None)
            if task is None:
                return "refused"
            if kind == "memory_balloon":
                mib = p.payload.get("memory_request_mib")
                if not isinstance(mib, int) or mib <= 0 or mib << 20 >= task.pod.memory:
                    return "refused"
                arena.resize(node, task, replace(task.pod, memory=mib << 20))
                return "applied"
            job = task.arrival.job_id
            siblings = sum(1 for tasks in arena.residents for t in tasks if t.arrival.job_id == job)
            if siblings <= 1:
                return "refused"  # PDB-like: never the job's last running task
            if p.payload.get("reason") == "interference":
                self.moved.add(key)
                self.moves_applied += 1
                self.moved_latency_sensitive += int(task.arrival.latency_sensitive)
                done = task.arrival.work_s - task.remaining_s
                self.lost_work_s += done
                self.lost_cpu_s += done * task.pod.milli_cpu / arena.resources[node].allocatable_milli_cpu
            pending.append(arena.evict(node, task))
            self._created[key] = t_s
            return "applied"
        return "refused"  # Deployment actions: the arena's jobs are not Deployments
