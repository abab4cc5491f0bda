"""The kube-scheduler's default resource Filter and Score, ported line by line for the offline arena.

Source read: ``k8s.io/kubernetes@v1.36.3`` (the version of the local kube-apiserver), from the Go
module cache the control-plane build fills (``~/go/pkg/mod/k8s.io/kubernetes@v1.36.3``):

* ``pkg/scheduler/apis/config/v1/default_plugins.go`` — default profile: ``NodeResourcesFit`` weight 1,
  ``NodeResourcesBalancedAllocation`` weight 1 (both MultiPoint: Filter + Score).
* ``pkg/scheduler/apis/config/v1/defaults.go`` — ``NodeResourcesFitArgs.ScoringStrategy`` defaults to
  ``LeastAllocated`` over ``defaultResourceSpec`` = [cpu weight 1, memory weight 1]; the same resource
  list is the default of ``NodeResourcesBalancedAllocationArgs.Resources``.
* ``pkg/scheduler/framework/plugins/noderesources/fit.go`` — ``fitsRequest`` (Filter), ``Fit.Score``.
* ``.../noderesources/least_allocated.go`` — ``leastResourceScorer`` / ``leastRequestedScore``.
* ``.../noderesources/balanced_allocation.go`` — ``BalancedAllocation.PreScore`` (best-effort skip),
  ``balancedResourceScorer`` / ``balancedResourceScore``.
* ``.../noderesources/resource_allocation.go`` — which requests each scorer sees (``useRequested``).
* ``pkg/scheduler/util/pod_resources.go`` — ``DefaultMilliCPURequest = 100``,
  ``DefaultMemoryRequest = 200 * 1024 * 1024``.
* ``pkg/scheduler/framework/runtime/framework.go`` ``RunScorePlugins`` and
  ``pkg/scheduler/schedule_one.go`` (``prioritizeNodes``, ``nodeScoreHeap``, ``numFeasibleNodesToFind``).

Filter (``fitsRequest``), on the pod's *actual* requests (no defaults)::

    pods_on_node + 1 > allowed_pods                           -> does not fit ("Too many pods")
    cpu == 0 and memory == 0                                  -> fits (nothing else checked)
    cpu > 0    and cpu    > allocatable_cpu - requested_cpu   -> does not fit
    memory > 0 and memory > allocatable_mem - requested_mem   -> does not fit

NodeResourcesFit score, LeastAllocated (``useRequested = false``: the node's *NonZeroRequested* sum plus the
pod's request with 100 m CPU / 200 MiB substituted for a missing request), all int64::

    r_i   = node_non_zero_requested_i + pod_non_zero_i
    s_i   = 0 if alloc_i == 0 or r_i > alloc_i else (alloc_i - r_i) * 100 // alloc_i
    score = sum(s_i * w_i) // sum(w_i)        (resources with alloc_i == 0 skipped; w_cpu = w_mem = 1)

NodeResourcesBalancedAllocation (``useRequested = true``: actual requests, no defaults). v1.36 scores the
*change* in balance the pod causes, not the balance after placement as older releases did::

    f_i(x)   = min(x_i / alloc_i, 1.0)                           (float64; alloc_i == 0 skipped)
    std(x)   = |f_cpu - f_mem| / 2                               (exactly 2 resources; 0 if fewer;
                                                                   population std-dev if more)
    bal(x)   = int64((1 - std(x)) * 100)                          (truncation; in [50, 100])
    score    = 100/2 + (100/2 + bal(allocated + pod) - bal(allocated)) / 2     (int64 division)

A pod requesting neither cpu nor memory (best effort) makes BalancedAllocation's PreScore return Skip: the
plugin contributes nothing to any node (:func:`balanced_allocation_score` returns ``None``).

Combination (``RunScorePlugins``): neither plugin has ``ScoreExtensions`` (no NormalizeScore), so a node's
total is ``1 * fit + 1 * balanced``. The other default-profile score plugins (TaintToleration,
NodeAffinity, PodTopologySpread, InterPodAffinity, ImageLocality) see no taints, affinities, spread
constraints or images in the arena and give every node the same score, so they cannot change the argmax
and are left out.

Selection: ``numFeasibleNodesToFind`` — with fewer than 100 nodes every node is filtered and scored; with
more, filtering starts at ``nextStartNodeIndex`` (advanced by the nodes processed each cycle) and stops
after ``max(100, n * max(5, 50 - n // 125) // 100)`` feasible nodes. Among equal totals v1.36.3 pops a
heap whose ``Randomizer`` tie-breaker is only drawn when extenders are configured, so without extenders
the tie is decided by the order parallel Filter goroutines finished in — arbitrary, not reproducible.
Older releases' ``selectHost`` sampled uniformly among the best (reservoir sampling); the arena does that,
from a seeded generator, so runs are reproducible (see :mod:`simulator.arena.policies`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

MAX_NODE_SCORE: Final = 100
DEFAULT_MILLI_CPU_REQUEST: Final = 100  # schedutil.DefaultMilliCPURequest
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024  # schedutil.DefaultMemoryRequest (200 MiB)
DEFAULT_MAX_PODS: Final = 110  # kubelet --max-pods default, the node's allocatable "pods"
MIN_FEASIBLE_NODES_TO_FIND: Final = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: Final = 5

# Default profile plugin weights (default_plugins.go) and resource weights (defaults.go).
FIT_WEIGHT: Final = 1
BALANCED_ALLOCATION_WEIGHT: Final = 1
CPU_WEIGHT: Final = 1
MEMORY_WEIGHT: Final = 1


def _go_div(a: int, b: int) -> int:
    """Go's int64 ``/``: truncates toward zero (Python's ``//`` floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@dataclass(frozen=True, slots=True)
