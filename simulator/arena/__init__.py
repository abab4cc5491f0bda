"""Offline arena: placement policies compared on the same trace arrivals (issue 21). See docs/arena.md."""

from simulator.arena.kube_default import NodeResources, NodeScore, PodRequest, fits, score
from simulator.arena.policies import POLICIES, KubeDefaultPolicy, PlacementPolicy, RandomPolicy, make_policy

__all__ = [
    "POLICIES",
    "KubeDefaultPolicy",
    "NodeResources",
    "NodeScore",
    "PlacementPolicy",
    "PodRequest",
    "RandomPolicy",
    "fits",
    "make_policy",
    "score",
]
