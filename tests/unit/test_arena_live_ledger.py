"""The live arena's pure parts: the ledger's accounting, tasks as Jobs, running tasks per node."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from loadtests.arena_live.kube import CLASS_LABEL, JOB_LABEL, LATENCY_LABEL, TaskRun, job_manifest
from loadtests.arena_live.run import (
    FALLBACK_DELAY_FACTOR,
    Completions,
    Ledger,
    finished_tasks,
    live_task,
    replaced,
    running_by_node,
)
from simulator.workloads import KINDS, task_slowdowns


@dataclass(frozen=True)
class T:
    """Stands in for simulator.arena.arrivals.Arrival (the fields the ledger reads)."""

    task_id: int
    kind: str
    workload_class: str
    intensity: float
    latency_sensitive: bool
    cpu: float
    memory: float = 0.01
    work_s: float = 100.0
    job_id: int = 42

    @property
    def pressure(self) -> tuple[float, ...]:
        return tuple(p * self.intensity for p in KINDS[self.kind].pressure)


def _kind(cls: str) -> str:
    return next(k for k, v in sorted(KINDS.items()) if v.workload_class == cls)


def test_task_slowdowns_is_the_worst_other_task_never_itself() -> None:
    alone = task_slowdowns(["cpu_bound"], np.array([[0.9, 0.9, 0.9, 0.9]]))
    assert alone.tolist() == [1.0]
    pair = task_slowdowns(["llc_sensitive", "llc_sensitive"], np.array([[1.0, 0, 0, 0], [0.0, 0, 0, 0]]))
    # the second is hit by the first's full llc pressure (excess 1.0 x sensitivity 1.2); the first by nothing
    assert pair.tolist() == pytest.approx([1.0, 2.2])


def test_ledger_accounts_violations_utilisation_and_nodes_used_in_arena_seconds() -> None:
    ls_kind, batch_kind = _kind("llc_sensitive"), _kind("memory_bound")
    victim = T(1, ls_kind, "llc_sensitive", 1.0, True, cpu=0.25)
    bully = T(2, batch_kind, "memory_bound", 1.0, False, cpu=0.5)
    ledger = Ledger(nodes=2)
    slow = task_slowdowns(["llc_sensitive", "memory_bound"], np.array([victim.pressure, bully.pressure]))
    first = ledger.tick({0: [victim, bully], 1: []}, dt_s=10.0)
    ledger.tick({0: [victim], 1: [bully]}, dt_s=10.0)
    assert [t for t, _ in first] == [victim, bully]
    assert [s for _, s in first] == pytest.approx(slow.tolist())
    m = ledger.metrics()
    expected_violation = 10.0 if slow[0] > 1.25 else 0.0  # only while sharing, and only if beyond the SLO
    assert m["slo_violation_task_s"] == pytest.approx(expected_violation)
    assert m["latency_sensitive_task_s"] == pytest.approx(20.0)
    assert m["mean_cpu_utilisation"] == pytest.approx(0.75 / 2)  # (0.25 + 0.5) node units over 2 nodes
    # work done: while sharing, each task's CPU counts divided by its slowdown
    shared = 0.25 / max(slow[0], 1.0) + 0.5 / max(slow[1], 1.0)
    assert m["useful_cpu_utilisation"] == pytest.approx((shared + 0.75) / 2 / 2)
    assert m["nodes_used"] == pytest.approx(1.5)  # 1 node, then 2
    assert m["mean_slowdown_llc_sensitive"] == pytest.approx((slow[0] + 1.0) / 2)
    assert m["p95_slowdown_llc_sensitive"] == pytest.approx(max(slow[0], 1.0))


def test_utilisation_is_averaged_over_the_arrival_window_only_as_offline() -> None:
    task = T(1, _kind("cpu_bound"), "cpu_bound", 1.0, False, cpu=0.5)
    ledger = Ledger(nodes=1, horizon_s=15.0)
    ledger.tick({0: [task]}, dt_s=10.0)  # inside the window
    ledger.tick({0: []}, dt_s=10.0)  # 5 s inside, 5 s of drain
    ledger.tick({0: []}, dt_s=100.0)  # a long, empty drain: must not dilute the average
    m = ledger.metrics()
    assert m["mean_cpu_utilisation"] == pytest.approx(0.5 * 10.0 / 15.0)
    assert m["nodes_used"] == pytest.approx(10.0 / 15.0)
    assert m["accounted_arena_s"] == pytest.approx(120.0)


def test_violations_count_in_the_drain_too() -> None:
    ls_kind, batch_kind = _kind("llc_sensitive"), _kind("memory_bound")
    victim = T(1, ls_kind, "llc_sensitive", 1.0, True, cpu=0.25)
    bully = T(2, batch_kind, "memory_bound", 1.0, False, cpu=0.5)
    slow = task_slowdowns(["llc_sensitive", "memory_bound"], np.array([victim.pressure, bully.pressure]))
    assert slow[0] > 1.25
    ledger = Ledger(nodes=1, horizon_s=5.0)
    ledger.tick({0: [victim, bully]}, dt_s=10.0)
    assert ledger.metrics()["slo_violation_task_s"] == pytest.approx(10.0)


def test_live_tasks_run_for_their_compressed_work_on_the_runs_nodes() -> None:
    task = live_task(T(7, _kind("cpu_bound"), "cpu_bound", 0.5, False, cpu=0.125, memory=0.0625, work_s=300.0), 10.0)
    assert (task.task_id, task.cpu_m, task.memory_mib, task.run_s) == ("t00007", 2000, 4096, 30.0)
    job = job_manifest(task, run_id="r1", scheduler="arena-r1-kube-default")
    pod = job["spec"]["template"]
    assert pod["metadata"]["annotations"]["pod-complete.stage.kwok.x-k8s.io/delay"] == "30.000s"
    assert pod["spec"]["schedulerName"] == "arena-r1-kube-default"
    assert pod["spec"]["nodeSelector"] == {"borg-orchestrator.io/arena-run": "r1"}
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2000m", "memory": "4096Mi"}
    labels = pod["metadata"]["labels"]
    assert (labels[LATENCY_LABEL], labels[JOB_LABEL], labels[CLASS_LABEL]) == ("false", "j42", "cpu_bound")
    # an evicted pod is replaced, not counted against backoffLimit 0 (the agent's moves)
    assert job["spec"]["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]


def test_a_moved_task_restarts_its_work_and_only_its_own_end_finishes_it() -> None:
    runs = [TaskRun("t1", "n0", "Running", 1.0, None, "t1-a", "uid-a"),
            TaskRun("t2", "n0", "Running", 1.0, None, "t2-a", "uid-b")]
    seen: dict[str, str] = {}
    assert replaced(runs, seen) == [] and seen == {"t1": "uid-a", "t2": "uid-b"}
    moved = [TaskRun("t1", "n0", "Failed", 1.0, 3.0, "t1-a", "uid-a", evicted=True),
             TaskRun("t1", "n1", "Running", 4.0, None, "t1-b", "uid-c"),
             TaskRun("t2", "n0", "Failed", 1.0, 5.0, "t2-a", "uid-b")]
    assert replaced(moved, seen) == ["t1"] and seen["t1"] == "uid-c"
    stopping = [TaskRun("t1", "n0", "Running", 1.0, None, "t1-a", "uid-a", evicted=True), moved[1]]
    assert replaced(stopping, seen) == [] and seen["t1"] == "uid-c"  # the old pod, still stopping, is not news
    assert finished_tasks(moved) == {"t2"}  # t1's evicted pod does not end t1
    c = Completions()
    c.submitted("t1", 0.0, 100.0, latency_sensitive=False)
    c.advance([("t1", 2.0)], 60.0, 60.0)
    assert c.restart("t1") == pytest.approx(30.0) and c.remaining_s["t1"] == 100.0
    assert c.restarts == 1 and c.lost_work_s == pytest.approx(30.0)
    c.finished("t1", 200.0)
    assert c.restart("t1") == 0.0 and c.restarts == 1  # a finished task is not restarted


def test_running_by_node_keeps_running_pods_on_known_nodes_only() -> None:
    a, b = (
        T(1, _kind("cpu_bound"), "cpu_bound", 1.0, False, 0.1),
        T(2, _kind("cpu_bound"), "cpu_bound", 1.0, False, 0.1),
    )
    runs = [
        TaskRun("t1", "n0", "Running", 1.0, None),
        TaskRun("t2", "n1", "Succeeded", 1.0, 2.0),
        TaskRun("t3", None, "Pending", None, None),
        TaskRun("t2", "elsewhere", "Running", 1.0, None),
    ]
    assert running_by_node(runs, ["n0", "n1"], {"t1": a, "t2": b}) == {0: [a], 1: []}


def test_stretched_live_tasks_keep_a_fallback_delay_longer_than_any_slowdown() -> None:
    arrival = T(7, _kind("cpu_bound"), "cpu_bound", 0.5, False, cpu=0.125, work_s=300.0)
    task = live_task(arrival, 10.0, stretch=True)
    assert task.run_s == pytest.approx(30.0 * FALLBACK_DELAY_FACTOR)
    worst = task_slowdowns(["llc_sensitive", "memory_bound"], np.array([[1.0, 1.0, 1.0, 1.0]] * 2)).max()
    assert worst < FALLBACK_DELAY_FACTOR  # the driver, not kwok's fallback, decides when a task ends


def test_completions_wear_work_down_by_the_slowdown_and_report_each_task_once() -> None:
    c = Completions()
    c.submitted("t1", 0.0, 100.0, latency_sensitive=False)
    c.submitted("t2", 0.0, 100.0, latency_sensitive=True)
    c.submitted("t3", 50.0, 20.0, latency_sensitive=False)
    # 50 arena s at slowdown 2 is 25 s of t1's work; t2 runs unhindered (slowdown below 1 counts as 1)
    assert c.advance([("t1", 2.0), ("t2", 0.9)], 50.0, 50.0) == []
    assert c.remaining_s == {"t1": pytest.approx(75.0), "t2": pytest.approx(50.0), "t3": 20.0}
    assert c.advance([("t1", 1.5), ("t2", 1.0), ("t3", 1.0)], 60.0, 110.0) == ["t2", "t3"]
    assert c.advance([("t1", 1.0), ("t2", 1.0), ("unknown", 1.0)], 40.0, 150.0) == ["t1"]
    assert c.advance([("t1", 1.0)], 10.0, 160.0) == []  # done once: kwok may still show it Running
    c.finished("t1", 170.0)  # seen Succeeded later: the first finish stands
    assert c.finished_s == {"t1": 150.0, "t2": 110.0, "t3": 110.0}
    # batch only (t1, t3): (150 - 0 + 110 - 50) / (100 + 20)
    assert c.completion_inflation() == pytest.approx(210.0 / 120.0)


def test_completion_inflation_without_stretching_comes_from_finishes_seen() -> None:
    c = Completions()
    assert np.isnan(c.completion_inflation())
    c.submitted("t1", 10.0, 100.0, latency_sensitive=False)
    c.finished("t1", 130.0)  # waited 20 s, ran its nominal 100
    assert c.completion_inflation() == pytest.approx(1.2)


def test_start_delay_is_submit_to_the_first_tick_seen_running() -> None:
    c = Completions()
    assert math.isnan(c.start_delays()["mean_start_delay_s"])
    c.submitted("a", 0.0, 100.0, latency_sensitive=True)
    c.submitted("b", 10.0, 100.0, latency_sensitive=False)
    c.running(["a"], 20.0)
    c.running(["a", "b", "unknown"], 30.0)  # a's first sighting counts; a task never submitted is ignored
    assert c.started_s == {"a": 20.0, "b": 30.0}
    delays = c.start_delays()
    assert delays["mean_start_delay_s"] == pytest.approx(20.0)
    assert delays["p95_start_delay_s"] == pytest.approx(20.0)


def test_the_passes_proposals_and_risk_records_are_tallied() -> None:
    from contracts.models import AgentName, FailureRiskV2, HorizonRisk, Proposal, ProposalKind, TargetRef
    from loadtests.arena_live.run import tally_proposals, tally_risk

    node = TargetRef(kind="Node", name="n1")
    kinds: list[tuple[AgentName, ProposalKind]] = [("admission", "taint"), ("admission", "taint"),
                                                   ("reliability", "evict")]
    proposals = [Proposal(proposal_id=f"p{i}", agent=agent, kind=kind, target=node, payload={}, score=0.5,
                          ts_ms=1_700_000_000_000) for i, (agent, kind) in enumerate(kinds)]
    assert tally_proposals(proposals) == {"proposals_admission_taint": 2.0, "proposals_reliability_evict": 1.0}

    def risk(p: float, out_of_range: list[str]) -> FailureRiskV2:
        return FailureRiskV2(target_kind="task", target="ns/t", ts_ms=1_700_000_000_000,
                             input_ts_ms=1_700_000_000_000, model_version="m",
                             horizons=[HorizonRisk(horizon_s=300, probability=p / 2),
                                       HorizonRisk(horizon_s=900, probability=p)], out_of_range=out_of_range)

    out = tally_risk([risk(0.7, []), risk(0.9, ["priority"]), risk(0.2, []), risk(0.1, ["priority", "cpu_request"])])
    assert out["risk_records"] == 4 and out["risk_in_range_share"] == 0.5
    assert out["risk_at_threshold"] == 1  # 0.9 reached it but was out of range: never counted as actionable
    assert out["risk_max_p"] == 0.9
    assert (out["risk_out_of_range_priority"], out["risk_out_of_range_cpu_request"]) == (2, 1)
    assert tally_risk([]) == {"risk_records": 0.0, "risk_in_range_share": 0.0, "risk_at_threshold": 0.0,
                              "risk_max_p": 0.0}


def test_load_term_without_the_corunner_weight_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loadtests.arena_live.run import main

    assert main(["--policies", "orchestrator", "--orchestrator-load-term", "--out", str(tmp_path / "x")]) == 2
    assert "--orchestrator-load-term needs --extender-corunner-weight > 0" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_the_orchestrator_pass_gets_the_guard_band_and_budget_it_is_given_else_the_services_defaults(
    tmp_path: Path,
) -> None:
    from loadtests.arena_live.run import LiveContext, orchestrator_overrides

    plain = LiveContext("b:9092", tmp_path / "k", tmp_path, 1, print)
    assert orchestrator_overrides(plain, 10.0) == {
        "agent-reliability": {}, "scheduler-extender": {},
        "referee": {"REFEREE_DISRUPTION_WINDOW_S": "30"}}  # 300 arena-s at 10x: 30 s of wall time
    banded = LiveContext("b:9092", tmp_path / "k", tmp_path, 1, print, move_slo_slowdown=1.2,
                         corunner_slo_slowdown=1.22, max_disruptions=10, disruption_window_s=600.0)
    assert orchestrator_overrides(banded, 10.0) == {
        "agent-reliability": {"AGENT_RELIABILITY_MOVE_SLO_SLOWDOWN": "1.2"},
        "scheduler-extender": {"EXTENDER_CORUNNER_SLO_SLOWDOWN": "1.22"},
        "referee": {"REFEREE_DISRUPTION_WINDOW_S": "60", "REFEREE_MAX_DISRUPTIONS": "10"}}


def test_the_overrides_name_settings_the_services_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the settings ignore unknown variables: a misspelt name would silently leave the service at its default
    from loadtests.arena_live.run import LiveContext, orchestrator_overrides
    from services.agents.settings import ReliabilitySettings
    from services.referee.settings import RefereeSettings
    from services.scheduler_extender.settings import ExtenderSettings

    banded = LiveContext("b:9092", tmp_path / "k", tmp_path, 1, print, move_slo_slowdown=1.2,
                         corunner_slo_slowdown=1.22, max_disruptions=10, disruption_window_s=600.0)
    for env in orchestrator_overrides(banded, 10.0).values():
        for name, value in env.items():
            monkeypatch.setenv(name, value)
    assert ReliabilitySettings().move_slo_slowdown == 1.2
    assert ExtenderSettings().corunner_slo_slowdown == 1.22
    referee = RefereeSettings()
    assert (referee.max_disruptions, referee.disruption_window_s) == (10, 60.0)


@pytest.mark.parametrize(("flags", "said"), [
    (["--move-slo-slowdown", "1"], "--move-slo-slowdown must be > 1 (a slowdown), got 1"),
    (["--extender-corunner-slo-slowdown", "0.9"], "--extender-corunner-slo-slowdown must be > 1 (a slowdown), got 0.9"),
    (["--referee-max-disruptions", "-1"], "--referee-max-disruptions must be >= 0"),
    (["--referee-disruption-window-s", "0"], "--referee-disruption-window-s > 0"),
])
def test_bad_orchestrator_settings_are_refused_before_anything_runs(
    flags: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loadtests.arena_live.run import main

    assert main(["--policies", "orchestrator", *flags, "--out", str(tmp_path / "x")]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
