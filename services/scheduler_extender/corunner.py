"""The co-runner term of the extender's score (issue 21): a model-free penalty from the workload classes of
the pods already bound to a node (pure; docs/scheduler_extender.md "Score", docs/arena.md).

Kubernetes knows each pod's class from its label (``borg-orchestrator.io/workload-class``); the pod index
(``podindex.NodePods.classes``) holds the classes bound to each node. Interference in this project's model is
driven by the worst co-runner and is mostly a property of the two classes, so a class-by-class table says
how much a pod of class ``c`` is slowed beside a pod of class ``j`` before any counter is read.

``CORUNNER_SLOWDOWN[c][j]``: mean slowdown of a class-``c`` pod beside one class-``j`` co-runner, over the
regime model's **training kinds** of class ``j`` at intensities 0.5–1 (the same simulated labels its
interference heads learn from; never a held-out kind). Reproduce with ``.venv/bin/python -m
training.corunner`` (``tests/unit/test_extender_scoring_corunner.py`` checks these numbers against it). On a
real cluster this table would come from a profiling run of class pairs.

Only the slowdown of *latency-sensitive* pods counts (the classes that carry an SLO; batch beside batch costs
nothing here, so batch pods pack together and leave the quiet nodes to the pods that need them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Final

import numpy as np

from simulator.workloads import SENSITIVITY_MATRIX, excess

# rows: the pod slowed (victim); columns: the co-runner; both in WORKLOAD_CLASSES order
# (cpu_bound, llc_sensitive, memory_bound, frontend_bound). Regime model 20261126-232416-sim's train kinds.
CORUNNER_SLOWDOWN: Final[tuple[tuple[float, ...], ...]] = (
    (1.345, 1.049, 1.033, 1.158),
    (1.077, 1.577, 1.301, 1.048),
    (1.038, 1.203, 1.752, 1.024),
    (1.153, 1.074, 1.062, 1.417),
)
Table = tuple[tuple[float, ...], ...]


def corunner_harm(class_index: int, residents: Sequence[int], sensitive: Collection[int],
                  table: Table = CORUNNER_SLOWDOWN) -> float:
    """Expected slowdown (above 1) the placement brings to latency-sensitive pods: the pod's own when its class
    is in ``sensitive`` (its worst co-runner), plus, per sensitive resident, how much the pod raises that
    resident's worst co-runner (max over co-runners per pod as the interference model; summed over pods)."""
    harm = 0.0
    if class_index in sensitive:
        harm += max((table[class_index][j] for j in residents), default=1.0) - 1.0
    counts = Counter(residents)
    befores: dict[int, float] = {}  # a resident's worst co-runner among the others depends only on its class
    for r in residents:
        if r not in sensitive:
            continue
        before = befores.get(r)
        if before is None:
            before = befores[r] = max((table[r][j] for j, n in counts.items() if n > (j == r)), default=1.0)
        harm += max(0.0, table[r][class_index] - before)
    return harm


def corunner_penalty(class_index: int, residents: Sequence[int], sensitive: Collection[int], max_slowdown: float,
                     table: Table = CORUNNER_SLOWDOWN) -> float:
    """``harm / (max_slowdown - 1)`` capped to [0, 1], the scale of the regime's slowdown penalty."""
    return min(1.0, max(0.0, corunner_harm(class_index, residents, sensitive, table) / (max_slowdown - 1.0)))


# --------------------------------------------------------------------------- the load term (per-pod estimates)
Resident = tuple[int, Sequence[float], bool]
"""A pod bound to the node: (class index, estimated pressure on llc/membw/core/frontend, latency-sensitive)."""


def load_harm(class_index: int, pressure: Sequence[float], latency_sensitive: bool, residents: Sequence[Resident],
              slo_slowdown: float = 1.25) -> float:
    """The load term's harm of placing one pod among ``residents``, on per-pod pressure estimates.

    Slowdowns follow the interference model the regime model's labels come from (``simulator.workloads``: a
    pod's slowdown is set by its worst co-runner, per-class sensitivity to each resource's excess pressure).
    Harm = 1 for every latency-sensitive pod (the new one included) the placement pushes over ``slo_slowdown``,
    plus the slowdown above 1 it brings them (the new pod's own, each resident's increase): as the oracle ranks
    nodes, an SLO crossing outweighs any amount of mere slowdown.
    """
    if not residents:
        return 0.0
    classes = np.array([r[0] for r in residents], dtype=np.int64)
    ex = excess(np.array([r[1] for r in residents], dtype=np.float64).reshape(len(residents), 4))
    mine = excess(np.asarray(pressure, dtype=np.float64))
    harm = 0.0
    if latency_sensitive:
        own = float((1.0 + ex @ SENSITIVITY_MATRIX[class_index]).max())
        harm += (own - 1.0) + float(own > slo_slowdown)
    ls = np.array([r[2] for r in residents], dtype=bool)
    if ls.any():
        m = 1.0 + SENSITIVITY_MATRIX[classes] @ ex.T  # m[k, j]: what resident j does to resident k
        np.fill_diagonal(m, 1.0)
        before = m.max(axis=1)[ls]
        after = np.maximum(before, 1.0 + SENSITIVITY_MATRIX[classes[ls]] @ mine)
        harm += float((after - before).sum()) + float(((after > slo_slowdown) & (before <= slo_slowdown)).sum())
    return harm
