"""The dashboard's aggregation, without a broker: joins, histories, staleness, diffs, intent vs cluster, health."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from contracts.models import (
    ActionResult,
    AnomalyScore,
    ClusterState,
    Decision,
    DeploymentState,
    FailureRiskV2,
    HorizonRisk,
    Proposal,
    RegimeLabelV2,
    TargetRef,
)
from contracts.topics import REGIMES_TOPIC, RISK_TOPIC, Topic
from services.dashboard.clusters import compare
from services.dashboard.decisions import Intent
from services.dashboard.series import RateWindow, Series
from services.dashboard.state import DashboardState, StateConfig
from services.runtime.deadletter import dead_letter

T0 = 1_700_000_000_000


def expand(view: dict[str, Any]) -> list[list[float]]:
    """A series' compact JSON form as [[bucket ms, value], ...] (what the browser does)."""
    if view["s"] is None:
        return []
    return [[view["s"] + k * view["d"], v] for k, v in enumerate(view["v"]) if v is not None]
DEP = TargetRef(kind="Deployment", name="web", namespace="shop")


def proposal(agent: str, kind: str, score: float, pid: str, **payload: int) -> Proposal:
    return Proposal(proposal_id=pid, agent=agent, kind=kind, target=DEP, payload=dict(payload), score=score, ts_ms=T0)  # type: ignore[arg-type]


def decision(did: str = "d-1", ts: int = T0, replicas: int = 5, trace_id: str | None = None) -> Decision:
    props = [
        proposal("reliability", "scale_out", 0.82, "rel-1", replicas=replicas, from_replicas=3),
        proposal("efficiency", "scale_in", 0.41, "eff-1", replicas=2, from_replicas=3),
        proposal("admission", "throttle", 0.55, "adm-1"),
    ]
    return Decision(decision_id=did, ts_ms=ts, target=DEP, action="scale_out", chosen_proposal_id="rel-1",
                    reason="safety over efficiency: reliability wins", proposals=props, mode="apply", trace_id=trace_id)


def result(did: str = "d-1", outcome: str = "applied", ts: int = T0 + 50) -> ActionResult:
    return ActionResult(decision_id=did, ts_ms=ts, target=DEP, action="scale_out", outcome=outcome,  # type: ignore[arg-type]
                        message="patched", api_status=200)


def regime(node: str, label: str, ts: int) -> RegimeLabelV2:
    return RegimeLabelV2(node=node, ts_ms=ts, regime=label, confidence=0.9, raw_regime=label, changed=False,  # type: ignore[arg-type]
                       interference={"cpu_bound": 1.1, "llc_sensitive": 1.8}, model_version="m1", input_ts_ms=ts)


def anomaly(node: str, score: float, ts: int) -> AnomalyScore:
    return AnomalyScore(node=node, ts_ms=ts, score=score, is_anomaly=score > 0.8, threshold=0.8, model_version="m1",
                        input_ts_ms=ts)


def node_risk(node: str, p: float, ts: int, out_of_range: int = 0) -> FailureRiskV2:
    horizons = [HorizonRisk(horizon_s=300, probability=p / 2), HorizonRisk(horizon_s=60, probability=p)]
    return FailureRiskV2(target_kind="node", target=node, node=node, ts_ms=ts, model_version="m1", input_ts_ms=ts,
                         horizons=horizons, tasks=4, tasks_out_of_range=out_of_range)


def unknown(node: str, ts: int) -> RegimeLabelV2:
    return RegimeLabelV2(node=node, ts_ms=ts, regime="unknown", confidence=0.0, raw_regime="unknown", changed=True,
                         interference={}, abstain=["counters_missing", "out_of_distribution"], ood_score=2.345,
                         model_version="m1", input_ts_ms=ts)


def cluster(ts: int, desired: int, ready: int | None = None) -> ClusterState:
    dep = DeploymentState(namespace="shop", name="web", desired_replicas=desired,
                          ready_replicas=desired if ready is None else ready, available_replicas=desired)
    return ClusterState(cluster="local", namespace="shop", ts_ms=ts, pending_pods=4, running_pods=10,
                        queue_health="degraded", nodes_total=3, nodes_ready=3, deployments=[dep])


@pytest.fixture
def state() -> DashboardState:
    return DashboardState(StateConfig(stale_ms=30_000, history_ms=60_000, sparkline_points=60, max_decisions=3,
                                      jaeger_url="http://jaeger:16686/"))


