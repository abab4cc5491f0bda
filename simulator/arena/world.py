"""What the arena's nodes show: the simulator's counters for the tasks actually placed, and what the
live regime stage would publish from them.

:class:`ArenaCluster` is the :class:`~simulator.cluster.SyntheticCluster` (same SKUs, missing events,
multiplexing, noise, counter model) with its random epochs replaced by the arena's placements: a node's
co-runners are the tasks bound to it, at their intensities. :class:`RegimeObserver` runs the live
path on those counters: ``featurelib.node`` (``sample_from_dict`` → ``NodeWindows``), the
shipped ONNX regime model, ``RegimeModel.judge`` (abstention) and the stage's hysteresis, batched over
the nodes once per tick, and keeps the latest label per node as the extender would hold it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import numpy as np

from contracts.models import REGIMES, UNKNOWN_REGIME
from featurelib.node.samples import sample_from_dict
from featurelib.node.schema import as_model_input
from featurelib.node.windows import DictStore, NodeWindows
from featurelib.pod import EXTENDED_EVENTS as POD_EVENTS
from featurelib.pod import LLC_OCCUPANCY, MBM_TOTAL_BYTES, NODE_LLC_BYTES, NODE_MEMBW_PEAK
from services.regime import hysteresis
from services.regime.abstention import REASON_BITS
from services.regime.model import RegimeModel
from services.scheduler_extender.scoring import RegimeIn
from simulator.cluster import COL, EVENTS, SyntheticCluster, TickBatch, node_rates, workload_rates
from simulator.workloads import KINDS, class_slowdowns, regime_of

_NEVER = 2**62
POD_COUNT_NOISE = 0.05
"""Per-pod count noise per sample, as ``training.pod_pressure`` draws it per window."""


MONITORED: Final = (0, 1)
"""The resources per-cgroup resource monitoring reads directly: llc (occupancy) and membw (bandwidth)."""
ARENA_LLC_BYTES: Final = 32 * 2**20
"""The LLC an arena node reports (``NodeState.metrics``), the scale of its pods' simulated ``llc_occupancy``."""
ARENA_MEMBW_PEAK: Final = 100e9
"""The memory bandwidth (bytes/s) an arena node's operator states, the scale of its pods' ``mbm_total_bytes``."""


def held_shares(pressures: np.ndarray) -> np.ndarray:
    """What each resident of a node (rows of ``pressures``) holds of the monitored resources, on their pressure
    scale: its demand while the residents together demand no more than the resource (sum <= 1), its
    proportional share beyond that, so under saturation a reading understates the demand."""
    demand = np.asarray(pressures, dtype=np.float64).reshape(-1, 4)[:, list(MONITORED)]
    return np.asarray(demand / np.maximum(1.0, demand.sum(axis=0)))


def arena_pod_uid(task_id: int, job_id: int) -> str:
    """A Kubernetes-shaped pod UID for an arena task that carries its job (the last 12 hex digits)."""
    if task_id < 0 or job_id < 0:
        raise ValueError(f"task_id and job_id must be >= 0, got {task_id}, {job_id}")
    return f"{task_id & 0xFFFFFFFF:08x}-0000-4000-8000-{job_id & 0xFFFFFFFFFFFF:012x}"


def job_of_arena_uid(uid: str) -> str:
    """The job an :func:`arena_pod_uid` names (what the stage reads from the API server's pod list)."""
    return f"arena/{uid.rsplit('-', 1)[-1]}"


