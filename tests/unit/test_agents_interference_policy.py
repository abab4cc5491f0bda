"""Corrective moves on per-pod load estimates (``services.agents.interference_policy``), by hand-computed cases.

The interference model: slowdown = max over co-runners of 1 + sensitivity[class] · excess(pressure), excess =
(p - 0.25) / 0.75 clipped to [0, 1]. An llc-sensitive pod (sensitivity llc 1.2, membw 0.4) beside a
memory-bound pod pressing (0.4, 0.9, 0.1, 0.05): excess (0.2, 0.8667, 0, 0) → 1 + 0.24 + 0.3467 = 1.587 > 1.25.
"""

from __future__ import annotations

import pytest

from services.agents.interference_policy import (
    SOURCE,
    MoveSettings,
    NodeLoad,
    PodLoad,
    assess,
    plan,
    proposals,
    targets_for,
)
from services.referee.policy import RefereeState, resolve
from services.referee.settings import RefereeSettings

MEMORY_HOG = (0.4, 0.9, 0.1, 0.05)
QUIET = (0.1, 0.1, 0.1, 0.1)
ROOM = (16_000, 64 << 30)
NOW = 1_700_000_000_000


def pod(key: str, cls: str, pressure: tuple[float, float, float, float], *, ls: bool = False, job: str = "j1",
        age_s: float = 60.0, cpu: int = 1000) -> PodLoad:
    return PodLoad(key, job, cls, ls, pressure, age_s, cpu, 1 << 30)


def node(name: str, *pods: PodLoad, free: tuple[int, int] = ROOM, schedulable: bool = True) -> NodeLoad:
    return NodeLoad(name, pods, free[0], free[1], schedulable)


def hot_node(name: str = "n0", **kw: object) -> NodeLoad:
    """A latency-sensitive llc pod slowed 1.59x by a batch memory hog (its job has a second pod elsewhere)."""
    return node(name, pod(f"ls/{name}-web", "llc_sensitive", QUIET, ls=True, job="web"),
                pod(f"batch/{name}-hog", "memory_bound", MEMORY_HOG, job="scan", **kw))  # type: ignore[arg-type]


def sibling(job: str = "scan") -> NodeLoad:
    return node("n9", pod(f"batch/{job}-2", "cpu_bound", QUIET, job=job), free=(0, 0))


def test_the_hog_is_moved_when_another_node_takes_it_safely() -> None:
    moves = plan([hot_node(), node("n1"), sibling()], MoveSettings())
    assert len(moves) == 1
    m = moves[0]
    assert (m.pod.key, m.node, m.relieved, m.targets) == ("batch/n0-hog", "n0", 1, 1)
    assert m.predicted_before == pytest.approx(1 + 1.2 * 0.2 + 0.4 * 0.65 / 0.75)


def test_the_latency_sensitive_pod_itself_is_the_fallback_candidate() -> None:
    # the hog's job has no other running pod (PDB-like rule): only the web pod may go, and it relieves itself
    moves = plan([hot_node(), node("n1"), node("n9", pod("ls/web-2", "cpu_bound", QUIET, job="web"))], MoveSettings())
    assert [(m.pod.key, m.relieved) for m in moves] == [("ls/n0-web", 1)]
    assert plan([hot_node(), node("n1")], MoveSettings(batch_only=True)) == []


def test_no_move_without_a_safe_target() -> None:
    full = node("n1", free=(500, 1 << 30))  # no room for the hog's 1000 mCPU
    assert plan([hot_node(), full, sibling()], MoveSettings()) == []
    # room, but a latency-sensitive llc pod lives there: the hog would push it over the SLO
    busy = node("n1", pod("ls/other", "llc_sensitive", QUIET, ls=True, job="o"))
    assert targets_for(hot_node().pods[1], "n0", [busy], MoveSettings()) == 0
    assert plan([hot_node(), busy, sibling()], MoveSettings()) == []
    assert plan([hot_node(), node("n1", schedulable=False), sibling()], MoveSettings()) == []


def test_young_moved_and_calm_pods_stay() -> None:
    assert plan([hot_node(age_s=5.0), node("n1"), sibling()], MoveSettings()) == []  # counters not in yet
    assert plan([hot_node(), node("n1"), sibling()], MoveSettings(), moved=frozenset({"batch/n0-hog"})) == []
    assert plan([hot_node(), node("n1"), sibling()], MoveSettings(margin=0.4)) == []  # 1.59 < 1.25 + 0.4
    assert len(plan([hot_node(), node("n1"), sibling()], MoveSettings(margin=0.3))) == 1
    calm = node("n0", pod("ls/web", "llc_sensitive", QUIET, ls=True, job="web"),
                pod("batch/q", "memory_bound", QUIET, job="scan"))
    assert plan([calm, node("n1"), sibling()], MoveSettings()) == []
    # the slowed pod is batch: no SLO to protect
    batch = node("n0", pod("batch/w", "llc_sensitive", QUIET, job="web"), pod("batch/h", "memory_bound", MEMORY_HOG))
    assert plan([batch, node("n1"), sibling()], MoveSettings()) == []