# ---------------------------------------------------------------- decisions


def test_decision_joins_its_result_and_keeps_every_proposal(state: DashboardState) -> None:
    state.apply("decisions.v1", decision(), trace_id="a" * 32)
    state.apply("actions.v1", result())
    (row,) = state.snapshot(T0)["decisions"]
    assert [(p["agent"], p["kind"], p["score"], p["chosen"]) for p in row["proposals"]] == [
        ("reliability", "scale_out", 0.82, True),
        ("efficiency", "scale_in", 0.41, False),
        ("admission", "throttle", 0.55, False),
    ]
    assert row["reason"].startswith("safety over efficiency")
    assert row["result"]["outcome"] == "applied"
    assert row["trace_id"] == "a" * 32  # from the traceparent header when the Decision carries none
    assert row["target"]["key"] == "Deployment/shop/web"


def test_result_arriving_before_its_decision_waits_for_it(state: DashboardState) -> None:
    state.apply("actions.v1", result(outcome="dry-run"))
    assert state.snapshot(T0)["decisions"] == []
    assert state.snapshot(T0)["counts"]["results_waiting"] == 1
    state.apply("decisions.v1", decision(trace_id="b" * 32))
    (row,) = state.snapshot(T0)["decisions"]
    assert row["result"]["outcome"] == "dry-run"
    assert row["trace_id"] == "b" * 32


def test_replayed_decision_and_duplicate_result_do_not_add_rows(state: DashboardState) -> None:
    state.apply("decisions.v1", decision())
    state.apply("actions.v1", result())
    state.apply("decisions.v1", decision())
    state.apply("actions.v1", result(outcome="duplicate"))
    (row,) = state.snapshot(T0)["decisions"]
    assert row["result"]["outcome"] == "applied"  # what really happened, not the replay's "duplicate"
    assert row["duplicates"] == 1
    assert state.snapshot(T0)["counts"]["decisions_seen"] == 1


def test_log_is_bounded_and_newest_first(state: DashboardState) -> None:
    for i in range(5):
        state.apply("decisions.v1", decision(did=f"d-{i}", ts=T0 + i))
    rows = state.snapshot(T0)["decisions"]
    assert [r["id"] for r in rows] == ["d-4", "d-3", "d-2"]
    assert state.snapshot(T0)["counts"]["decisions_seen"] == 5


# ---------------------------------------------------------------- nodes


def test_node_latest_values_histories_and_staleness(state: DashboardState) -> None:
    for i, label in enumerate(["none", "llc", "membw"]):
        state.apply(REGIMES_TOPIC, regime("n1", label, T0 + i * 2000))
        state.apply("anomalies.v1", anomaly("n1", 0.1 * (i + 1), T0 + i * 2000))
    state.apply(RISK_TOPIC, node_risk("n1", 0.6, T0))
    state.apply(REGIMES_TOPIC, regime("n2", "core", T0 - 120_000))
    snap = state.snapshot(T0 + 5000)
    nodes = {n["node"]: n for n in snap["nodes"]}
    n1 = nodes["n1"]
    assert n1["regime"]["label"] == "membw"
    assert n1["regime"]["worst_class"] == "llc_sensitive"
    assert n1["regime"]["slowdown"] == 1.8
    assert n1["anomaly"]["score"] == pytest.approx(0.3)
    assert n1["risk"]["horizons"] == [[60, 0.6], [300, 0.3]]
    assert n1["series"]["regime"] == {"s": T0, "d": 1000, "v": [0, None, 1, None, 2]}  # none, llc, membw
    assert [p[1] for p in expand(n1["series"]["anomaly"])] == [0.1, 0.2, 0.3]
    assert not n1["stale"]
    assert nodes["n2"]["stale"]
    assert snap["counts"]["stale_nodes"] == 1
    # 33 s later n1's risk (ts T0) is stale on its own, its newer signals are not
    later = {n["node"]: n for n in state.snapshot(T0 + 33_000)["nodes"]}
    assert later["n1"]["stale_signals"] == ["risk"]
    assert not later["n1"]["stale"]


