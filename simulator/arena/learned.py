"""``learned``: placement by a Q-function over (state, candidate node) trained in the offline arena (issue 22).

The state of a candidate is what the scheduler extender can know when a pod arrives, discretised
(:func:`state_key`): the pod's workload class and CPU request, the node's latest regime label (regime,
confidence bin, predicted slowdown bin for the pod's class, exactly the ``RegimeIn`` the extender
holds; ``absent`` before a first window, ``unknown`` when the model abstained) and the node's requested
CPU / memory utilisation. The ``extender+pods`` feature set adds which workload classes already run on the
node (the pods' class labels, which the API server holds; the ``extender`` set leaves them out).

The Q-function is a table (:class:`PlacementModel`): a key per discretised state, a value per key
(expected reward of binding there). ``choose`` scores every node that passes the kube-scheduler Filter
and binds on the highest Q; ties (and unseen states, which all get the table's mean) go to the
kube-default total, then to a seeded draw, so the policy is never worse-informed than kube-default on
states it has never seen. Training (:mod:`training.placement`) sets ``epsilon`` and ``record``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import orjson

from contracts.models import UNKNOWN_REGIME, WORKLOAD_CLASSES
from services.scheduler_extender.scoring import RegimeIn
from simulator.arena.aware import ArenaView, TaskPod
from simulator.arena.kube_default import NodeResources, PodRequest, fits, score
from simulator.workloads import CLASS_INDEX

FEATURE_SETS: Final = ("extender", "extender+pods")
TABLE_FILE: Final = "q_table.json"
ONNX_FILE: Final = "q_table.onnx"
CARD_FILE: Final = "model_card.json"
CONF_EDGES: Final = (0.5, 0.8)
PRED_EDGES: Final = (1.05, 1.25, 1.5)
"""Predicted slowdown bins: ~quiet, under the SLO (1.25), over it, far over it."""
CPU_EDGES: Final = (0.25, 0.5, 0.75)
MEM_EDGES: Final = (0.5,)
REQ_EDGES: Final = (0.1,)
"""Pod CPU request as a fraction of the node: small or large."""

Record = Callable[[TaskPod, str, float], None]


def _bin(x: float, edges: Sequence[float]) -> int:
    return int(np.searchsorted(np.asarray(edges), x, side="right"))


def _regime_part(label: RegimeIn | None, workload_class: str) -> str:
    if label is None:
        return "absent|-|-"
    if label.regime == UNKNOWN_REGIME or not label.interference:
        return f"{UNKNOWN_REGIME}|-|-"
    pred = dict(label.interference).get(workload_class)
    p = "-" if pred is None else str(_bin(pred, PRED_EDGES))
    return f"{label.regime}|{_bin(label.confidence, CONF_EDGES)}|{p}"


def state_key(pod: TaskPod, node: NodeResources, label: RegimeIn | None, resident_classes: np.ndarray,
              features: str) -> str:
    """Discretised state of binding ``pod`` on ``node`` (see the module docstring); a table key."""
    cpu = node.requested_milli_cpu / node.allocatable_milli_cpu
    mem = node.requested_memory / node.allocatable_memory
    cpu_bin = "e" if node.pods == 0 else str(_bin(cpu, CPU_EDGES))
    req = _bin(pod.milli_cpu / node.allocatable_milli_cpu, REQ_EDGES)
    key = (f"{CLASS_INDEX[pod.workload_class]}|{req}|{_regime_part(label, pod.workload_class)}|"
           f"{cpu_bin}|{_bin(mem, MEM_EDGES)}")
    if features == "extender+pods":
        present = set(np.asarray(resident_classes, dtype=np.int64).tolist())
        key += "|" + "".join("1" if c in present else "0" for c in range(len(WORKLOAD_CLASSES)))
    elif features != "extender":
        raise ValueError(f"unknown feature set {features!r}; known: {FEATURE_SETS}")
    return key


def q_update(q: float, reward: float, alpha: float, *, gamma: float = 0.0, next_max: float = 0.0) -> float:
    """One tabular Q-learning step: ``q + alpha * (reward + gamma * next_max - q)``."""
    return q + alpha * (reward + gamma * next_max - q)


@dataclass
class PlacementModel:
    """The tabular Q-function: value and visit count per state key."""

    features: str = "extender"
    values: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    alpha_min: float = 0.02
    card: dict[str, Any] = field(default_factory=dict)
    _default: float | None = None

    def q(self, key: str) -> float:
        if key in self.values:
            return self.values[key]
        if self._default is None:
            self._default = float(np.mean(list(self.values.values()))) if self.values else 0.0
        return self._default

    def update(self, key: str, reward: float, *, gamma: float = 0.0, next_max: float = 0.0) -> None:
        """Visit-count learning rate (1/n, floored at ``alpha_min``): early visits average, later ones track."""
        n = self.counts.get(key, 0) + 1
        self.counts[key] = n
        self.values[key] = q_update(self.values.get(key, 0.0), reward, max(1.0 / n, self.alpha_min),
                                    gamma=gamma, next_max=next_max)
        self._default = None

    def to_json(self) -> bytes:
        doc = {"features": self.features, "alpha_min": self.alpha_min, "default": self.q("\0"),
               "values": dict(sorted(self.values.items())), "counts": dict(sorted(self.counts.items()))}
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"

    @classmethod
    def from_json(cls, raw: bytes) -> PlacementModel:
        doc = orjson.loads(raw)
        features = str(doc["features"])
        if features not in FEATURE_SETS:
            raise ValueError(f"unknown feature set {features!r}; known: {FEATURE_SETS}")
        return cls(features, {str(k): float(v) for k, v in doc["values"].items()},
                   {str(k): int(v) for k, v in doc.get("counts", {}).items()}, float(doc.get("alpha_min", 0.02)))


def load_placement_model(path: Path) -> PlacementModel:
    """A version directory (holding ``q_table.json``) or a model root whose ``CURRENT`` names one."""
    version = path
    if not (path / TABLE_FILE).is_file():
        current = path / "CURRENT"
        if not current.is_file():
            raise ValueError(f"{path}: neither a placement model version ({TABLE_FILE}) nor a root (CURRENT); "
                             "train one: borgctl train placement --out models/placement/<version>")
        version = path / current.read_text().strip()
    model = PlacementModel.from_json((version / TABLE_FILE).read_bytes())
    if (version / CARD_FILE).is_file():
        model.card = orjson.loads((version / CARD_FILE).read_bytes())
    return model


class LearnedPolicy:
    """Highest Q among the feasible nodes; ties and unseen states by kube-default, then seeded."""

    name = "learned"

    def __init__(self, seed: int, view: ArenaView, model: PlacementModel, *, epsilon: float = 0.0,
                 record: Record | None = None) -> None:
        self._rng = random.Random(seed)
        self._view = view
        self.model = model
        self.epsilon = epsilon
        self._record = record

    def keys(self, pod: TaskPod, nodes: Sequence[NodeResources], candidates: Sequence[int]) -> list[str]:
        labels = self._view.labels
        return [state_key(pod, nodes[i], labels[i] if i < len(labels) else None, self._view.classes[i],
                          self.model.features) for i in candidates]

    def choose(self, pod: PodRequest, nodes: Sequence[NodeResources]) -> int | None:
        feasible = [i for i, node in enumerate(nodes) if fits(pod, node)]
        if not feasible:
            return None
        task = pod if isinstance(pod, TaskPod) else TaskPod(pod.milli_cpu, pod.memory)
        keys = self.keys(task, nodes, feasible)
        if self.epsilon > 0.0 and self._rng.random() < self.epsilon:
            k = self._rng.randrange(len(feasible))
        else:
            qs = [self.model.q(key) for key in keys]
            best = max(qs)
            tied = [k for k, q in enumerate(qs) if q >= best - 1e-12]
            if len(tied) > 1:
                totals = [score(task, nodes[feasible[k]]).total for k in tied]
                top = max(totals)
                tied = [k for k, t in zip(tied, totals, strict=True) if t == top]
            k = self._rng.choice(tied)
        i = feasible[k]
        if self._record is not None:
            self._record(task, keys[k], nodes[i].requested_milli_cpu / nodes[i].allocatable_milli_cpu)
        return i
