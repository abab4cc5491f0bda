"""Labelled feature windows from the simulator, computed by the same code the features service runs.

Every simulated NodeState goes through ``featurelib.node`` (``sample_from_dict`` →
``NodeWindows``), so training sees exactly the vectors the stream produces (train/serve
parity). Ground truth comes from the simulator's truth side channel, never from the
NodeState stream: a window's label is the majority regime over the ticks of its pane, its
slowdown the mean ground-truth slowdown per workload class, and it is anomalous when
most of its ticks carry an injected anomaly.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from contracts.models import REGIMES, WORKLOAD_CLASSES
from featurelib.node.samples import sample_from_dict
from featurelib.node.schema import N_FEATURES, as_model_input
from featurelib.node.windows import DictStore, NodeWindows
from simulator import ANOMALY_KINDS, SyntheticCluster

Reporter = Callable[[str], None]


@dataclass(frozen=True)
class SimWindows:
    x: np.ndarray
    """(windows, N_FEATURES) float32, NaN where a feature is not valid."""
    regime: np.ndarray
    """(windows,) index into REGIMES."""
    slowdown: np.ndarray
    """(windows, len(WORKLOAD_CLASSES)) mean ground-truth slowdown."""
    anomaly: np.ndarray
    """(windows,) index into ANOMALY_KINDS, -1 normal."""
    node: np.ndarray
    ts_ms: np.ndarray
    params: dict[str, Any]

    def __len__(self) -> int:
        return len(self.regime)

    def subset(self, mask: np.ndarray) -> SimWindows:
        return SimWindows(self.x[mask], self.regime[mask], self.slowdown[mask], self.anomaly[mask],
                          self.node[mask], self.ts_ms[mask], self.params)


def simulate_windows(
    *,
    kinds: Sequence[str] | None,
    nodes: int,
    ticks: int,
    seed: int,
    anomaly_rate: float = 0.0,
    progress: Reporter | None = None,
    label: str = "simulation",
    **cluster_kw: Any,
) -> SimWindows:
    sim = SyntheticCluster(nodes=nodes, seed=seed, workloads=kinds, anomaly_rate=anomaly_rate, **cluster_kw)
    machine = NodeWindows(DictStore())
    truth: dict[tuple[str, int], list[tuple[int, int, np.ndarray]]] = defaultdict(list)
    xs: list[np.ndarray] = []
    regimes: list[int] = []
    slow: list[np.ndarray] = []
    anomalies: list[int] = []
    node_names: list[str] = []
    stamps: list[int] = []
    step = max(1, ticks // 5)
    for batch in sim.run(ticks):
        for i, state in enumerate(batch.nodestate_dicts()):
            sample = sample_from_dict(state)
            pane = machine.pane_of(sample.node, sample.ts_ms)
            truth[(sample.node, pane)].append((int(batch.regime[i]), int(batch.anomaly[i]), batch.slowdown[i]))
            for window in machine.observe(sample).windows:
                ticks_of = truth.pop((window.node, window.pane))
                regimes.append(Counter(r for r, _, _ in ticks_of).most_common(1)[0][0])
                kinds_seen = [a for _, a, _ in ticks_of if a >= 0]
                anomalies.append(Counter(kinds_seen).most_common(1)[0][0] if 2 * len(kinds_seen) >= len(ticks_of)
                                 else -1)
                slow.append(np.mean([s for _, _, s in ticks_of], axis=0))
                xs.append(as_model_input(window.values, window.valid))
                node_names.append(window.node)
                stamps.append(window.ts_ms)
        if progress is not None and (batch.tick + 1) % step == 0:
            progress(f"{label}: tick {batch.tick + 1}/{ticks}, {len(regimes):,} windows")
    params = {"kinds": list(sim.kinds), "nodes": nodes, "ticks": ticks, "seed": seed, "anomaly_rate": anomaly_rate,
              **{k: v for k, v in cluster_kw.items() if isinstance(v, int | float | str)}}
    return SimWindows(
        np.asarray(xs, dtype=np.float32).reshape(-1, N_FEATURES),
        np.asarray(regimes, dtype=np.int64),
        np.asarray(slow, dtype=np.float64).reshape(-1, len(WORKLOAD_CLASSES)),
        np.asarray(anomalies, dtype=np.int64),
        np.asarray(node_names),
        np.asarray(stamps, dtype=np.int64),
        params,
    )


def regime_distribution(labels: np.ndarray) -> dict[str, int]:
    counts = np.bincount(labels, minlength=len(REGIMES))
    return {r: int(c) for r, c in zip(REGIMES, counts, strict=True)}


def anomaly_distribution(labels: np.ndarray) -> dict[str, int]:
    out = {"normal": int((labels < 0).sum())}
    for i, kind in enumerate(ANOMALY_KINDS):
        out[kind] = int((labels == i).sum())
    return out