def test_unknown_regime_and_out_of_range_risk_are_shown_as_such(state: DashboardState) -> None:
    state.apply(REGIMES_TOPIC, regime("n1", "llc", T0))
    state.apply(REGIMES_TOPIC, unknown("n1", T0 + 1000))
    state.apply(RISK_TOPIC, node_risk("n1", 0.9, T0, out_of_range=2))
    state.apply(RISK_TOPIC, node_risk("n2", 0.3, T0))
    snap = state.snapshot(T0 + 1000)
    nodes = {n["node"]: n for n in snap["nodes"]}
    n1 = nodes["n1"]
    assert n1["regime"]["label"] == "unknown"
    assert n1["regime"]["abstain"] == ["counters_missing", "out_of_distribution"]
    assert n1["regime"]["ood_score"] == 2.345
    assert (n1["regime"]["worst_class"], n1["regime"]["slowdown"]) == (None, 1.0)  # no interference claimed
    assert n1["series"]["regime"]["v"] == [1, 5]  # llc, then unknown (after the five regimes)
    assert (n1["risk"]["in_range"], n1["risk"]["tasks_out_of_range"], n1["risk"]["tasks"]) == (False, 2, 4)
    assert n1["risk"]["max"] == 0.9  # shown, flagged
    assert (nodes["n2"]["risk"]["in_range"], nodes["n2"]["regime"]) == (True, None)
    assert (snap["counts"]["unknown_nodes"], snap["counts"]["risk_out_of_range"]) == (1, 1)
    state.apply(REGIMES_TOPIC, regime("n1", "none", T0 + 2000))
    assert state.snapshot(T0 + 2000)["counts"]["unknown_nodes"] == 0
    assert state.snapshot(T0 + 2000)["nodes"][0]["regime"]["abstain"] == []


def test_the_pod_relative_label_is_shown_beside_the_node_models_and_never_replaces_it(state: DashboardState) -> None:
    state.apply(REGIMES_TOPIC, regime("n1", "llc", T0))
    state.apply(Topic.PODREGIMES, regime("n1", "membw", T0 + 1000))
    state.apply(Topic.PODREGIMES, unknown("n2", T0 + 1000))
    nodes = {n["node"]: n for n in state.snapshot(T0 + 1000)["nodes"]}
    assert nodes["n1"]["regime"]["label"] == "llc" and nodes["n1"]["series"]["regime"]["v"] == [1]
    assert (nodes["n1"]["pod_regime"]["label"], nodes["n1"]["pod_regime"]["abstain"]) == ("membw", [])
    assert nodes["n2"]["regime"] is None and nodes["n2"]["pod_regime"]["label"] == "unknown"
    assert nodes["n2"]["pod_regime"]["abstain"] == ["counters_missing", "out_of_distribution"]
    assert "pod_regime" not in nodes["n2"]["series"]  # no history strip of its own
    assert state.snapshot(T0 + 1000)["counts"]["unknown_nodes"] == 0  # counts the node model's labels only
    state.forget(Topic.PODREGIMES, "n2")  # a tombstone: n2 has nothing left
    assert [n["node"] for n in state.snapshot(T0 + 1000)["nodes"]] == ["n1"]


def test_older_message_does_not_replace_latest_value(state: DashboardState) -> None:
    state.apply(REGIMES_TOPIC, regime("n1", "llc", T0 + 1000))
    state.apply(REGIMES_TOPIC, regime("n1", "none", T0))
    (n1,) = state.snapshot(T0)["nodes"]
    assert n1["regime"]["label"] == "llc"


def test_task_risk_is_not_a_node_signal(state: DashboardState) -> None:
    task = FailureRiskV2(target_kind="task", target="shop/web-1", node="n1", ts_ms=T0, model_version="m1",
                       input_ts_ms=T0, horizons=[HorizonRisk(horizon_s=60, probability=0.9)])
    state.apply(RISK_TOPIC, task)
    assert state.snapshot(T0)["nodes"] == []
    assert state.snapshot(T0)["counts"]["ignored"] == 1


def test_tombstones_remove_signals_then_the_node(state: DashboardState) -> None:
    state.apply(REGIMES_TOPIC, regime("n1", "llc", T0))
    state.apply("anomalies.v1", anomaly("n1", 0.2, T0))
    v = state.version
    state.forget(REGIMES_TOPIC, "n1")
    (n1,) = state.snapshot(T0)["nodes"]
    assert n1["regime"] is None
    (n1,) = state.snapshot(T0, since=v)["nodes"]
    assert n1["regime"] is None  # a removed signal is sent as null in a diff
    assert "anomaly" not in n1
    state.forget("anomalies.v1", "n1")
    assert state.snapshot(T0)["nodes"] == []
    assert state.snapshot(T0, since=v)["removed_nodes"] == ["n1"]


