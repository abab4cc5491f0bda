"""`eval arena --live` end to end at the smallest size: real kube-scheduler(s), kwok, Kafka, features → regime →
scheduler-extender; both policies place every task, the ledger accounts what co-runners did to them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.arena_live import run as live
from tests.integration.test_referee_helpers import kube_admin  # noqa: F401 (fixture: starts the control plane)

pytestmark = [pytest.mark.integration, pytest.mark.kube]


@pytest.mark.timeout(600)
def test_live_arena_quick_runs_both_policies_through_the_real_system(
    kube_admin: Path,  # noqa: F811
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    out = tmp_path / "live"
    code = live.main(
        [
            "--quick",
            "--nodes",
            "4",
            "--horizon-s",
            "150",  # 15 s of arrivals per policy at 10x: 35 tasks on 4 nodes (300 gave 36, in twice the time)
            "--synthetic",
            "120",
            "--seed",
            "3",
            "--extender-corunner-weight",  # the configuration measured offline (docs/arena.md)
            "0.5",
            "--extender-weight",
            "2",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    doc = json.loads((out / "results.json").read_text())
    summary = doc["details"]["summary"]
    assert set(summary) == {"kube-default", "extender"}
    arrivals = doc["details"]["arrivals"]["tasks_kept"]
    assert arrivals > 0
    for policy, m in summary.items():
        assert m["placed"] == arrivals and m["unfinished"] == 0, (policy, m)
        assert 0 <= m["slo_violation_task_s"] <= m["latency_sensitive_task_s"], (policy, m)
        assert 0 < m["mean_cpu_utilisation"] <= 1 and 0 < m["nodes_used"] <= 4, (policy, m)
        # completions stretched by the slowdown (the default): no batch task finished before its work was done
        assert m["completion_inflation"] >= 1.0, (policy, m)
    assert doc["details"]["completion"].startswith("stretched")
    # the extender policy went through the real pipeline: the scheduler called the extender's filter for every
    # pod (prioritize only when several nodes were left) and the extender read the regime stage's labels
    assert summary["extender"]["extender_filter_calls"] >= arrivals
    assert summary["extender"]["extender_prioritize_calls"] > 0
    assert summary["extender"]["extender_regime_labels"] > 0
    # and the co-runner term followed the pods the scheduler bound (the extender's pods watch)
    assert summary["extender"]["extender_corunner_updates"] >= arrivals
    assert doc["details"]["extender_corunner_weight"] == 0.5 and doc["details"]["extender_weight"] == 2
    rows = {(r["case"], r["metric"]) for r in doc["results"]}
    assert ("kube-default", "slo_violation_task_s") in rows and ("extender", "slo_violation_task_s") in rows
    assert all(r["bench"] == "arena-live" for r in doc["results"])


@pytest.mark.timeout(600)
def test_live_arena_orchestrator_pass_runs_the_deciding_side_and_the_risk_stage(
    kube_admin: Path,  # noqa: F811
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    """The orchestrator pass with ``--orchestrator-risk --orchestrator-load-term``: agents, referee, pod-pressure,
    cluster watcher and risk run beside the extender on the real broker and API server; every task is placed and
    finishes, the risk stage scored the run's pods from the watcher's task events, and the extender scored nodes
    on the pod-pressure stage's estimates."""
    out = tmp_path / "live"
    code = live.main(["--quick", "--nodes", "4", "--horizon-s", "150", "--synthetic", "120", "--seed", "3",
                      "--policies", "orchestrator", "--orchestrator-risk", "--orchestrator-load-term",
                      "--extender-corunner-weight", "0.5", "--move-slo-slowdown", "1.2",
                      "--extender-corunner-slo-slowdown", "1.2", "--referee-max-disruptions", "8",
                      "--pod-estimates", "rdt",
                      "--extender-weight", "2", "--out", str(out), "--quiet"])
    assert code == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["details"]["orchestrator_risk"] is True
    # the guard band and the budget reached the services they set (each refuses a bad value at start-up)
    settings = doc["details"]["orchestrator_settings"]
    assert settings["agent-reliability"] == {"AGENT_RELIABILITY_MOVE_SLO_SLOWDOWN": "1.2"}
    assert settings["scheduler-extender"] == {"EXTENDER_CORUNNER_SLO_SLOWDOWN": "1.2"}
    assert settings["referee"]["REFEREE_MAX_DISRUPTIONS"] == "8"
    m = doc["details"]["summary"]["orchestrator"]
    arrivals = doc["details"]["arrivals"]["tasks_kept"]
    # the nodes' resctrl readings reached the pod-pressure stage, which took llc and membw from them
    assert doc["details"]["pod_estimates"] == "rdt"
    for resource in ("llc", "membw"):
        from_readings = sum(v for k, v in m.items() if k.startswith(f"pod_pressure_{resource}_from_reading"))
        assert from_readings > 0, m
    assert m["placed"] == arrivals and m["unfinished"] == 0, m
    assert m["extender_filter_calls"] >= arrivals  # the extender answered for every pod
    # the load term: the extender read the pod-pressure stage's estimates and re-scored nodes on them
    assert doc["details"]["orchestrator_load_term"] is True
    assert m["extender_pressure_records"] > 0 and m["extender_load_updates"] >= arrivals, m
    assert m["extender_corunner_updates"] == 0, m  # the class table's follower is not attached
    assert m["risk_records"] > 0, m  # task events from the watcher reached the risk stage, which published risk.v2
    assert 0.0 <= m["risk_in_range_share"] <= 1.0 and 0.0 <= m["risk_max_p"] <= 1.0
    # what the referee did is accounted from its actions topic, and each action answers a proposal it weighed
    acted = m["actions_applied"] + m["actions_refused"] + m["actions_failed"]
    assert acted <= sum(v for k, v in m.items() if k.startswith("proposals_"))
