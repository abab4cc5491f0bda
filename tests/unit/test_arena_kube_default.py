"""The arena's kube-default and random policies against hand-computed kube-scheduler v1.36.3 arithmetic.

Units: CPU in milli-cores, memory in bytes; Mi = 2**20, Gi = 2**30. Go int64 division truncates.
"""

from __future__ import annotations

from collections import Counter

import pytest

from simulator.arena import KubeDefaultPolicy, NodeResources, PodRequest, RandomPolicy, fits, make_policy, score
from simulator.arena.kube_default import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    balanced_allocation_score,
    balanced_resource_score,
    least_allocated_score,
    num_feasible_nodes_to_find,
)

Mi = 1024**2
Gi = 1024**3


def _node(cpu: int, mem: int, *pods: tuple[int, int]) -> NodeResources:
    return NodeResources.with_pods(cpu, mem, [PodRequest(c, m) for c, m in pods])


def test_upstream_default_request_constants() -> None:
    # pkg/scheduler/util/pod_resources.go: 100 (0.1 core) and 200 * 1024 * 1024.
    assert DEFAULT_MILLI_CPU_REQUEST == 100
    assert DEFAULT_MEMORY_REQUEST == 209_715_200


def test_three_nodes_per_plugin_scores_and_choice() -> None:
    pod = PodRequest(1000, 2 * Gi)
    nodes = [
        _node(4000, 8 * Gi, (1000, 2 * Gi)),
        _node(8000, 8 * Gi, (1000, 6 * Gi)),
        _node(16000, 32 * Gi),
    ]
    # node0  fit: cpu (4000-2000)*100/4000 = 50, mem (8Gi-4Gi)*100/8Gi = 50 -> (50+50)/2 = 50
    #        bal: before .25/.25 std 0 -> 100; after .5/.5 -> 100; 50 + (50+100-100)/2 = 75
    # node1  fit: cpu (8000-2000)*100/8000 = 75, mem (8Gi-8Gi)*100/8Gi = 0 -> 75/2 = 37
    #        bal: before .125/.75 std .3125 -> int(68.75) = 68; after .25/1.0 std .375 -> int(62.5) = 62
    #             50 + (50+62-68)/2 = 50 + 22 = 72
    # node2  fit: cpu 15000*100/16000 = 93(.75), mem 30Gi*100/32Gi = 93(.75) -> 93
    #        bal: before 0/0 -> 100; after .0625/.0625 -> 100; 75
    assert [least_allocated_score(pod, n) for n in nodes] == [50, 37, 93]
    assert [balanced_allocation_score(pod, n) for n in nodes] == [75, 72, 75]
    assert [score(pod, n).total for n in nodes] == [125, 109, 168]
    assert KubeDefaultPolicy(seed=0).choose(pod, nodes) == 2
    assert make_policy("kube-default", 0).choose(pod, nodes) == 2


def test_pod_without_requests_scores_with_non_zero_defaults_and_skips_balanced() -> None:
    pod = PodRequest(0, 0)
    # node0 already runs one pod without requests: requested 0/0, non-zero requested 100m/200Mi.
    nodes = [_node(1000, 1 * Gi, (0, 0)), _node(2000, 1 * Gi)]
    assert nodes[0].requested_milli_cpu == 0 and nodes[0].non_zero_requested_milli_cpu == 100
    # node0 fit: cpu r = 100+100 = 200 -> 800*100/1000 = 80; mem r = 400Mi -> 624*100/1024 = 60(.94)
    #            -> (80+60)/2 = 70   (without the defaults both terms would be 100)
    # node1 fit: cpu r = 100 -> 1900*100/2000 = 95; mem r = 200Mi -> 824*100/1024 = 80(.47) -> 175/2 = 87
    assert [least_allocated_score(pod, n) for n in nodes] == [70, 87]
    # Best-effort pod: BalancedAllocation's PreScore returns Skip, it adds nothing to any node.
    assert [balanced_allocation_score(pod, n) for n in nodes] == [None, None]
    assert [score(pod, n).total for n in nodes] == [70, 87]
    assert KubeDefaultPolicy(seed=0).choose(pod, nodes) == 1


def test_filter_uses_actual_requests_and_pod_count() -> None:
    full = _node(1000, 1 * Gi, (1000, 1 * Gi))
    # Nothing requested -> only the pod count is checked, even on a fully requested node.
    assert fits(PodRequest(0, 0), full)
    assert not fits(PodRequest(1, 0), full)
    assert not fits(PodRequest(0, 1), full)
    # Boundary: request == free fits (upstream rejects only request > allocatable - requested).
    half = _node(1000, 1 * Gi, (500, 512 * Mi))
    assert fits(PodRequest(500, 512 * Mi), half)
    assert not fits(PodRequest(501, 512 * Mi), half)
    assert not fits(PodRequest(500, 512 * Mi + 1), half)
    # allowed_pods: pods + 1 > allowed -> rejected.
    crowded = NodeResources.with_pods(64000, 64 * Gi, [PodRequest(0, 0)] * 2, allowed_pods=2)
    assert not fits(PodRequest(0, 0), crowded)
    assert fits(PodRequest(0, 0), crowded.remove(PodRequest(0, 0)))