def test_series_buckets_keep_the_window_and_spikes() -> None:
    s = Series(bucket_ms=1000, window_ms=10_000, combine="max")
    s.add(T0, 0.9, 1)
    s.add(T0 + 400, 0.1, 2)  # same bucket: max keeps the spike
    assert s.points() == [(T0, 0.9)]
    for i in range(1, 30):
        s.add(T0 + i * 1000, i, 2 + i)
    points = s.points()
    assert points[0][0] == T0 + 19_000
    assert points[-1][0] == T0 + 29_000
    assert len(points) == 11
    assert not s.add(T0, 5, 99)  # older than the window: ignored
    assert s.view(since=30) == {"s": T0 + 29_000, "d": 1000, "v": [29.0]}
    s.add(T0 + 25_500, 50, 40)  # a late sample updates an older bucket: the diff runs from there
    assert expand(s.view(since=31)) == [[T0 + 25_000, 50.0], [T0 + 26_000, 26.0], [T0 + 27_000, 27.0],
                                        [T0 + 28_000, 28.0], [T0 + 29_000, 29.0]]
    assert expand(s.view()) == [[b, v] for b, v in s.points()]


# ---------------------------------------------------------------- diffs


def test_diff_holds_only_what_changed(state: DashboardState) -> None:
    for i in range(300):
        state.apply(REGIMES_TOPIC, regime(f"n{i:03d}", "none", T0))
    state.apply("decisions.v1", decision())
    full = state.snapshot(T0)
    assert full["type"] == "snapshot"
    assert len(full["nodes"]) == 300
    assert "config" in full
    assert "cluster" in full
    v = full["version"]
    state.apply(REGIMES_TOPIC, regime("n007", "llc", T0 + 3000))
    diff = state.snapshot(T0 + 3000, since=v)
    assert diff["type"] == "diff"
    assert [n["node"] for n in diff["nodes"]] == ["n007"]
    assert expand(diff["nodes"][0]["series"]["regime"]) == [[T0 + 3000, 1.0]]  # only the new point
    state.apply("anomalies.v1", anomaly("n008", 0.4, T0 + 3000))
    diff2 = state.snapshot(T0 + 3000, since=diff["version"])
    (n008,) = diff2["nodes"]
    assert set(n008["series"]) == {"anomaly"}  # unchanged signals and series are not resent
    assert "regime" not in n008
    assert n008["anomaly"]["score"] == 0.4
    assert diff["decisions"] == []
    assert "cluster" not in diff
    assert "config" not in diff
    assert len(orjson.dumps(diff)) < len(orjson.dumps(full)) / 20
    state.apply("actions.v1", result())
    (changed,) = state.snapshot(T0, since=diff["version"])["decisions"]
    assert changed["result"]["outcome"] == "applied"


# ---------------------------------------------------------------- cluster vs orchestrator


def test_intent_beside_cluster_state(state: DashboardState) -> None:
    state.apply("clusterstate.v1", cluster(T0 - 1000, desired=3))
    state.apply("decisions.v1", decision(replicas=5))
    state.apply("actions.v1", result())
    (c,) = state.snapshot(T0)["cluster"]["clusters"]
    (dep,) = c["deployments"]
    assert (dep["desired"], dep["intent"]["replicas"], dep["intent"]["outcome"]) == (3, 5, "applied")
    assert dep["status"] == "pending"  # no cluster state since the decision yet
    state.apply("clusterstate.v1", cluster(T0 + 5000, desired=3))
    assert state.snapshot(T0)["cluster"]["clusters"][0]["deployments"][0]["status"] == "differs"
    state.apply("clusterstate.v1", cluster(T0 + 9000, desired=5, ready=4))
    assert state.snapshot(T0)["cluster"]["clusters"][0]["deployments"][0]["status"] == "converging"
    assert c["pending_pods"] == 4
    assert c["queue_health"] == "degraded"


