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

:func:`state_key` and :class:`PlacementModel` are defined in :mod:`featurelib.placement` (shared with the
scheduler extender's shadow scoring); this module adapts the arena's pod and node types to them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np

from featurelib.placement import (
    CARD_FILE,
    FEATURE_SETS,
    ONNX_FILE,
    TABLE_FILE,
    PlacementModel,
    load_placement_model,
    q_update,
)
from featurelib.placement import state_key as _state_key
from services.scheduler_extender.scoring import RegimeIn
from simulator.arena.aware import ArenaView, TaskPod
from simulator.arena.kube_default import NodeResources, PodRequest, fits, score

# The state and the table live in featurelib.placement, which the scheduler extender imports too (it must
# build the keys this arena trains on); re-exported here for the trainer and the arena CLI.
__all__ = ["CARD_FILE", "FEATURE_SETS", "ONNX_FILE", "TABLE_FILE", "LearnedPolicy", "PlacementModel",
           "load_placement_model", "q_update", "state_key"]

Record = Callable[[TaskPod, str, float], None]


def state_key(pod: TaskPod, node: NodeResources, label: RegimeIn | None, resident_classes: np.ndarray,
              features: str) -> str:
    """Discretised state of binding ``pod`` on ``node`` (see the module docstring); a table key."""
    return _state_key(pod.workload_class, pod.milli_cpu, label, requested_milli_cpu=node.requested_milli_cpu,
                      allocatable_milli_cpu=node.allocatable_milli_cpu, requested_memory=node.requested_memory,
                      allocatable_memory=node.allocatable_memory, pods=node.pods,
                      resident_classes=np.asarray(resident_classes, dtype=np.int64).tolist(), features=features)


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