class PodRequest:
    """A one-container pod's requests; 0 means the request is not set."""

    milli_cpu: int
    memory: int  # bytes

    def __post_init__(self) -> None:
        if self.milli_cpu < 0 or self.memory < 0:
            raise ValueError(f"negative request: {self}")

    @property
    def non_zero_milli_cpu(self) -> int:
        # The arena's pods have one container, so "request missing" and "request 0" coincide.
        return self.milli_cpu or DEFAULT_MILLI_CPU_REQUEST

    @property
    def non_zero_memory(self) -> int:
        return self.memory or DEFAULT_MEMORY_REQUEST

    @property
    def best_effort(self) -> bool:
        return self.milli_cpu == 0 and self.memory == 0


@dataclass(frozen=True, slots=True)
class NodeResources:
    """What the scheduler's NodeInfo holds for the default plugins: allocatable and the two request sums."""

    allocatable_milli_cpu: int
    allocatable_memory: int
    requested_milli_cpu: int = 0
    requested_memory: int = 0
    # Sums of PodRequest.non_zero_*; the LeastAllocated score reads these, the Filter reads requested_*.
    non_zero_requested_milli_cpu: int = 0
    non_zero_requested_memory: int = 0
    pods: int = 0
    allowed_pods: int = DEFAULT_MAX_PODS

    @classmethod
    def with_pods(
        cls,
        allocatable_milli_cpu: int,
        allocatable_memory: int,
        pods: Iterable[PodRequest] = (),
        allowed_pods: int = DEFAULT_MAX_PODS,
    ) -> NodeResources:
        node = cls(allocatable_milli_cpu, allocatable_memory, allowed_pods=allowed_pods)
        for pod in pods:
            node = node.add(pod)
        return node

    def add(self, pod: PodRequest) -> NodeResources:
        return self._shift(pod, 1)

    def remove(self, pod: PodRequest) -> NodeResources:
        return self._shift(pod, -1)

    def _shift(self, pod: PodRequest, sign: int) -> NodeResources:
        return NodeResources(
            self.allocatable_milli_cpu,
            self.allocatable_memory,
            self.requested_milli_cpu + sign * pod.milli_cpu,
            self.requested_memory + sign * pod.memory,
            self.non_zero_requested_milli_cpu + sign * pod.non_zero_milli_cpu,
            self.non_zero_requested_memory + sign * pod.non_zero_memory,
            self.pods + sign,
            self.allowed_pods,
        )


