"""Workload kinds, their classes, and the interference model (pure, no I/O).

Resources a co-runner puts pressure on: ``llc`` (cache capacity), ``membw`` (DRAM
bandwidth), ``core`` (execution ports / SMT siblings) and ``frontend`` (i-cache,
decoders, branch predictor). ``core`` and ``frontend`` both show up as the ``core``
contention regime.

Interference (the conservative rule the regime service also follows): a workload of
class ``c`` sharing a node with co-runners ``j`` is slowed down by

    slowdown(c) = max_j ( 1 + sum_r SENSITIVITY[c][r] * excess(pressure_j[r]) )

i.e. one co-runner's effects on different resources add up, but the effects of
several co-runners are never summed: the worst co-runner decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from contracts.models import REGIMES, WORKLOAD_CLASSES

RESOURCES: Final = ("llc", "membw", "core", "frontend")
RESOURCE_REGIME: Final = {"llc": "llc", "membw": "membw", "core": "core", "frontend": "core"}
REGIME_THRESHOLD: Final = 0.5
"""A node is in a resource's regime when some co-runner's pressure on it reaches this."""
GENTLE_LIMIT: Final = 0.4
"""Co-runners of a ``none`` node keep every pressure below this."""
FREE_PRESSURE: Final = 0.25
"""Pressure below this costs nothing (fits in the headroom every node has)."""

SENSITIVITY: Final[dict[str, tuple[float, float, float, float]]] = {
    # per unit excess pressure on (llc, membw, core, frontend)
    "cpu_bound": (0.10, 0.05, 0.90, 0.30),
    "llc_sensitive": (1.20, 0.40, 0.20, 0.10),
    "memory_bound": (0.30, 1.50, 0.10, 0.05),
    "frontend_bound": (0.15, 0.10, 0.40, 1.00),
}
SENSITIVITY_MATRIX: Final = np.array([SENSITIVITY[c] for c in WORKLOAD_CLASSES], dtype=np.float64)


@dataclass(frozen=True)
class WorkloadKind:
    """A workload's solo behaviour and the pressure it exerts at full intensity."""

    name: str
    workload_class: str
    ipc: float
    llc_apki: float
    """LLC accesses per kilo-instruction."""
    llc_miss_ratio: float
    branch_pki: float
    branch_miss_ratio: float
    frontend_stall: float
    """Fraction of cycles stalled in the frontend when running alone."""
    backend_stall: float
    cores: float
    mem_gb: float
    pressure: tuple[float, float, float, float]

    @property
    def dominant(self) -> str:
        return RESOURCES[int(np.argmax(self.pressure))]


def _k(
    name: str,
    cls: str,
    ipc: float,
    apki: float,
    miss: float,
    br: float,
    brm: float,
    fe: float,
    be: float,
    cores: float,
    mem: float,
    pressure: tuple[float, float, float, float],
) -> WorkloadKind:
    return WorkloadKind(name, cls, ipc, apki, miss, br, brm, fe, be, cores, mem, pressure)


KINDS: Final[dict[str, WorkloadKind]] = {
    k.name: k
    for k in (
        _k("compress", "cpu_bound", 2.2, 1.5, 0.20, 150, 0.020, 0.08, 0.15, 4, 2, (0.15, 0.10, 0.70, 0.15)),
        _k("crypto", "cpu_bound", 3.0, 0.3, 0.10, 80, 0.005, 0.04, 0.10, 2, 1, (0.05, 0.05, 0.80, 0.10)),
        _k("video_encode", "cpu_bound", 2.5, 3.0, 0.30, 100, 0.030, 0.06, 0.20, 8, 4, (0.25, 0.20, 0.75, 0.15)),
        _k("monte_carlo", "cpu_bound", 2.0, 0.5, 0.10, 120, 0.040, 0.05, 0.12, 6, 1, (0.05, 0.05, 0.65, 0.10)),
        _k("kv_cache", "llc_sensitive", 1.2, 25, 0.15, 180, 0.015, 0.12, 0.35, 4, 16, (0.80, 0.30, 0.20, 0.15)),
        _k("sql_join", "llc_sensitive", 1.0, 30, 0.25, 160, 0.030, 0.10, 0.40, 6, 24, (0.75, 0.35, 0.25, 0.10)),
        _k("graph_bfs", "llc_sensitive", 0.8, 40, 0.30, 200, 0.060, 0.08, 0.45, 4, 8, (0.85, 0.40, 0.15, 0.10)),
        _k("search_index", "llc_sensitive", 1.4, 20, 0.20, 190, 0.040, 0.18, 0.30, 8, 32, (0.70, 0.25, 0.30, 0.25)),
        _k("stream_triad", "memory_bound", 0.5, 60, 0.90, 40, 0.001, 0.02, 0.75, 8, 32, (0.40, 0.90, 0.10, 0.05)),
        _k("spmv", "memory_bound", 0.6, 50, 0.75, 80, 0.020, 0.04, 0.65, 8, 24, (0.45, 0.85, 0.10, 0.05)),
        _k("analytics_scan", "memory_bound", 0.7, 45, 0.70, 100, 0.020, 0.05, 0.60, 12, 64, (0.40, 0.80, 0.15, 0.05)),
        _k("embedding_train", "memory_bound", 0.8, 35, 0.60, 60, 0.010, 0.05, 0.55, 16, 48, (0.45, 0.75, 0.20, 0.05)),
        _k("web_frontend", "frontend_bound", 1.1, 8, 0.10, 220, 0.050, 0.35, 0.15, 4, 4, (0.20, 0.10, 0.30, 0.75)),
        _k("jvm_microservice", "frontend_bound", 0.9, 10, 0.12, 210, 0.040, 0.40, 0.18, 4, 8, (0.25, 0.10, 0.35, 0.80)),
        _k("php_app", "frontend_bound", 1.0, 7, 0.10, 230, 0.060, 0.38, 0.12, 2, 2, (0.15, 0.05, 0.30, 0.70)),
        _k("python_interp", "frontend_bound", 1.3, 5, 0.08, 240, 0.050, 0.30, 0.10, 2, 2, (0.10, 0.05, 0.40, 0.70)),
    )
}
KINDS_BY_CLASS: Final[dict[str, tuple[str, ...]]] = {
    c: tuple(name for name, k in KINDS.items() if k.workload_class == c) for c in WORKLOAD_CLASSES
}
CLASS_INDEX: Final = {c: i for i, c in enumerate(WORKLOAD_CLASSES)}
REGIME_INDEX: Final = {r: i for i, r in enumerate(REGIMES)}


