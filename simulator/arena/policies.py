"""Placement policies the offline arena calls: given a pod and the nodes, the index of the chosen node.

Every policy sees the same arrivals; randomness comes only from the generator seeded at construction,
so one seed gives one placement sequence. ``kube-default`` mirrors the kube-scheduler v1.36.3 default
profile's resource plugins (:mod:`simulator.arena.kube_default`), ``random`` picks uniformly among the
nodes that pass the same Filter — the floor any placement policy has to beat.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from simulator.arena.kube_default import NodeResources, PodRequest, fits, num_feasible_nodes_to_find, score


class PlacementPolicy(Protocol):
    name: str

    def choose(self, pod: PodRequest, nodes: Sequence[NodeResources]) -> int | None:
        """Index into ``nodes`` of the node to bind ``pod`` to, or ``None`` when no node passes the Filter."""
        ...


class KubeDefaultPolicy:
    """Filter, score (Fit LeastAllocated + BalancedAllocation, weight 1 each), best total wins.

    Ties: uniform among the best nodes from a generator seeded with ``seed`` (the pre-heap ``selectHost``
    behaviour; v1.36.3 without extenders leaves ties to goroutine finishing order, which no seed can
    reproduce). ``sample_nodes`` emulates ``numFeasibleNodesToFind`` and the rotating
    ``nextStartNodeIndex`` the way a single-threaded Filter would visit nodes; it only matters with 100+
    nodes.
    """

    name = "kube-default"

    def __init__(self, seed: int, *, sample_nodes: bool = True) -> None:
        self._rng = random.Random(seed)
        self._sample_nodes = sample_nodes
        self._next_start = 0

    def feasible(self, pod: PodRequest, nodes: Sequence[NodeResources]) -> list[int]:
        """Indices of the nodes the scheduler would score, in the order it visits them."""
        n = len(nodes)
        if n == 0:
            return []
        want = num_feasible_nodes_to_find(n) if self._sample_nodes else n
        found: list[int] = []
        processed = 0
        for step in range(n):
            i = (self._next_start + step) % n
            processed += 1
            if fits(pod, nodes[i]):
                found.append(i)
                if len(found) == want:
                    break
        self._next_start = (self._next_start + processed) % n
        return found

    def choose(self, pod: PodRequest, nodes: Sequence[NodeResources]) -> int | None:
        candidates = self.feasible(pod, nodes)
        if not candidates:
            return None
        totals = [score(pod, nodes[i]).total for i in candidates]
        best = max(totals)
        return self._rng.choice([i for i, t in zip(candidates, totals, strict=True) if t == best])


class RandomPolicy:
    """Uniform among the nodes that pass the NodeResourcesFit Filter."""

    name = "random"

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def choose(self, pod: PodRequest, nodes: Sequence[NodeResources]) -> int | None:
        feasible = [i for i, node in enumerate(nodes) if fits(pod, node)]
        return self._rng.choice(feasible) if feasible else None


POLICIES: Final[dict[str, Callable[[int], PlacementPolicy]]] = {
    KubeDefaultPolicy.name: KubeDefaultPolicy,
    RandomPolicy.name: RandomPolicy,
}


def make_policy(name: str, seed: int) -> PlacementPolicy:
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {sorted(POLICIES)}") from None
    return factory(seed)