def test_fits_nowhere_returns_none_for_both_policies() -> None:
    pod = PodRequest(1000, 1 * Gi)
    nodes = [
        _node(2000, 4 * Gi, (1500, 1 * Gi)),  # cpu: 1000 > 2000-1500 = 500
        _node(4000, 4 * Gi, (0, 3584 * Mi)),  # mem: 1Gi > 4Gi-3.5Gi = 512Mi
    ]
    assert KubeDefaultPolicy(seed=1).choose(pod, nodes) is None
    assert RandomPolicy(seed=1).choose(pod, nodes) is None
    assert KubeDefaultPolicy(seed=1).choose(pod, []) is None


def test_balanced_allocation_prefers_the_node_the_pod_balances() -> None:
    pod = PodRequest(500, 1536 * Mi)
    a = _node(4000, 4 * Gi, (2000, 512 * Mi))  # cpu-heavy: the memory-heavy pod evens it out
    b = _node(4000, 4 * Gi, (1000, 1 * Gi))  # balanced: the pod skews it
    # a fit: cpu r 2500 -> 1500*100/4000 = 37(.5); mem r 2048Mi -> 2048*100/4096 = 50 -> 87/2 = 43
    #   bal: before .5/.125 std .1875 -> int(81.25) = 81; after .625/.5 std .0625 -> int(93.75) = 93
    #        50 + (50+93-81)/2 = 50 + 31 = 81
    # b fit: cpu r 1500 -> 2500*100/4000 = 62(.5); mem r 2560Mi -> 1536*100/4096 = 37(.5) -> 99/2 = 49
    #   bal: before .25/.25 -> 100; after .375/.625 std .125 -> int(87.5) = 87; 50 + (50+87-100)/2 = 68
    assert (least_allocated_score(pod, a), least_allocated_score(pod, b)) == (43, 49)
    assert (balanced_allocation_score(pod, a), balanced_allocation_score(pod, b)) == (81, 68)
    # LeastAllocated alone would pick b; the sum 124 vs 117 picks a.
    assert KubeDefaultPolicy(seed=3).choose(pod, [b, a]) == 1


@pytest.mark.parametrize(
    ("node", "pod", "expected"),
    [
        # Cases copied from v1.36.3 balanced_allocation_test.go (memory in bytes there too).
        # "nothing scheduled, resources requested, differently sized nodes":
        #   .75/.5 std .125 -> 87; before 100 -> 50 + (50+87-100)/2 = 68;  .5/.5 -> 100 -> 75
        (_node(4000, 10000), PodRequest(3000, 5000), 68),
        (_node(6000, 10000), PodRequest(3000, 5000), 75),
        # "resources requested, pods scheduled with resources": 85 -> 82 gives 73, 97 -> 95 gives 74
        (_node(10000, 20000, (3000, 0)), PodRequest(3000, 5000), 73),
        (_node(10000, 20000, (3000, 5000)), PodRequest(3000, 5000), 74),
        # "... differently sized nodes": 90 -> 80 gives 70
        (_node(10000, 50000, (3000, 5000)), PodRequest(3000, 5000), 70),
        # "requested resources at node capacity": 75 -> 50 and 100 -> 75 both give 62
        (_node(6000, 10000, (3000, 0)), PodRequest(3000, 0), 62),
        (_node(6000, 10000, (3000, 5000)), PodRequest(3000, 0), 62),
    ],
)
def test_balanced_allocation_matches_upstream_table(node: NodeResources, pod: PodRequest, expected: int) -> None:
    assert balanced_allocation_score(pod, node) == expected


def test_balanced_resource_score_forms() -> None:
    # Two resources: std = |f0 - f1| / 2; fractions are capped at 1: min(3, 1) = 1 vs 0 -> std .5 -> 50.
    assert balanced_resource_score((3000, 0), (1000, 1000)) == 50
    # A resource with allocatable 0 is skipped; one fraction left -> std 0 -> 100.
    assert balanced_resource_score((500, 7), (1000, 0)) == 100
    # Three resources: fractions 0, .5, 1, mean .5, variance (.25+0+.25)/3, std .408 -> int(59.18) = 59.
    assert balanced_resource_score((0, 5, 10), (10, 10, 10)) == 59


def test_least_allocated_over_committed_resource_scores_zero() -> None:
    # Non-zero defaults can push r above allocatable: mem r = 200Mi + 200Mi > 300Mi -> 0; cpu 800*100/1000 = 80.
    node = _node(1000, 300 * Mi, (0, 0))
    assert least_allocated_score(PodRequest(100, 0), node) == (80 + 0) // 2