def excess(pressure: np.ndarray) -> np.ndarray:
    """Pressure beyond the free headroom, scaled to 0..1."""
    return np.clip((pressure - FREE_PRESSURE) / (1.0 - FREE_PRESSURE), 0.0, 1.0)


def corunner_slowdowns(pressures: np.ndarray) -> np.ndarray:
    """Slowdown each class would see from each co-runner: shape (classes, co-runners)."""
    if pressures.size == 0:
        return np.ones((len(WORKLOAD_CLASSES), 0))
    out: np.ndarray = 1.0 + SENSITIVITY_MATRIX @ excess(pressures).T
    return out


def class_slowdowns(pressures: np.ndarray) -> np.ndarray:
    """Slowdown per workload class on a node with these co-runner pressures (max over co-runners)."""
    per = corunner_slowdowns(pressures)
    return per.max(axis=1) if per.shape[1] else np.ones(len(WORKLOAD_CLASSES))


def task_slowdowns(classes: Sequence[str], pressures: np.ndarray) -> np.ndarray:
    """Slowdown of each task on one node from the *other* tasks there (the worst of them, never summed).

    ``classes[k]`` and ``pressures[k]`` (resources) belong to task ``k``; a task alone runs at 1.0.
    """
    n = len(classes)
    if n < 2:
        return np.ones(n)
    index = np.array([CLASS_INDEX[c] for c in classes], dtype=np.int64)
    m: np.ndarray = 1.0 + SENSITIVITY_MATRIX[index] @ excess(np.asarray(pressures, dtype=np.float64).reshape(n, -1)).T
    np.fill_diagonal(m, 1.0)  # m[k, j]: what co-runner j does to task k; a task does not slow itself
    out: np.ndarray = m.max(axis=1)
    return out


def regime_of(pressures: np.ndarray) -> str:
    """The contention regime implied by co-runner pressures (worst co-runner per resource)."""
    if pressures.size == 0:
        return "none"
    worst = pressures.max(axis=0)
    active = {RESOURCE_REGIME[r] for r, p in zip(RESOURCES, worst, strict=True) if p >= REGIME_THRESHOLD}
    if not active:
        return "none"
    if len(active) == 1:
        return next(iter(active))
    return "mixed"


def holdout_split(
    kinds: Iterable[str] | None = None, *, per_class: int = 1, seed: int = 0
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split kinds into (train, held-out): ``per_class`` kinds of every class are held out."""
    pool = sorted(kinds) if kinds is not None else sorted(KINDS)
    rng = np.random.default_rng(seed)
    held: list[str] = []
    for cls in WORKLOAD_CLASSES:
        members = [k for k in pool if KINDS[k].workload_class == cls]
        if len(members) <= per_class:
            raise ValueError(
                f"class {cls} has {len(members)} kind(s); cannot hold out {per_class} and train on the rest"
            )
        held.extend(rng.choice(members, size=per_class, replace=False).tolist())
    train = tuple(k for k in pool if k not in held)
    return train, tuple(sorted(held))


def validate_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown workload kind(s) {unknown}; known: {sorted(KINDS)}")
    if not kinds:
        raise ValueError("at least one workload kind is needed")
    return tuple(dict.fromkeys(kinds))


# What a pod presses on (llc, membw, core, frontend) before its own counters are read: the mean over the regime
# model's training kinds of its class at the mean intensity 0.75 (the arrivals' U(0.5, 1)); never a held-out kind.
# ``tests/unit/test_extender_load_term.py`` checks these against the shipped card's training kinds.
CLASS_PRESSURE_GUESS: Final[tuple[tuple[float, float, float, float], ...]] = (
    (0.0625, 0.05, 0.5375, 0.0875),
    (0.6, 0.2625, 0.15, 0.0875),
    (0.3125, 0.6125, 0.1125, 0.0375),
    (0.125, 0.05, 0.2625, 0.55),
)
