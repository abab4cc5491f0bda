"""``borgctl eval arena`` end to end on synthetic arrivals (small), and its errors."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from simulator.arena.cli import KNOWN, eval_arena


def test_quick_synthetic_run_writes_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "arena"
    code = eval_arena(["--synthetic", "40", "--nodes", "6", "--horizon-s", "400", "--seed", "2", "-q",
                       "--out", str(out)])
    assert code == 0
    doc = orjson.loads((out / "results.json").read_bytes())
    cases = {r["case"] for r in doc["results"]}
    assert cases == set(KNOWN)
    assert all(r["bench"] == "arena" for r in doc["results"])
    by = {(r["case"], r["metric"]): r["value"] for r in doc["results"]}
    for policy in KNOWN:
        assert by[(policy, "placements")] > 20
        assert by[(policy, "evictions")] == 0
        assert 0 < by[(policy, "mean_cpu_utilisation")] <= 1
        assert by[(policy, "slo_violation_task_s")] >= 0
    assert 0 <= by[("extender", "model_coverage")] <= 1
    assert by[("extender", "model_cpu_us_per_decision")] > 0
    assert (out / "slowdown_cdf.png").stat().st_size > 0 and (out / "violations_over_time.png").stat().st_size > 0
    assert doc["details"]["heldout_kinds"] and doc["machine"]["cpus"]
    # the forecast section: every policy's node load scored (400 s: too short for the 1 h history rule)
    assert set(doc["details"]["forecast"]["policies"]) == set(KNOWN)
    assert all("points" in c for c in doc["details"]["forecast"]["policies"]["oracle"]["scores"].values())
    assert (out / "forecast_vs_actual.png").stat().st_size > 0


def test_missing_trace_dir_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = eval_arena(["--task-events", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])  # not quiet
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not found" in err[0]


def test_orchestrator_reports_its_decisions_the_passive_policies_none(tmp_path: Path) -> None:
    out = tmp_path / "o"
    # on the training kinds, with the co-runner term (issue 21's settings are chosen there)
    assert eval_arena(["--policies", "kube-default,orchestrator", "--synthetic", "40", "--nodes", "4",
                       "--horizon-s", "400", "--seed", "3", "-q", "--kinds", "train",
                       "--extender-corunner-weight", "0.5", "--out", str(out)]) == 0
    doc = orjson.loads((out / "results.json").read_bytes())
    assert doc["details"]["kinds"] == "train" and doc["details"]["extender_corunner_weight"] == 0.5
    assert doc["details"]["arrival_kinds"] and not set(doc["details"]["arrival_kinds"]) & set(
        doc["details"]["heldout_kinds"])  # the training kinds: none of the held-out ones
    by = {(r["case"], r["metric"]): r["value"] for r in doc["results"]}
    assert by[("kube-default", "referee_decisions_per_min")] == 0 and by[("kube-default", "actions_per_min")] == 0
    assert by[("orchestrator", "referee_decisions_per_min")] > 0  # 4 loaded nodes: the queue degrades
    assert by[("orchestrator", "orchestrator_cpu_us_per_decision")] > 0
    assert by[("orchestrator", "placements")] > 20


def test_orchestrator_moves_and_load_term_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert eval_arena(["--policies", "orchestrator", "--synthetic", "60", "--nodes", "4", "--horizon-s", "600",
                       "--seed", "2", "-q", "--extender-inputs", "none", "--extender-corunner-weight", "1",
                       "--orchestrator-moves", "--orchestrator-load-term", "--pod-pressure-noise", "0.1",
                       "--out", str(out)]) == 0
    doc = orjson.loads((out / "results.json").read_bytes())
    orch = doc["details"]["orchestrator"]
    assert (orch["moves"], orch["load_term"], orch["pod_pressure_noise"]) == (True, True, 0.1)
    row = doc["details"]["summary"]["orchestrator"]
    assert row["moves"] == row["actions_evict"] >= 1  # 4 crowded nodes: some pod is moved
    assert row["lost_work_task_s"] > 0
    assert eval_arena(["--synthetic", "10", "--pod-pressure-noise", "-1", "--out", str(tmp_path / "x")]) == 2
    assert "--pod-pressure-noise" in capsys.readouterr().err
    counters = tmp_path / "c"  # estimates from simulated per-cgroup counters (training.pod_pressure)
    assert eval_arena(["--policies", "orchestrator", "--synthetic", "30", "--nodes", "3", "--horizon-s", "300",
                       "--seed", "2", "-q", "--extender-inputs", "none", "--extender-corunner-weight", "1",
                       "--orchestrator-moves", "--pod-estimates", "counters", "--victims", "cpi",
                       "--cpi-window", "3", "--cpi-reference", "pods", "--cpi-quantile", "1",
                       "--cpi-clearance", "1.2", "--pod-estimates-job-prior", "--out", str(counters)]) == 0
    details = orjson.loads((counters / "results.json").read_bytes())["details"]["orchestrator"]
    assert (details["pod_estimates"], details["victims"]) == ("counters", "cpi")
    assert (details["cpi_window"], details["cpi_reference"], details["cpi_quantile"]) == (3, "pods", 1.0)
    assert (details["cpi_clearance"], details["pod_estimates_job_prior"]) == (1.2, True)
    row = orjson.loads((counters / "results.json").read_bytes())["details"]["summary"]["orchestrator"]
    assert row["observed_victim_evaluations"] > 0  # latency-sensitive pods judged by their IPC, scored on the truth
    assert 0.0 <= row["observed_victim_precision"] <= 1.0 and 0.0 <= row["observed_victim_recall"] <= 1.0
    assert eval_arena(["--synthetic", "10", "--cpi-window", "0", "--out", str(tmp_path / "v")]) == 2
    assert "--cpi-window must be >= 1" in capsys.readouterr().err
    assert eval_arena(["--synthetic", "10", "--cpi-quantile", "0", "--out", str(tmp_path / "u")]) == 2
    assert "--cpi-quantile must be in (0, 1]" in capsys.readouterr().err
    assert eval_arena(["--synthetic", "10", "--victims", "cpi", "--out", str(tmp_path / "y")]) == 2
    assert "--victims cpi needs --pod-estimates counters or rdt" in capsys.readouterr().err
    for name, extra, recorded in (
            ("m", ["--rdt-noise", "0.05"], {"rdt_noise": 0.05, "rdt_reading": "once", "rdt_saturated_at": None}),
            ("mr", ["--rdt-reading", "unsaturated", "--rdt-saturated-at", "0.8"],  # re-read, kept while calm
             {"rdt_noise": 0.1, "rdt_reading": "unsaturated", "rdt_saturated_at": 0.8}),
            ("mx", ["--rdt-reading", "rescaled"], {"rdt_reading": "rescaled", "rdt_saturated_at": 0.9}),
            ("mw", ["--rdt-reading", "window"], {"rdt_reading": "window", "rdt_saturated_at": 0.9}),
            ("ma", ["--rdt-reading", "window", "--move-slo-slowdown", "1.2",  # the rule acts below the SLO
                    "--extender-corunner-slo-slowdown", "1.2"],  # and placement counts crossings of 1.2
             {"rdt_reading": "window", "move_slo_slowdown": 1.2})):
        monitored = tmp_path / name  # llc and membw from per-cgroup resource monitoring, the rest from counters
        assert eval_arena(["--policies", "orchestrator", "--synthetic", "30", "--nodes", "3", "--horizon-s", "300",
                           "--seed", "2", "-q", "--extender-inputs", "none", "--extender-corunner-weight", "1",
                           "--orchestrator-moves", "--orchestrator-load-term", "--pod-estimates", "rdt", *extra,
                           "--out", str(monitored)]) == 0
        result = orjson.loads((monitored / "results.json").read_bytes())["details"]
        assert result["orchestrator"]["pod_estimates"] == "rdt"
        assert {k: result["orchestrator"][k] for k in recorded} == recorded
        assert result["summary"]["orchestrator"]["finished"] > 0
        assert result["extender_corunner_slo_slowdown"] == (1.2 if name == "ma" else 1.25)
    assert eval_arena(["--synthetic", "10", "--pod-estimates", "rdt", "--rdt-noise", "-1", "--out",
                       str(tmp_path / "r")]) == 2
    assert "--rdt-noise must be >= 0" in capsys.readouterr().err
    assert eval_arena(["--synthetic", "10", "--pod-estimates", "rdt", "--rdt-saturated-at", "1.5", "--out",
                       str(tmp_path / "rs")]) == 2
    assert "--rdt-saturated-at must be in (0, 1]" in capsys.readouterr().err
    assert eval_arena(["--synthetic", "10", "--cpi-clearance", "1.2", "--out", str(tmp_path / "t")]) == 2
    assert "--cpi-clearance needs --victims cpi and a LIMIT >= 1" in capsys.readouterr().err
    assert eval_arena(["--synthetic", "10", "--orchestrator-moves", "--move-margin", "-1", "--out",
                       str(tmp_path / "z")]) == 2
    assert "move setting margin must be >= 0" in capsys.readouterr().err
    assert eval_arena(["--synthetic", "10", "--orchestrator-moves", "--move-slo-slowdown", "1", "--out",
                       str(tmp_path / "zs")]) == 2
    assert "move setting slo_slowdown must be > 1, got 1.0" in capsys.readouterr().err
    assert eval_arena(["--synthetic", "10", "--extender-corunner-slo-slowdown", "0.9", "--out",
                       str(tmp_path / "zc")]) == 2
    assert "extender scoring: corunner_slo_slowdown must be > 1" in capsys.readouterr().err
    assert eval_arena(["--synthetic", "10", "--orchestrator-load-term", "--out", str(tmp_path / "w")]) == 2
    assert "--orchestrator-load-term needs --extender-corunner-weight" in capsys.readouterr().err


def test_referee_budget_bounds_the_moves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the crowded world of the moves' test above, where the default budget lets moves through
    common = ["--policies", "orchestrator", "--synthetic", "60", "--nodes", "4", "--horizon-s", "600", "--seed", "2",
              "-q", "--extender-inputs", "none", "--extender-corunner-weight", "1", "--orchestrator-moves",
              "--orchestrator-load-term", "--pod-pressure-noise", "0.1"]
    moved: dict[str, int] = {}
    for budget in ("0", "20"):
        out = tmp_path / f"b{budget}"
        assert eval_arena([*common, "--referee-max-disruptions", budget, "--referee-disruption-window-s", "120",
                           "--out", str(out)]) == 0
        details = orjson.loads((out / "results.json").read_bytes())["details"]
        recorded = details["orchestrator"]
        assert (recorded["referee_max_disruptions"], recorded["referee_disruption_window_s"]) == (int(budget), 120.0)
        moved[budget] = details["summary"]["orchestrator"]["moves"]
    assert moved["0"] == 0 < moved["20"]  # no budget, no move; the moves found are the budget's to let through
    assert eval_arena(["--synthetic", "10", "--referee-max-disruptions", "-1", "--out", str(tmp_path / "x")]) == 2
    assert "--referee-max-disruptions (or REFEREE_MAX_DISRUPTIONS): Input should be greater than or equal to 0" in (
        capsys.readouterr().err)
    assert eval_arena(["--synthetic", "10", "--referee-disruption-window-s", "0", "--out", str(tmp_path / "y")]) == 2
    assert "--referee-disruption-window-s (or REFEREE_DISRUPTION_WINDOW_S): Input should be greater than 0" in (
        capsys.readouterr().err)


def test_borgctl_eval_arena_live_goes_to_the_live_arena(tmp_path: Path) -> None:
    from borgctl.arena import eval_arena as borgctl_eval_arena

    # the live arena's own check, before it needs a cluster: an unknown policy is refused (exit 2)
    assert borgctl_eval_arena(["--live", "--policies", "oracle", "--out", str(tmp_path)]) == 2
    # the offline arena's extender options, for the live extender: out of range is refused the same way
    assert borgctl_eval_arena(["--live", "--extender-corunner-weight", "1.5", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "results.json").exists()


def test_live_scheduler_config_takes_the_extender_weight(tmp_path: Path) -> None:
    from loadtests.arena_live.kube import scheduler_config

    shipped = scheduler_config("s", tmp_path / "k", "http://x")["extenders"][0]["weight"]
    assert shipped == 5  # deploy/scheduler-extender/kube-scheduler-config.yaml
    (ext,) = scheduler_config("s", tmp_path / "k", "http://x", 2)["extenders"]
    assert (ext["weight"], ext["urlPrefix"]) == (2, "http://x")


@pytest.mark.parametrize("bad", [["--extender-corunner-weight", "1.5"], ["--extender-score-confidence", "-1"]])
def test_bad_extender_scoring_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 bad: list[str]) -> None:
    assert eval_arena(["--synthetic", "10", "--out", str(tmp_path / "o"), *bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "extender scoring" in err[0]