def fits(pod: PodRequest, node: NodeResources) -> bool:
    """NodeResourcesFit Filter (``fitsRequest``) for pods, cpu and memory."""
    if node.pods + 1 > node.allowed_pods:
        return False
    if pod.best_effort:
        return True
    free_cpu = node.allocatable_milli_cpu - node.requested_milli_cpu
    if pod.milli_cpu > 0 and pod.milli_cpu > free_cpu:
        return False
    free_mem = node.allocatable_memory - node.requested_memory
    return not (pod.memory > 0 and pod.memory > free_mem)


def least_requested_score(requested: int, capacity: int) -> int:
    """``leastRequestedScore``: the unused share on a 0..100 scale, 0 when over-committed."""
    if capacity == 0 or requested > capacity:
        return 0
    return _go_div((capacity - requested) * MAX_NODE_SCORE, capacity)


def least_allocated_score(pod: PodRequest, node: NodeResources) -> int:
    """NodeResourcesFit Score with the default LeastAllocated strategy (cpu and memory, weight 1 each)."""
    terms = (
        (node.non_zero_requested_milli_cpu + pod.non_zero_milli_cpu, node.allocatable_milli_cpu, CPU_WEIGHT),
        (node.non_zero_requested_memory + pod.non_zero_memory, node.allocatable_memory, MEMORY_WEIGHT),
    )
    score = weight_sum = 0
    for requested, allocatable, weight in terms:
        if allocatable == 0:
            continue
        score += least_requested_score(requested, allocatable) * weight
        weight_sum += weight
    return 0 if weight_sum == 0 else _go_div(score, weight_sum)


def balanced_resource_score(requested: tuple[int, ...], allocatable: tuple[int, ...]) -> int:
    """``balancedResourceScore``: ``int64((1 - std) * 100)`` of the requested/allocatable fractions."""
    fractions = [min(r / a, 1.0) for r, a in zip(requested, allocatable, strict=True) if a != 0]
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        acc = 0.0
        for f in fractions:
            acc = acc + (f - mean) * (f - mean)
        std = math.sqrt(acc / len(fractions))
    return int((1 - std) * float(MAX_NODE_SCORE))  # int() truncates toward zero, like Go's int64()


def balanced_allocation_score(pod: PodRequest, node: NodeResources) -> int | None:
    """NodeResourcesBalancedAllocation Score; ``None`` when PreScore skips the plugin (best-effort pod)."""
    if pod.best_effort:
        return None
    allocatable = (node.allocatable_milli_cpu, node.allocatable_memory)
    allocated = (node.requested_milli_cpu, node.requested_memory)
    requested = (allocated[0] + pod.milli_cpu, allocated[1] + pod.memory)
    with_pod = balanced_resource_score(requested, allocatable)
    without_pod = balanced_resource_score(allocated, allocatable)
    half = _go_div(MAX_NODE_SCORE, 2)
    return half + _go_div(half + with_pod - without_pod, 2)


@dataclass(frozen=True, slots=True)
class NodeScore:
    fit: int
    balanced: int | None  # None: plugin skipped for this pod

    @property
    def total(self) -> int:
        return FIT_WEIGHT * self.fit + BALANCED_ALLOCATION_WEIGHT * (self.balanced or 0)


def score(pod: PodRequest, node: NodeResources) -> NodeScore:
    """Per-plugin scores of one feasible node; ``total`` is the weighted sum the scheduler ranks by."""
    return NodeScore(least_allocated_score(pod, node), balanced_allocation_score(pod, node))


def num_feasible_nodes_to_find(num_all_nodes: int, percentage_of_nodes_to_score: int = 0) -> int:
    """``numFeasibleNodesToFind``: how many feasible nodes the scheduler collects before it stops filtering."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    percentage = percentage_of_nodes_to_score
    if percentage == 0:
        percentage = max(50 - _go_div(num_all_nodes, 125), MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(_go_div(num_all_nodes * percentage, 100), MIN_FEASIBLE_NODES_TO_FIND)