class ArenaCluster(SyntheticCluster):
    """A SyntheticCluster whose co-runners are set by the arena (never drawn)."""

    def __init__(self, nodes: int, seed: int, *, interval_ms: int, monitor_noise: float = 0.1, **kw: Any) -> None:
        """``monitor_noise``: the spread of :meth:`resctrl_dicts`' readings."""
        if monitor_noise < 0:
            raise ValueError(f"monitor_noise must be >= 0, got {monitor_noise}")
        super().__init__(nodes=nodes, seed=seed, interval_ms=interval_ms, epoch_ticks=(1, 1), **kw)
        self.monitor_noise = monitor_noise
        self._pods: dict[int, tuple[tuple[str, ...], np.ndarray, np.ndarray]] = {}
        self._monitor_rng = np.random.default_rng(seed + 1)
        self._monitor_factors: dict[str, np.ndarray] = {}
        for i in range(nodes):
            self.set_corunners(i, (), ())

    def set_corunners(self, i: int, kinds: Sequence[str], intensities: Sequence[float],
                      pods: Sequence[str] = ()) -> None:
        """Node ``i`` now runs ``kinds`` at ``intensities`` until told otherwise; ``pods`` (their pod UIDs, in
        the same order) names their cgroups for :meth:`cgroup_dicts`."""
        inten = np.asarray(intensities, dtype=np.float64)
        pressures = (np.array([KINDS[k].pressure for k in kinds]) * inten[:, None] if len(kinds)
                     else np.zeros((0, 4)))
        per, util, mem, freq = workload_rates(self.specs[i], list(kinds), inten, pressures, self._rng)
        self._rates[i], self._util0[i], self._mem0[i], self._freq0[i] = node_rates(self.specs[i], per), util, mem, freq
        if pods and len(pods) != len(kinds):
            raise ValueError(f"{len(pods)} pod UIDs for {len(kinds)} workloads on node {i}")
        self._pods[i] = (tuple(pods), per, pressures)
        regime = regime_of(pressures)
        self._regime[i] = REGIMES.index(regime)
        self._slowdown[i] = class_slowdowns(pressures)
        self._epoch_end[i] = _NEVER


    def cgroup_dicts(self, i: int, interval_s: float) -> dict[str, dict[str, dict[str, Any]]]:
        """Node ``i``'s per-pod counters over one interval, as the node agent's per-cgroup counting would publish
        them (``NodeState.cgroups``, dict form): one kubelet cgroup ``kubepods/burstable/pod<uid>`` per pod
        named in :meth:`set_corunners`, the pod's counter rates (its co-runners' slowdown included) with ±5 %
        count noise, every core-PMU event counted (no multiplexing)."""
        uids, per, _ = self._pods.get(i, ((), np.zeros((0, len(EVENTS))), np.zeros((0, 4))))
        enabled = int(interval_s * 1e9)
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for uid, rates in zip(uids, per, strict=True):
            noisy = rates * interval_s * self._rng.normal(1.0, POD_COUNT_NOISE, size=rates.shape).clip(0.5, 1.5)
            out[f"kubepods/burstable/pod{uid}"] = {
                name: {"raw": float(noisy[COL[name]]), "value": float(noisy[COL[name]]), "enabled_ns": enabled,
                       "running_ns": enabled, "status": "counted"} for name in POD_EVENTS}
        return out

    def resctrl_dicts(self, i: int, interval_s: float) -> dict[str, dict[str, dict[str, Any]]]:
        """Node ``i``'s per-pod resctrl readings over one interval, as the node agent with
        ``NODE_AGENT_RESCTRL_ROOT`` adds them to a pod's cgroup counters: ``llc_occupancy`` (bytes held) and
        ``mbm_total_bytes`` (bytes moved in the interval), each pod's :func:`held_shares` times one persistent
        ``exp(N(0, monitor_noise))`` per pod and resource (the offline arena's ``--rdt-reading window``), on the node's
        :data:`ARENA_LLC_BYTES` and :data:`ARENA_MEMBW_PEAK` (:meth:`monitored_metrics`)."""
        uids, _, pressures = self._pods.get(i, ((), np.zeros((0, len(EVENTS))), np.zeros((0, 4))))
        if not uids:
            return {}
        factors = np.array([self._monitor_factor(uid) for uid in uids])
        read = np.clip(held_shares(pressures) * factors, 0.0, 1.0)
        enabled = int(interval_s * 1e9)
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for uid, (llc, membw) in zip(uids, read.tolist(), strict=True):
            values = {LLC_OCCUPANCY: llc * ARENA_LLC_BYTES, MBM_TOTAL_BYTES: membw * ARENA_MEMBW_PEAK * interval_s}
            out[f"kubepods/burstable/pod{uid}"] = {
                name: {"raw": v, "value": v, "enabled_ns": enabled, "running_ns": enabled, "status": "counted"}
                for name, v in values.items()}
        return out

    @staticmethod
    def monitored_metrics() -> dict[str, float]:
        """``NodeState.metrics`` of a node whose agent reads resctrl: its LLC and stated memory bandwidth."""
        return {NODE_LLC_BYTES: float(ARENA_LLC_BYTES), NODE_MEMBW_PEAK: ARENA_MEMBW_PEAK}

    def _monitor_factor(self, uid: str) -> np.ndarray:
        factor = self._monitor_factors.get(uid)
        if factor is None:
            factor = np.exp(self._monitor_rng.normal(0.0, self.monitor_noise, size=len(MONITORED)))
            self._monitor_factors[uid] = factor
        return factor

    def pod_pressures(self, i: int) -> dict[str, tuple[float, ...]]:
        """The true pressure of each pod named on node ``i`` (kind × intensity): the side channel a live
        estimate is scored against, never an input."""
        uids, _, pressures = self._pods.get(i, ((), np.zeros((0, len(EVENTS))), np.zeros((0, 4))))
        return {uid: tuple(float(v) for v in row) for uid, row in zip(uids, pressures, strict=True)}


class LabelObserver(Protocol):
    """What the arena reads of a label source: the latest label per node, fed one tick at a time
    (:class:`RegimeObserver`: the node model; ``pod_observer.PodRegimeObserver``: the pod-relative model)."""

    labels: list[RegimeIn | None]
    windows: int
    abstain_reasons: dict[str, int]
    cpu_s: float

    def observe(self, batch: TickBatch) -> None: ...

    def interference_mae(self) -> float | None: ...

    def missed_slo_fraction(self) -> float | None: ...

    def coverage(self) -> float | None: ...

    def selective_accuracy(self) -> float | None:
        """Answered windows whose label is the node's true regime (the truth at the tick the window closed)."""
        ...


