"""Policies that look past requests: ``extender`` (our scheduler extender's scoring, unchanged, on what
the regime stage publishes) and ``oracle`` (the true interference; an upper bound, not deployable).

Both take the same ``choose(pod, nodes)`` call as :mod:`simulator.arena.policies`; the pod is a
:class:`TaskPod` (requests plus workload class and pressure) and the policy reads the arena's current
state (:class:`ArenaView`) it was built with.

``extender`` is what kube-scheduler does with the extender configured (deploy/scheduler-extender:
``weight: 5``): the default Filter, then the extender's filter (a node whose card gives the pod's class a
reason is removed), then ``fit + balanced + weight * 10 * extender_score`` (``MaxNodeScore /
MaxExtenderPriority`` = 10), best total wins, ties seeded as in kube-default. Cards come from
``services.scheduler_extender.scoring.evaluate`` on ``NodeInputs(regime=latest label)``: the arena has
no anomaly or risk stage, so those inputs are missing (neutral for every node, as in the live
extender when those topics are silent). With ``ScoringConfig.weight_corunner > 0`` the score also reads the
classes of the tasks on each node (``ArenaView.classes``: what the live extender's pod index holds) through
``scoring.placement_score`` (the co-runner term, docs/arena.md).

``oracle`` knows every co-runner's true pressure. The cost of a node is, first, how many
latency-sensitive tasks (the pod included) the placement pushes over the SLO slowdown, then the
slowdown the pod would see there minus one plus the slowdown it would add to each co-runner (the
simulator's model: max over co-runners, never summed); the cheapest nodes win, ties broken by the
kube-default total, then seeded. Greedy, one pod at a time: an upper bound for a placement-only
policy that knows no future arrivals, not a global optimum.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from services.scheduler_extender.scoring import (
    NodeCard,
    NodeInputs,
    RegimeIn,
    ScoringConfig,
    evaluate,
    placement_score,
)
from simulator.arena.kube_default import NodeResources, PodRequest, fits, score
from simulator.workloads import CLASS_INDEX, SENSITIVITY_MATRIX, excess

EXTENDER_WEIGHT: Final = 5
EXTENDER_SCALE: Final = 10  # MaxNodeScore (100) / MaxExtenderPriority (10)
COST_TIE: Final = 1e-9
SLO_SLOWDOWN: Final = 1.25


@dataclass(frozen=True, slots=True)
class TaskPod(PodRequest):
    """A pod the arena places: requests plus what the workload is (the oracle reads ``pressure``)."""

    workload_class: str = "cpu_bound"
    pressure: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    latency_sensitive: bool = False
    task_id: int = -1
    """The arena task it runs (what a per-pod estimate is kept under; never read by the oracle)."""
    job_id: int = -1
    """Its job (a job-level estimate prior reads it; never read by the oracle)."""


@dataclass
class ArenaView:
    """The arena's current state as the aware policies read it (the loop keeps it up to date)."""

    nodes: int
    now_ms: int = 0
    labels: list[RegimeIn | None] = field(default_factory=list)
    """Latest regime label per node (what the extender's reader holds)."""
    classes: list[np.ndarray] = field(default_factory=list)
    """Per node: class index of each resident task."""
    excess: list[np.ndarray] = field(default_factory=list)
    """Per node: (residents, 4) excess pressure of each resident task."""
    slowdown: list[np.ndarray] = field(default_factory=list)
    """Per node: current true slowdown of each resident task."""
    latency_sensitive: list[np.ndarray] = field(default_factory=list)
    """Per node: whether each resident task is latency-sensitive."""
    task_ids: list[list[int]] = field(default_factory=list)
    """Per node: the task id of each resident."""

    def __post_init__(self) -> None:
        self.labels = self.labels or [None] * self.nodes
        self.classes = self.classes or [np.zeros(0, dtype=np.int64) for _ in range(self.nodes)]
        self.excess = self.excess or [np.zeros((0, 4)) for _ in range(self.nodes)]
        self.slowdown = self.slowdown or [np.zeros(0) for _ in range(self.nodes)]
        self.latency_sensitive = self.latency_sensitive or [np.zeros(0, dtype=bool) for _ in range(self.nodes)]
        self.task_ids = self.task_ids or [[] for _ in range(self.nodes)]


def _tied_best(rng: random.Random, candidates: Sequence[int], totals: Sequence[float]) -> int:
    best = max(totals)
    return rng.choice([i for i, t in zip(candidates, totals, strict=True) if t == best])


def _class_of(pod: PodRequest) -> str:
    return pod.workload_class if isinstance(pod, TaskPod) else "cpu_bound"


