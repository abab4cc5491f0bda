"""Table tests of the referee's pure resolution rules, budgets, windows and request bodies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition
from opentelemetry import context as otel_context

from contracts.models import Proposal, TargetRef
from services.referee import budgets, patches
from services.referee.policy import LastAction, RefereeState, decision_id, resolve, settle
from services.referee.settings import RefereeSettings
from services.referee.windows import Windows

NOW = 1_750_000_000_000
DEP = TargetRef(kind="Deployment", name="web", namespace="ns")
NODE = TargetRef(kind="Node", name="n1")
POD = TargetRef(kind="Pod", name="web-1", namespace="ns")

AGENT_OF = {
    "scale_out": "reliability",
    "replicate": "reliability",
    "scale_in": "efficiency",
    "consolidate": "efficiency",
    "memory_balloon": "efficiency",
    "throttle": "admission",
    "deprioritize": "admission",
    "taint": "admission",
    "cordon": "admission",
    "evict": "admission",
    "hold_admission": "admission",
}


def prop(
    kind: str, score: float, target: TargetRef = DEP, pid: str | None = None, ts: int = NOW, **payload: Any
) -> Proposal:
    return Proposal(
        proposal_id=pid or f"{kind}-{score}",
        agent=AGENT_OF[kind],  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        target=target,
        payload=payload,
        score=score,
        ts_ms=ts,
    )


def settings(**kw: Any) -> RefereeSettings:
    base: dict[str, Any] = {
        "mode": "apply",
        "cooldown_s": 60,
        "hysteresis_s": 300,
        "hysteresis_margin": 0.15,
        "rate_limit_per_min": 30,
        "max_disruptions": 5,
        "min_score": 0.5,
    }
    return RefereeSettings(**{**base, **kw})


@dataclass
class Case:
    name: str
    proposals: list[Proposal]
    action: str
    reason: str  # a fragment the reason must contain
    target: TargetRef = DEP
    last: LastAction | None = None
    recent_actions: int = 0
    recent_disruptions: int = 0
    settings: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case(
        "one proposal above min score",
        [prop("scale_out", 0.7)],
        "scale_out",
        "scale_out by reliability (0.70, SLA) chosen",
    ),
    Case(
        "SLA outranks efficiency whatever the scores",
        [prop("scale_in", 0.95), prop("scale_out", 0.6)],
        "scale_out",
        "over scale_in by efficiency (0.95, efficiency) (safety outranks SLA outranks efficiency",
    ),
    Case(
        "safety outranks efficiency on a node",
        [prop("consolidate", 0.95, NODE), prop("taint", 0.55, NODE, key="k", value="v", effect="NoSchedule")],
        "taint",
        "taint by admission (0.55, safety) chosen",
        target=NODE,
    ),
    Case(
        "a proposal aimed at another kind of object is ignored",
        [prop("scale_out", 0.99, pid="a"), prop("evict", 0.6, POD)],
        "scale_out",
        "ignored (wrong target kind): evict by admission",
    ),
    Case(
        "eviction outranks a memory balloon on the same pod",
        [prop("memory_balloon", 0.9, POD), prop("evict", 0.6, POD)],
        "evict",
        "evict by admission (0.60, safety) chosen over memory_balloon by efficiency (0.90, efficiency)",
        target=POD,
    ),
    Case(
        "same class: higher score wins", [prop("scale_out", 0.6), prop("throttle", 0.7)], "throttle", "(higher score)"
    ),
    Case(
        "equal class and score: agent name then id",
        [prop("scale_out", 0.7, pid="b"), prop("replicate", 0.7, pid="a")],
        "replicate",
        "replicate by reliability",
    ),
    Case("below min score: nothing", [prop("scale_out", 0.3)], "none", "below min score 0.50"),
    Case(
        "cooldown after the target's last action",
        [prop("scale_out", 0.9)],
        "none",
        "cooldown (replicate 10s ago, cooldown 60s)",
        last=LastAction("replicate", NOW - 10_000, 0.8, "d-old"),
    ),
    Case(
        "a safety action of another kind escalates through the cooldown",
        [prop("cordon", 0.96, NODE)],
        "cordon",
        "cordon by admission",
        target=NODE,
        last=LastAction("taint", NOW - 10_000, 0.7, "d-old"),
    ),
    Case(
        "hysteresis: reversing needs a clearly higher score",
        [prop("scale_in", 0.8)],
        "none",
        "hysteresis (scale_in would reverse scale_out of 100s ago and needs score >= 0.85)",
        last=LastAction("scale_out", NOW - 100_000, 0.7, "d-old"),
    ),
    Case(
        "hysteresis passed with a high enough score",
        [prop("scale_in", 0.9)],
        "scale_in",
        "scale_in by efficiency",
        last=LastAction("scale_out", NOW - 100_000, 0.7, "d-old"),
    ),
    Case(
        "hysteresis expires",
        [prop("scale_in", 0.6)],
        "scale_in",
        "scale_in by efficiency",
        last=LastAction("scale_out", NOW - 400_000, 0.7, "d-old"),
    ),
    Case(
        "cluster-wide rate limit",
        [prop("scale_out", 0.9)],
        "none",
        "rate limit (2/min",
        recent_actions=2,
        settings={"rate_limit_per_min": 2},
    ),
    Case(
        "disruption budget spent: no eviction",
        [prop("evict", 0.9, POD)],
        "none",
        "disruption budget (1 per 300s spent)",
        target=POD,
        recent_disruptions=1,
        settings={"max_disruptions": 1},
    ),
    Case(
        "disruption budget spent: non-disruptive actions still go",
        [prop("scale_out", 0.9)],
        "scale_out",
        "scale_out",
        recent_disruptions=1,
        settings={"max_disruptions": 1},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_resolution_rules(case: Case) -> None:
    state = RefereeState()
    if case.last is not None:
        state.last[case.target.key()] = case.last
    state.actions.extend([NOW - 1000] * case.recent_actions)
    state.disruptions.extend([NOW - 1000] * case.recent_disruptions)
    res = resolve(case.target, case.proposals, now_ms=NOW, state=state, s=settings(**case.settings))
    d = res.decision
    assert d.action == case.action, d.reason
    assert case.reason in d.reason, d.reason
    assert {p.proposal_id for p in d.proposals} == {p.proposal_id for p in case.proposals}, "every proposal is recorded"
    assert d.mode == "apply"
    assert (d.chosen_proposal_id is None) == (case.action == "none")


def test_decision_id_is_deterministic_and_a_replay_is_recognised() -> None:
    a, b = prop("scale_out", 0.7, pid="p1"), prop("scale_in", 0.6, pid="p2")
    assert decision_id(DEP, [a, b]) == decision_id(DEP, [b, a, a])
    assert decision_id(DEP, [a]) != decision_id(NODE, [a])
    state = RefereeState()
    first = resolve(DEP, [a, b], now_ms=NOW, state=state, s=settings())
    settle(state, first, "applied")
    again = resolve(DEP, [b, a], now_ms=NOW + 1000, state=state, s=settings())
    assert again.replay
    assert again.decision.decision_id == first.decision.decision_id
    assert again.decision.action == "scale_out"
    # Within the cooldown, a *new* decision on the target is refused:
    assert (
        resolve(DEP, [prop("scale_out", 0.9, pid="p3")], now_ms=NOW + 2000, state=state, s=settings()).decision.action
        == "none"
    )


def test_a_failed_action_gives_its_cooldown_and_budget_back() -> None:
    state = RefereeState()
    s = settings(max_disruptions=1)
    res = resolve(POD, [prop("evict", 0.9, POD)], now_ms=NOW, state=state, s=s)
    assert res.decision.action == "evict"
    assert len(state.disruptions) == 1
    # A concurrent decision already sees the reservation:
    other = TargetRef(kind="Pod", name="web-2", namespace="ns")
    assert resolve(other, [prop("evict", 0.9, other)], now_ms=NOW, state=state, s=s).decision.action == "none"
    settle(state, res, "failed")
    assert not state.disruptions
    assert POD.key() not in state.last
    assert resolve(POD, [prop("evict", 0.95, POD)], now_ms=NOW + 1, state=state, s=s).decision.action == "evict"


@pytest.mark.parametrize(
    ("annotations", "requested", "expected"),
    [
        ({}, 5, (5, "")),
        ({}, 0, (1, "requested 0 raised to min 1")),
        ({}, 50, (20, "requested 50 lowered to max 20")),
        ({budgets.ANN_MIN: "3"}, 2, (3, "requested 2 raised to min 3")),
        ({budgets.ANN_MAX: "4"}, 6, (4, "requested 6 lowered to max 4")),
        ({budgets.ANN_MAX: "lots"}, 6, (6, "")),
    ],
)
def test_replica_bounds_from_settings_and_annotations(
    annotations: dict[str, str], requested: int, expected: tuple[int, str]
) -> None:
    lo, hi = budgets.replica_bounds(annotations, 1, 20)
    assert budgets.clamp_replicas(requested, lo, hi) == expected


def pdb(selector: dict[str, Any] | None, allowed: int = 0, min_available: int | str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": selector}
    if min_available is not None:
        spec["minAvailable"] = min_available
    return {
        "metadata": {"name": "pdb"},
        "spec": spec,
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 2},
    }


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (None, {"app": "web"}, False),
        ({}, {"app": "web"}, True),
        ({"matchLabels": {"app": "web"}}, {"app": "web", "x": "y"}, True),
        ({"matchLabels": {"app": "db"}}, {"app": "web"}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}, {"tier": "b"}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}, {"tier": "a"}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {}, True),
    ],
)
def test_label_selector(selector: dict[str, Any] | None, labels: dict[str, str], matches: bool) -> None:
    assert budgets.selector_matches(selector, labels) is matches


def test_pdb_checks() -> None:
    web = {"matchLabels": {"app": "web"}}
    assert budgets.eviction_blocked([pdb(web, allowed=0)], {"app": "web"}) == (
        "PodDisruptionBudget pdb allows 0 disruptions (healthy 2, desired 2)"
    )
    assert budgets.eviction_blocked([pdb(web, allowed=1)], {"app": "web"}) is None
    assert budgets.eviction_blocked([pdb(web, allowed=0)], {"app": "db"}) is None
    assert budgets.scale_blocked([pdb(web, min_available=3)], {"app": "web"}, 2) is not None
    assert budgets.scale_blocked([pdb(web, min_available=3)], {"app": "web"}, 3) is None
    assert budgets.scale_blocked([pdb(web, min_available="50%")], {"app": "web"}, 1) is None


def test_windows_group_by_event_time_and_hold_offsets() -> None:
    w = Windows(window_ms=500)
    tp = TopicPartition("p", 0)
    ctx = otel_context.Context()
    assert w.add(prop("scale_out", 0.7, pid="a", ts=NOW), ctx, tp, 10, now_ms=NOW) == []
    assert w.add(prop("scale_in", 0.7, pid="b", ts=NOW + 499), ctx, tp, 11, now_ms=NOW + 10) == []
    assert w.add(prop("cordon", 0.9, NODE, pid="c", ts=NOW + 100), ctx, tp, 12, now_ms=NOW + 10) == []
    assert w.held_offsets() == {tp: 10}
    closed = w.add(prop("scale_out", 0.8, pid="d", ts=NOW + 500), ctx, tp, 13, now_ms=NOW + 20)
    assert [[p.proposal_id for p in c.proposals] for c in closed] == [["a", "b"]]
    assert w.held_offsets() == {tp: 12}
    assert w.next_deadline_ms() == NOW + 510
    assert [x.target for x in w.due(NOW + 515)] == [NODE]
    assert [x.target for x in w.due(NOW + 520)] == [DEP]
    assert w.held_offsets() == {}


def test_the_same_record_twice_is_one_proposal_in_its_window() -> None:
    """A batch re-run record by record after an error offers the same records again."""
    w = Windows(window_ms=500)
    tp = TopicPartition("p", 0)
    ctx = otel_context.Context()
    w.add(prop("scale_out", 0.7, pid="a", ts=NOW), ctx, tp, 10, now_ms=NOW)
    w.add(prop("scale_out", 0.7, pid="a", ts=NOW), ctx, tp, 10, now_ms=NOW + 1)
    w.add(prop("scale_out", 0.7, pid="a", ts=NOW), ctx, tp, 11, now_ms=NOW + 2)  # re-sent: another record
    [window] = w.drain()
    assert [p.proposal_id for p in window.proposals] == ["a", "a"]
    assert window.offsets == [(tp, 10), (tp, 11)]


def test_taint_merge_and_resize_body() -> None:
    node = {
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "k", "value": "llc", "effect": "NoSchedule"}]}
    }
    assert patches.with_taint(node, "k", "llc", "NoSchedule") is None
    assert patches.with_taint(node, "k", "membw", "NoSchedule") == [
        {"key": "a", "effect": "NoSchedule"},
        {"key": "k", "value": "membw", "effect": "NoSchedule"},
    ]
    pod = {
        "spec": {
            "containers": [
                {"name": "app", "resources": {"requests": {"memory": "384Mi"}}},
                {"name": "sidecar", "resources": {"requests": {"memory": "128Mi"}}},
                {"name": "no-request"},
            ]
        }
    }
    body, note = patches.resize_body(pod, 256)
    assert body == {
        "spec": {
            "containers": [
                {"name": "app", "resources": {"requests": {"memory": "192Mi"}}},
                {"name": "sidecar", "resources": {"requests": {"memory": "64Mi"}}},
            ]
        }
    }
    assert note == "memory requests 512Mi → 256Mi"
    assert patches.resize_body(pod, 512) == (None, "memory requests already total 512Mi")