@pytest.mark.parametrize(
    ("outcome", "desired", "state_ts", "expected"),
    [
        ("applied", 5, T0 + 1, "agrees"),
        ("applied", 3, T0 + 1, "differs"),
        ("applied", 3, T0 - 1, "pending"),
        (None, 3, T0 + 1, "differs"),
        ("dry-run", 3, T0 + 1, "not-applied"),
        ("refused", 5, T0 + 1, "not-applied"),
    ],
)
def test_compare(outcome: str | None, desired: int, state_ts: int, expected: str) -> None:
    intent = Intent(decision_id="d", ts_ms=T0, action="scale_out", mode="apply", replicas=5, from_replicas=3,
                    outcome=outcome)
    dep = DeploymentState(namespace="shop", name="web", desired_replicas=desired, ready_replicas=desired,
                          available_replicas=desired)
    assert compare(intent, dep, state_ts) == expected
    assert compare(None, dep, state_ts) == "no-intent"


def test_decision_on_unlisted_deployment_is_shown(state: DashboardState) -> None:
    state.apply("decisions.v1", decision())
    view = state.snapshot(T0)["cluster"]
    assert view["clusters"] == []
    assert [u["key"] for u in view["unlisted"]] == ["Deployment/shop/web"]


# ---------------------------------------------------------------- pipeline health


def test_topic_rates_and_consumer_lag(state: DashboardState) -> None:
    state.record_offsets(T0, {"nodestate.v1": 1000, "decisions.v1": 10})
    state.record_offsets(T0 + 2000, {"nodestate.v1": 1400, "decisions.v1": 10})
    state.record_lag(T0 + 2000, {"features": {"nodestate.v1": 250}, "referee": {"proposals.v1": 0}})
    p = state.snapshot(T0 + 2000)["pipeline"]
    topics = {t["topic"]: t for t in p["topics"]}
    assert topics["nodestate.v1"]["rate"] == 200.0
    assert topics["decisions.v1"]["rate"] == 0.0
    assert [(g["group"], g["lag"]) for g in p["groups"]] == [("features", 250), ("referee", 0)]
    state.record_lag(T0 + 4000, {"features": {"nodestate.v1": 10}})
    assert [g["group"] for g in state.snapshot(T0)["pipeline"]["groups"]] == ["features"]


def test_rate_window_survives_a_recreated_topic() -> None:
    w = RateWindow(window_ms=10_000)
    w.add(T0, 500)
    w.add(T0 + 1000, 100)
    assert w.rate() == 0.0
    w.add(T0 + 3000, 300)
    assert w.rate() == 100.0


def test_dead_letters_counted_with_their_errors(state: DashboardState) -> None:
    state = DashboardState(StateConfig(topic_prefix="t1-"))
    v = state.version
    for i in range(3):
        state.apply("deadletter.v2", dead_letter(
            service="features", topic="t1-nodestate.v1", partition=2, offset=40 + i, key=None,
            value=b'{"node": 1}', headers=None, error=f"NodeState: node: bad {i}",
            kind="schema").model_copy(update={"ts_ms": T0 + i}))
    p = state.snapshot(T0, since=v)["pipeline"]
    assert p["deadletter_total"] == 3
    assert p["deadletters"]["by_source"] == [
        {"source_topic": "nodestate.v1", "kind": "schema", "service": "features", "count": 3}
    ]
    newest = p["deadletters"]["last"][0]
    assert (newest["offset"], newest["error"], newest["value"]) == (42, "NodeState: node: bad 2", '{"node": 1}')
    assert "deadletters" not in state.snapshot(T0, since=state.version)["pipeline"]  # unchanged: not resent


def test_undecodable_records_are_counted(state: DashboardState) -> None:
    state.bad(REGIMES_TOPIC, "RegimeLabelV2: invalid JSON")
    p = state.snapshot(T0)["pipeline"]
    (t,) = p["topics"]
    assert (t["topic"], t["read"], t["bad"]) == (REGIMES_TOPIC, 1, 1)
    assert p["reader"]["last_bad"] == [f"{REGIMES_TOPIC}: RegimeLabelV2: invalid JSON"]


def test_snapshot_is_json_and_carries_the_jaeger_base(state: DashboardState) -> None:
    state.apply("decisions.v1", decision(trace_id="c" * 32))
    snap = orjson.loads(orjson.dumps(state.snapshot(T0)))
    assert snap["config"]["jaeger_url"] == "http://jaeger:16686"
    assert snap["decisions"][0]["trace_id"] == "c" * 32