class ExtenderPolicy:
    """kube-default + the scheduler extender's filter and weighted score (see the module docstring)."""

    name = "extender"

    def __init__(self, seed: int, view: ArenaView, cfg: ScoringConfig | None = None,
                 weight: int = EXTENDER_WEIGHT) -> None:
        self._rng = random.Random(seed)
        self._view = view
        self.cfg = cfg or ScoringConfig()
        self.weight = weight
        self._cards: list[NodeCard] | None = None
        self._cards_at: tuple[int, tuple[RegimeIn | None, ...]] | None = None
        self.filtered = 0  # decisions where the extender removed at least one feasible node
        self.cards_built = 0

    def cards(self) -> list[NodeCard]:
        key = (self._view.now_ms, tuple(self._view.labels))
        if self._cards is None or self._cards_at != key:
            self._cards = [evaluate(NodeInputs(regime=label), self.cfg, self._view.now_ms)
                           for label in self._view.labels]
            self._cards_at = key
            self.cards_built += len(self._cards)
        return self._cards

    def choose(self, pod: PodRequest, nodes: Sequence[NodeResources]) -> int | None:
        feasible = [i for i, node in enumerate(nodes) if fits(pod, node)]
        if not feasible:
            return None
        c = CLASS_INDEX[_class_of(pod)]
        cards = self.cards()
        passed = [i for i in feasible if cards[i].reasons[c] is None]
        if len(passed) < len(feasible):
            self.filtered += 1
        if not passed:
            return None
        totals = [score(pod, nodes[i]).total + self.weight * EXTENDER_SCALE * self.node_score(i, c, cards)
                  for i in passed]
        return _tied_best(self._rng, passed, totals)

    def node_score(self, node: int, class_index: int, cards: Sequence[NodeCard]) -> int:
        """The extender's 0–10 score of ``node`` for a pod of this class: its card, plus the co-runner term
        on the classes bound there (what the live extender's pod index holds) when configured."""
        return placement_score(cards[node], class_index, self._view.classes[node].tolist(), self.cfg)


def placement_cost(view: ArenaView, node: int, workload_class: str,
                   pressure: tuple[float, float, float, float], *, latency_sensitive: bool = False,
                   slo: float = SLO_SLOWDOWN) -> tuple[int, float]:
    """What placing the pod on ``node`` truly costs: (latency-sensitive tasks it pushes over the SLO,
    itself included; its own slowdown minus one plus the slowdown it adds to every co-runner)."""
    classes = view.classes[node]
    if not len(classes):
        return 0, 0.0
    ex = excess(np.asarray(pressure, dtype=np.float64))
    c = CLASS_INDEX[workload_class]
    own = float((1.0 + SENSITIVITY_MATRIX[c] @ view.excess[node].T).max())
    before = view.slowdown[node]
    after = np.maximum(before, 1.0 + SENSITIVITY_MATRIX[classes] @ ex)
    ls = view.latency_sensitive[node]
    pushed = int(((after > slo) & (before <= slo) & ls).sum()) + int(latency_sensitive and own > slo)
    return pushed, own - 1.0 + float((after - before).sum())


class OraclePolicy:
    """Least true interference (seen + caused), then kube-default, then seeded."""

    name = "oracle"

    def __init__(self, seed: int, view: ArenaView) -> None:
        self._rng = random.Random(seed)
        self._view = view

    def choose(self, pod: PodRequest, nodes: Sequence[NodeResources]) -> int | None:
        feasible = [i for i, node in enumerate(nodes) if fits(pod, node)]
        pressure = pod.pressure if isinstance(pod, TaskPod) else (0.0, 0.0, 0.0, 0.0)
        return least_interference(self._rng, self._view, pod, nodes, feasible, pressure)


def least_interference(rng: random.Random, view: ArenaView, pod: PodRequest, nodes: Sequence[NodeResources],
                       feasible: Sequence[int], pressure: tuple[float, float, float, float]) -> int | None:
    """The oracle's rule over ``feasible`` nodes, with ``pressure`` as the pod's and ``view`` as the residents'
    (the truth for the oracle; research tools pass beliefs): fewest latency-sensitive tasks pushed over the SLO,
    then least slowdown seen + caused (within ``COST_TIE``), then kube-default's total, then seeded."""
    if not feasible:
        return None
    ls = isinstance(pod, TaskPod) and pod.latency_sensitive
    costs = [placement_cost(view, i, _class_of(pod), pressure, latency_sensitive=ls) for i in feasible]
    low = min(costs)
    tied = [i for i, cost in zip(feasible, costs, strict=True)
            if cost[0] == low[0] and cost[1] <= low[1] + COST_TIE]
    return _tied_best(rng, tied, [float(score(pod, nodes[i]).total) for i in tied])