def test_an_observed_slowdown_names_the_victim_and_the_estimates_the_antagonist() -> None:
    # the estimates call the hog mild (0.3 membw: nobody predicted over 1.25), but the web pod's own counters
    # show 1.4x: the candidate is whoever lowers its predicted slowdown, here the (mild) hog, not the quiet pod
    mild = (0.3, 0.3, 0.1, 0.05)
    web = PodLoad("ls/web", "web", "llc_sensitive", True, QUIET, 60.0, 1000, 1 << 30, slowdown=1.4)
    hot = node("n0", web, pod("batch/hog", "memory_bound", mild, job="scan"), pod("batch/q", "cpu_bound", QUIET))
    moves = plan([hot, node("n1"), sibling(), node("n8", pod("batch/q2", "cpu_bound", QUIET, job="j1"), free=(0, 0))],
                 MoveSettings())
    assert [(m.pod.key, m.relieved, m.predicted_before) for m in moves] == [("batch/hog", 1, 1.4)]
    # observed under the SLO: no move, whatever the estimates say
    calm_web = PodLoad("ls/web", "web", "llc_sensitive", True, QUIET, 60.0, 1000, 1 << 30, slowdown=1.1)
    assert plan([node("n0", calm_web, pod("batch/h", "memory_bound", MEMORY_HOG, job="scan")), node("n1"),
                 sibling()], MoveSettings()) == []


def test_nodes_with_more_relief_go_first_and_the_round_is_capped() -> None:
    two = node("n2", pod("ls/a", "llc_sensitive", QUIET, ls=True, job="a"),
               pod("ls/b", "llc_sensitive", QUIET, ls=True, job="b"),
               pod("batch/n2-hog", "memory_bound", MEMORY_HOG, job="scan"))
    nodes = [hot_node(), two, node("n1"), sibling()]
    assert [m.pod.key for m in plan(nodes, MoveSettings())] == ["batch/n2-hog"]
    assert [m.relieved for m in plan(nodes, MoveSettings(max_per_round=5))] == [2, 1]


def test_the_assessment_says_why_a_hot_node_got_no_move() -> None:
    hog_level = 1 + 1.2 * 0.2 + 0.4 * 0.65 / 0.75
    lone = node("n5", pod("batch/lone", "cpu_bound", QUIET, job="solo"))
    found = assess([hot_node(), node("n1"), sibling(), lone], MoveSettings())
    assert found.verdicts == ["move", "calm", "calm", "calm"]
    assert found.predicted[0] == pytest.approx([hog_level, 1.0])  # the hog is not slowed by a quiet llc pod
    assert found.predicted[3] == [1.0]
    assert [m.pod.key for m in found.moves] == ["batch/n0-hog"]
    # the hog too young, the web pod its job's last: nobody may move
    assert assess([hot_node(age_s=5.0), node("n1"), sibling()], MoveSettings()).verdicts[0] == "no_eligible"
    # the hog would relieve the web pod, but no node has room for it
    full = node("n1", free=(500, 1 << 30))
    assert assess([hot_node(), full, sibling()], MoveSettings()).verdicts[0] == "no_target"
    # two hogs: removing either leaves the other (the worst co-runner sets the slowdown), the web pod may not go
    two_hogs = node("n0", pod("ls/web", "llc_sensitive", QUIET, ls=True, job="web"),
                    pod("batch/h1", "memory_bound", MEMORY_HOG, job="scan"),
                    pod("batch/h2", "memory_bound", MEMORY_HOG, job="scan"))
    stuck = assess([two_hogs, node("n1"), sibling()], MoveSettings())
    assert stuck.verdicts[0] == "no_relief" and stuck.moves == []
    assert stuck.predicted[0][0] == pytest.approx(hog_level)
    # plan is the assessment's moves, capped per round
    two = node("n2", pod("ls/a", "llc_sensitive", QUIET, ls=True, job="a"),
               pod("batch/n2-hog", "memory_bound", MEMORY_HOG, job="scan"))
    nodes = [hot_node(), two, node("n1"), sibling()]
    assert len(assess(nodes, MoveSettings()).moves) == 2
    assert plan(nodes, MoveSettings()) == assess(nodes, MoveSettings()).moves[:1]


def test_proposals_cite_the_estimates_and_pass_the_referee() -> None:
    [m] = plan([hot_node(), node("n1"), sibling()], MoveSettings())
    [c] = proposals([m], MoveSettings(), now_ms=NOW)
    p = c.proposal
    assert (p.kind, p.agent, p.target.kind, p.target.namespace, p.target.name) == (
        "evict", "reliability", "Pod", "batch", "n0-hog")
    assert p.payload == {"node": "n0", "reason": "interference", "relieved": 1}
    assert {e.topic for e in p.evidence} == {SOURCE}
    res = resolve(p.target, [p], now_ms=NOW, state=RefereeState(), s=RefereeSettings(mode="shadow"))
    assert res.chosen is not None and res.chosen.proposal_id == p.proposal_id


@pytest.mark.parametrize("bad", [{"slo_slowdown": 1.0}, {"min_age_s": -1.0}, {"score": 1.5},
                                 {"max_per_round": -1}, {"margin": -0.1}])
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        MoveSettings(**bad)  # type: ignore[arg-type]