@dataclass(kw_only=True)
class LabelTally:
    """What both label sources keep (the latest label per node, counts against the truth) and the ratios they
    report from it. Keyword-only, so a source's own fields come first in its constructor."""

    labels: list[RegimeIn | None] = field(default_factory=list)
    windows: int = 0
    abstained: int = 0
    abstain_reasons: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0
    answered_abs_error: float = 0.0
    """Sum over answered windows and classes of |predicted - true| slowdown (truth: what a new task of
    the class would see on the node, the simulator's side channel, never an input)."""
    answered_cells: int = 0
    missed_slo: int = 0
    """Answered (window, class) cells predicted under 1.25 whose true slowdown is 1.25 or more."""
    correct: int = 0
    """Answered windows whose label (the node model's after hysteresis) is the node's true regime at the tick the
    window closed."""

    def abstain(self, i: int, ts_ms: int, mask: int) -> None:
        """Node ``i``'s window at ``ts_ms`` was not answered (``abstention`` bits in ``mask``)."""
        reasons = tuple(name for bit, name in REASON_BITS if mask & bit)
        for r in reasons:
            self.abstain_reasons[r] = self.abstain_reasons.get(r, 0) + 1
        self.abstained += 1
        self.labels[i] = RegimeIn(ts_ms, UNKNOWN_REGIME, 0.0, (), reasons)

    def score(self, regime: str, true_regime: int, predicted: np.ndarray, truth: np.ndarray) -> None:
        """An answered window against the truth: its label and its per-class slowdowns."""
        self.correct += int(REGIMES.index(regime) == true_regime)
        self.answered_abs_error += float(np.abs(predicted - truth).sum())
        self.answered_cells += len(predicted)
        self.missed_slo += int(((predicted < 1.25) & (truth >= 1.25)).sum())

    def interference_mae(self) -> float | None:
        return None if not self.answered_cells else self.answered_abs_error / self.answered_cells

    def missed_slo_fraction(self) -> float | None:
        return None if not self.answered_cells else self.missed_slo / self.answered_cells

    def coverage(self) -> float | None:
        return None if not self.windows else 1.0 - self.abstained / self.windows

    def selective_accuracy(self) -> float | None:
        answered = self.windows - self.abstained
        return None if not answered else self.correct / answered


@dataclass
class RegimeObserver(LabelTally):
    """Latest regime label per node, as the regime stage would publish it (None before a first window)."""

    model: RegimeModel
    node_names: Sequence[str]
    hysteresis_windows: int = 2
    _machine: NodeWindows = field(default_factory=lambda: NodeWindows(DictStore()))
    _state: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    _truth: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    _truth_regime: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        self.labels = [None] * len(self.node_names)
        self._index = {n: i for i, n in enumerate(self.node_names)}
        self._classes = tuple(self.model.card["outputs"]["workload_classes"])

    def observe(self, batch: TickBatch) -> None:
        """Feed one tick's NodeStates; label every window that closed (one model call for all of them)."""
        started = time.process_time()
        rows: list[np.ndarray] = []
        meta: list[tuple[int, int]] = []
        self._truth = batch.slowdown
        self._truth_regime = batch.regime
        for state in batch.nodestate_dicts():
            for window in self._machine.observe(sample_from_dict(state)).windows:
                rows.append(as_model_input(window.values, window.valid))
                meta.append((self._index[window.node], window.ts_ms))
        if rows:
            x = np.asarray(rows, dtype=np.float32)
            probs, slowdown = self.model(x)
            masks, _ = self.model.judge(x, probs)
            self._label(meta, probs, slowdown, masks)
        self.cpu_s += time.process_time() - started

    def _label(self, meta: list[tuple[int, int]], probs: np.ndarray, slowdown: np.ndarray,
               masks: np.ndarray) -> None:
        regimes = self.model.regimes
        for (i, ts_ms), p, s, mask in zip(meta, probs.tolist(), slowdown.tolist(), masks.tolist(), strict=True):
            node = self.node_names[i]
            self.windows += 1
            if mask:
                self._state[node] = hysteresis.abstain(self._state.get(node), ts_ms).state
                self.abstain(i, ts_ms, mask)
                continue
            raw = regimes[int(np.argmax(p))]
            step = hysteresis.advance(self._state.get(node), raw, ts_ms, windows=self.hysteresis_windows)
            self._state[node] = step.state
            conf = float(np.clip(p[regimes.index(step.regime)], 0.0, 1.0))
            self.score(step.regime, int(self._truth_regime[i]), np.asarray(s), self._truth[i])
            self.labels[i] = RegimeIn(ts_ms, step.regime, conf, tuple(zip(self._classes, s, strict=True)))
