"""The pod-relative regime label in the arena: what the ``pod-regime`` stage would publish for the tasks placed.

:class:`PodRegimeObserver` is :class:`~simulator.arena.world.RegimeObserver`'s counterpart for the
pod-relative model (``models/regime_pods``, served on podregimes.v1): every tick each node's NodeState gets
its pods' per-cgroup counts (``ArenaCluster.cgroup_dicts``), ``featurelib.pod_regime.PodRegimeWindows`` reads
each pod against its own job's pods (the job is in the arena pod's UID, ``world.arena_pod_uid``), and the
shipped model and its abstention rules answer every window that closed, batched, as the stage does (no
hysteresis: the stage has none).

The pod model predicts no interference. The extender scores a node by the interference its label carries, so
the observer attaches a **table**: the mean slowdown each workload class sees on nodes of each regime, over
random co-runner sets of the model's *training* kinds (:func:`regime_interference_table`; no held-out kind
enters it). ``interference="none"`` publishes the label with an empty map, as the stage does today.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from contracts.models import REGIMES, WORKLOAD_CLASSES
from featurelib.pod_regime import PodRegimeWindows
from services.regime.pod_model import PodRegimeModel
from services.scheduler_extender.scoring import RegimeIn
from simulator.arena.world import ArenaCluster, LabelTally, job_of_arena_uid
from simulator.cluster import TickBatch
from simulator.workloads import KINDS, class_slowdowns, regime_of

TABLE_SAMPLES: Final = 20_000
CORUNNERS: Final = (1, 4)
"""Co-runners per sampled node (the simulator's default range, ``SyntheticCluster(corunners=(1, 4))``)."""
INTENSITY: Final = (0.5, 1.0)
"""A task's intensity range in the arena (``arrivals.to_arrivals``) and in the simulator's epochs."""


def regime_interference_table(kinds: Sequence[str], *, seed: int,
                              samples: int = TABLE_SAMPLES) -> dict[str, tuple[float, ...]]:
    """Regime → mean slowdown per workload class (``WORKLOAD_CLASSES`` order) over ``samples`` random nodes of
    ``kinds`` (1–4 co-runners, intensities U(0.5, 1)); a regime no sample produced maps to the worst mean."""
    if not kinds or samples < 1:
        raise ValueError("need kinds and samples >= 1")
    rng = np.random.default_rng(seed)
    base = np.array([KINDS[k].pressure for k in kinds], dtype=np.float64)
    sums = {r: np.zeros(len(WORKLOAD_CLASSES)) for r in REGIMES}
    counts = dict.fromkeys(REGIMES, 0)
    for _ in range(samples):
        n = int(rng.integers(CORUNNERS[0], CORUNNERS[1] + 1))
        pressures = base[rng.integers(0, len(kinds), size=n)] * rng.uniform(*INTENSITY, size=n)[:, None]
        regime = regime_of(pressures)
        sums[regime] += class_slowdowns(pressures)
        counts[regime] += 1
    means = {r: tuple(float(v) for v in sums[r] / counts[r]) for r in REGIMES if counts[r]}
    worst = tuple(float(v) for v in np.max(np.array(list(means.values())), axis=0))
    return {r: means.get(r, worst) for r in REGIMES}


@dataclass
class PodRegimeObserver(LabelTally):
    """Latest pod-relative label per node (None before a first window); the same reading interface as
    ``RegimeObserver`` (labels, coverage, abstention reasons, interference error against the truth)."""

    model: PodRegimeModel
    cluster: ArenaCluster
    table: dict[str, tuple[float, ...]] | None
    """Regime → class slowdowns attached to answered labels; None = an empty map (the stage's record)."""
    _frames: PodRegimeWindows = field(init=False)

    def __post_init__(self) -> None:
        self._frames = self.model.windows(job_of_arena_uid)
        names = [s.name for s in self.cluster.specs]
        self.labels = [None] * len(names)
        self._index = {n: i for i, n in enumerate(names)}

    def observe(self, batch: TickBatch) -> None:
        """Feed one tick's NodeStates with their pods' counters; label every window that closed."""
        started = time.process_time()
        interval_s = batch.interval_ms / 1000.0
        rows: list[np.ndarray] = []
        meta: list[tuple[int, int]] = []
        for i, state in enumerate(batch.nodestate_dicts()):
            state["cgroups"] = self.cluster.cgroup_dicts(i, interval_s)
            for window in self._frames.observe(state):
                rows.append(window.x)
                meta.append((self._index[window.node], window.ts_ms))
        if rows:
            x = np.asarray(rows, dtype=np.float32)
            probs = self.model.predict(x)
            masks, _ = self.model.judge(x, probs)
            self._label(meta, probs, masks, batch)
        self.cpu_s += time.process_time() - started

    def _label(self, meta: list[tuple[int, int]], probs: np.ndarray, masks: np.ndarray, batch: TickBatch) -> None:
        regimes = self.model.regimes
        for (i, ts_ms), p, mask in zip(meta, probs.tolist(), masks.tolist(), strict=True):
            self.windows += 1
            if mask:
                self.abstain(i, ts_ms, mask)
                continue
            best = int(np.argmax(p))
            regime = regimes[best]
            interference: tuple[tuple[str, float], ...] = ()
            if self.table is None:  # no slowdowns to score: the label alone
                self.correct += int(REGIMES.index(regime) == int(batch.regime[i]))
            else:
                predicted = np.asarray(self.table[regime])
                self.score(regime, int(batch.regime[i]), predicted, batch.slowdown[i])
                interference = tuple(zip(WORKLOAD_CLASSES, predicted.tolist(), strict=True))
            self.labels[i] = RegimeIn(ts_ms, regime, float(p[best]), interference)