def test_ties_are_broken_by_the_seed_reproducibly() -> None:
    pod = PodRequest(250, 256 * Mi)
    nodes = [_node(4000, 8 * Gi) for _ in range(4)]  # identical: every total equal

    def run(seed: int) -> list[int | None]:
        policy = KubeDefaultPolicy(seed)
        return [policy.choose(pod, nodes) for _ in range(40)]

    first = run(7)
    assert first == run(7)
    assert set(first) == {0, 1, 2, 3}  # a fixed "first best" rule would give one index only
    assert any(run(s) != first for s in (8, 9, 10))
    # Without a tie the seed is irrelevant.
    skewed = [*nodes[:3], _node(8000, 16 * Gi)]
    assert {KubeDefaultPolicy(s).choose(pod, skewed) for s in range(10)} == {3}


def test_random_is_uniform_over_feasible_nodes() -> None:
    pod = PodRequest(1000, 1 * Gi)
    nodes = [
        _node(4000, 8 * Gi),
        _node(4000, 8 * Gi, (3000, 0)),  # feasible (1000 <= 4000 - 3000) but loaded: random must not care
        _node(4000, 8 * Gi, (3001, 0)),  # 1000 > 4000 - 3001: infeasible
        _node(64000, 256 * Gi),
        _node(2000, 2 * Gi),
    ]
    policy = make_policy("random", 123)
    draws = 8000
    counts = Counter(policy.choose(pod, nodes) for _ in range(draws))
    assert counts[2] == 0 and None not in counts
    # 4 feasible nodes: expect 2000 each, sd = sqrt(8000 * .25 * .75) ~ 38.7; +-150 is ~3.9 sd.
    for i in (0, 1, 3, 4):
        assert abs(counts[i] - draws / 4) < 150, counts
    # kube-default would always take the big node 3; random spreads over all four.
    assert KubeDefaultPolicy(seed=123).choose(pod, nodes) == 3
    # Same seed, same sequence.
    a, b = RandomPolicy(5), RandomPolicy(5)
    assert [a.choose(pod, nodes) for _ in range(50)] == [b.choose(pod, nodes) for _ in range(50)]


def test_num_feasible_nodes_to_find() -> None:
    # < 100 nodes: all; else n * max(5, 50 - n/125) / 100, at least 100.
    assert num_feasible_nodes_to_find(50) == 50
    assert num_feasible_nodes_to_find(100) == 100  # 100 * 50 / 100 = 50 -> raised to 100
    assert num_feasible_nodes_to_find(250) == 120  # 50 - 2 = 48%; 250 * 48 / 100 = 120
    assert num_feasible_nodes_to_find(1000) == 420  # 50 - 8 = 42%
    assert num_feasible_nodes_to_find(6000) == 300  # 50 - 48 = 2% -> floor 5% -> 300
    assert num_feasible_nodes_to_find(1000, percentage_of_nodes_to_score=20) == 200


def test_node_sampling_rotates_the_start_index() -> None:
    pod = PodRequest(100, 100 * Mi)
    nodes = [_node(4000, 8 * Gi) for _ in range(250)]
    policy = KubeDefaultPolicy(seed=0)
    assert policy.feasible(pod, nodes) == list(range(120))
    assert policy.feasible(pod, nodes) == list(range(120, 240))
    assert policy.feasible(pod, nodes) == [*range(240, 250), *range(110)]
    # Infeasible nodes count as processed: with the first 10 full, the next call starts at 130.
    crowded = [_node(4000, 8 * Gi, (4000, 0)) if i < 10 else n for i, n in enumerate(nodes)]
    fresh = KubeDefaultPolicy(seed=0)
    assert fresh.feasible(pod, crowded) == list(range(10, 130))
    assert fresh.feasible(pod, crowded)[0] == 130
    # sample_nodes=False scores every feasible node.
    assert len(KubeDefaultPolicy(seed=0, sample_nodes=False).feasible(pod, nodes)) == 250


def test_add_remove_round_trip_and_unknown_policy() -> None:
    empty = NodeResources(4000, 8 * Gi)
    pods = [PodRequest(0, 0), PodRequest(300, 0), PodRequest(0, 5 * Mi)]
    full = NodeResources.with_pods(4000, 8 * Gi, pods)
    assert (full.requested_milli_cpu, full.requested_memory) == (300, 5 * Mi)
    assert (full.non_zero_requested_milli_cpu, full.non_zero_requested_memory) == (100 + 300 + 100, 400 * Mi + 5 * Mi)
    for p in pods:
        full = full.remove(p)
    assert full == empty
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("nope", 0)
    with pytest.raises(ValueError, match="negative"):
        PodRequest(-1, 0)
