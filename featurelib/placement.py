"""The learned placement policy's state and Q-table, shared by the arena trainer and the scheduler extender.

One definition of the discretised state (:func:`state_key`) so the extender serves exactly the keys the
arena trained on (issue 22). The key of binding a pod on a candidate node is::

    <pod class index>|<CPU request bin>|<regime>|<confidence bin>|<slowdown bin>|<CPU fill bin>|<memory bin>[|<classes>]

split into the pod's part (:func:`pod_part`: depends on the node only through its allocatable CPU) and the
node's part (:func:`regime_part` + :func:`fill_part`), which the extender caches per
node and class. ``extender+pods`` appends one
bit per workload class already running on the node. Bins use ``bisect_right`` (numpy's
``searchsorted(side="right")`` gives the same bins; bisect is ~20x cheaper per scalar, which matters at
5,000 candidates per scheduler call).

:class:`PlacementModel` is the tabular Q-function (state key → expected reward); the arena's training
updates it, the extender only reads it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import numpy as np
import orjson

from contracts.models import UNKNOWN_REGIME, WORKLOAD_CLASSES

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
CLASS_INDEX: Final = {c: i for i, c in enumerate(WORKLOAD_CLASSES)}


class RegimeLike(Protocol):
    """What the state reads of a regime label (the extender's ``RegimeIn`` is one)."""

    @property
    def regime(self) -> str: ...

    @property
    def confidence(self) -> float: ...

    @property
    def interference(self) -> tuple[tuple[str, float], ...]: ...


def bin_of(x: float, edges: Sequence[float]) -> int:
    return bisect_right(edges, x)


def regime_part(label: RegimeLike | None, workload_class: str) -> str:
    if label is None:
        return "absent|-|-"
    if label.regime == UNKNOWN_REGIME or not label.interference:
        return f"{UNKNOWN_REGIME}|-|-"
    pred = dict(label.interference).get(workload_class)
    p = "-" if pred is None else str(bin_of(pred, PRED_EDGES))
    return f"{label.regime}|{bin_of(label.confidence, CONF_EDGES)}|{p}"


def pod_part(workload_class: str, milli_cpu: int, allocatable_milli_cpu: int) -> str:
    return f"{CLASS_INDEX[workload_class]}|{bin_of(milli_cpu / allocatable_milli_cpu, REQ_EDGES)}"


def fill_part(
    *,
    requested_milli_cpu: int,
    allocatable_milli_cpu: int,
    requested_memory: int,
    allocatable_memory: int,
    pods: int,
    resident_classes: Iterable[int],
    features: str,
) -> str:
    """The node's fill and (``extender+pods``) its residents' classes: the key's tail."""
    cpu_bin = "e" if pods == 0 else str(bin_of(requested_milli_cpu / allocatable_milli_cpu, CPU_EDGES))
    part = f"{cpu_bin}|{bin_of(requested_memory / allocatable_memory, MEM_EDGES)}"
    if features == "extender+pods":
        present = {int(c) for c in resident_classes}
        part += "|" + "".join("1" if c in present else "0" for c in range(len(WORKLOAD_CLASSES)))
    elif features != "extender":
        raise ValueError(f"unknown feature set {features!r}; known: {FEATURE_SETS}")
    return part


def state_key(
    workload_class: str,
    milli_cpu: int,
    label: RegimeLike | None,
    *,
    requested_milli_cpu: int,
    allocatable_milli_cpu: int,
    requested_memory: int,
    allocatable_memory: int,
    pods: int,
    resident_classes: Iterable[int],
    features: str,
) -> str:
    """Discretised state of binding a pod (class, CPU request) on a node; a Q-table key."""
    fill = fill_part(
        requested_milli_cpu=requested_milli_cpu,
        allocatable_milli_cpu=allocatable_milli_cpu,
        requested_memory=requested_memory,
        allocatable_memory=allocatable_memory,
        pods=pods,
        resident_classes=resident_classes,
        features=features,
    )
    return f"{pod_part(workload_class, milli_cpu, allocatable_milli_cpu)}|{regime_part(label, workload_class)}|{fill}"


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
        return self.default

    @property
    def default(self) -> float:
        """Q of a state never visited: the table's mean."""
        if self._default is None:
            self._default = float(np.mean(list(self.values.values()))) if self.values else 0.0
        return self._default

    def update(self, key: str, reward: float, *, gamma: float = 0.0, next_max: float = 0.0) -> None:
        """Visit-count learning rate (1/n, floored at ``alpha_min``): early visits average, later ones track."""
        n = self.counts.get(key, 0) + 1
        self.counts[key] = n
        self.values[key] = q_update(
            self.values.get(key, 0.0), reward, max(1.0 / n, self.alpha_min), gamma=gamma, next_max=next_max
        )
        self._default = None

    def to_json(self) -> bytes:
        doc = {
            "features": self.features,
            "alpha_min": self.alpha_min,
            "default": self.q("\0"),
            "values": dict(sorted(self.values.items())),
            "counts": dict(sorted(self.counts.items())),
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"

    @classmethod
    def from_json(cls, raw: bytes) -> PlacementModel:
        doc = orjson.loads(raw)
        features = str(doc["features"])
        if features not in FEATURE_SETS:
            raise ValueError(f"unknown feature set {features!r}; known: {FEATURE_SETS}")
        return cls(
            features,
            {str(k): float(v) for k, v in doc["values"].items()},
            {str(k): int(v) for k, v in doc.get("counts", {}).items()},
            float(doc.get("alpha_min", 0.02)),
        )


def load_placement_model(path: Path) -> PlacementModel:
    """A version directory (holding ``q_table.json``) or a model root whose ``CURRENT`` names one."""
    version = path
    if not (path / TABLE_FILE).is_file():
        current = path / "CURRENT"
        if not current.is_file():
            raise ValueError(
                f"{path}: neither a placement model version ({TABLE_FILE}) nor a root (CURRENT); "
                "train one: borgctl train placement --out models/placement/<version>"
            )
        version = path / current.read_text().strip()
    model = PlacementModel.from_json((version / TABLE_FILE).read_bytes())
    if (version / CARD_FILE).is_file():
        model.card = orjson.loads((version / CARD_FILE).read_bytes())
    return model
