"""The learned placement policy: state discretisation, the Q update, greedy choice, export, a tiny training run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from services.scheduler_extender.scoring import RegimeIn
from simulator.arena.aware import ArenaView, TaskPod
from simulator.arena.cli import eval_arena
from simulator.arena.kube_default import NodeResources, PodRequest
from simulator.arena.learned import LearnedPolicy, PlacementModel, load_placement_model, q_update, state_key
from training.placement.cli import train_placement
from training.placement.export import export_onnx, parity_error
from training.placement.train import TrainConfig, run_episode, train

GIB = 1 << 30
TRAIN_KINDS = ("analytics_scan", "compress", "crypto", "embedding_train", "graph_bfs", "jvm_microservice",
               "kv_cache", "monte_carlo", "php_app", "python_interp", "sql_join", "stream_triad")


def _label(regime: str, conf: float, **pred: float) -> RegimeIn:
    return RegimeIn(0, regime, conf, tuple(pred.items()))


def test_state_key_bins() -> None:
    pod = TaskPod(1000, 2 * GIB, "llc_sensitive", (0.8, 0.3, 0.2, 0.15), True)  # class 1, request 1/16 < 0.1
    node = NodeResources.with_pods(16000, 64 * GIB, [PodRequest(6000, 40 * GIB)])  # cpu 0.375 → bin 1, mem 0.625 → 1
    classes = np.array([2, 2], dtype=np.int64)
    # membw, confidence 0.9 ≥ 0.8 → 2, predicted 1.3 for llc_sensitive: ≥ 1.25, < 1.5 → 2
    label = _label("membw", 0.9, llc_sensitive=1.3, cpu_bound=1.0)
    assert state_key(pod, node, label, classes, "extender") == "1|0|membw|2|2|1|1"
    assert state_key(pod, node, label, classes, "extender+pods") == "1|0|membw|2|2|1|1|0010"
    empty = NodeResources(16000, 64 * GIB)
    assert state_key(pod, empty, None, np.zeros(0, dtype=np.int64), "extender+pods") == "1|0|absent|-|-|e|0|0000"
    abstained = RegimeIn(0, "unknown", 0.0, (), ("low_confidence",))
    big = TaskPod(4000, GIB, "cpu_bound")
    assert state_key(big, empty, abstained, np.zeros(0, dtype=np.int64), "extender") == "0|1|unknown|-|-|e|0"
    # edges: confidence exactly 0.5 → bin 1; predicted exactly 1.25 → bin 2 (over the SLO)
    assert state_key(pod, node, _label("llc", 0.5, llc_sensitive=1.25), classes, "extender").split("|")[3:5] == \
        ["1", "2"]
    with pytest.raises(ValueError, match="feature set"):
        state_key(pod, node, label, classes, "nope")


def test_q_update_hand_computed() -> None:
    # 0.5 + 0.5 * (-1 + 0.9 * 0.2 - 0.5) = 0.5 - 0.66 = -0.16
    assert q_update(0.5, -1.0, 0.5, gamma=0.9, next_max=0.2) == pytest.approx(-0.16)
    assert q_update(0.5, -1.0, 0.5) == pytest.approx(-0.25)
    m = PlacementModel(alpha_min=0.1)
    m.update("s", -1.0)  # n=1: alpha 1 → -1
    m.update("s", 0.0)  # n=2: alpha 1/2 → -0.5
    m.update("s", 1.0)  # n=3: alpha 1/3 → -0.5 + 1.5/3 = 0
    assert m.values["s"] == pytest.approx(0.0) and m.counts["s"] == 3
    for _ in range(20):
        m.update("s", 1.0)  # alpha floored at 0.1 once n > 10
    assert m.values["s"] == pytest.approx(1.0 - (1 - 1 / 4) * np.prod([1 - 1 / n for n in range(5, 11)]) * 0.9**13,
                                          abs=1e-9)
    m.update("t", -3.0)
    assert m.q("never seen") == pytest.approx((m.values["s"] - 3.0) / 2)


def _two_nodes_policy(q_empty: float, q_busy: float) -> tuple[LearnedPolicy, list[NodeResources], TaskPod]:
    view = ArenaView(3)
    view.classes[1] = np.array([2], dtype=np.int64)
    nodes = [NodeResources(16000, 64 * GIB),
             NodeResources.with_pods(16000, 64 * GIB, [PodRequest(2000, 4 * GIB)]),
             NodeResources.with_pods(16000, 64 * GIB, [PodRequest(15500, 4 * GIB)])]  # the pod does not fit
    pod = TaskPod(1000, 2 * GIB, "frontend_bound", (0.2, 0.1, 0.3, 0.75), True)
    model = PlacementModel("extender+pods")
    policy = LearnedPolicy(1, view, model)
    keys = policy.keys(pod, nodes, [0, 1, 2])
    model.values = {keys[0]: q_empty, keys[1]: q_busy, keys[2]: 100.0}  # the infeasible node looks best
    return policy, nodes, pod


def test_greedy_picks_higher_q_feasible_node_never_infeasible() -> None:
    policy, nodes, pod = _two_nodes_policy(-0.5, -0.1)
    assert policy.choose(pod, nodes) == 1
    policy, nodes, pod = _two_nodes_policy(-0.1, -0.5)
    assert policy.choose(pod, nodes) == 0
    big = TaskPod(17000, GIB, "cpu_bound")
    assert policy.choose(big, nodes) is None
    # exploring picks among feasible nodes only
    policy.epsilon = 1.0
    assert {policy.choose(pod, nodes) for _ in range(60)} == {0, 1}


def test_equal_q_goes_to_kube_default() -> None:
    policy, nodes, pod = _two_nodes_policy(-0.2, -0.2)
    assert policy.choose(pod, nodes) == 0  # least allocated


def test_save_load_and_onnx_parity(tmp_path: Path) -> None:
    m = PlacementModel("extender")
    for k, r in (("a|1", -1.0), ("a|1", -2.0), ("b|2", 0.25)):
        m.update(k, r)
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "q_table.json").write_bytes(m.to_json())
    (tmp_path / "CURRENT").write_text("v1\n")
    back = load_placement_model(tmp_path)
    assert back.values == m.values and back.features == "extender" and back.q("zz") == pytest.approx(-0.625)
    export_onnx(m, tmp_path / "q.onnx")
    assert parity_error(m, tmp_path / "q.onnx") < 1e-6
    with pytest.raises(ValueError, match="train one"):
        load_placement_model(tmp_path / "v1" / "missing")


def test_tiny_training_beats_random_on_generated_arrivals() -> None:
    """Seconds: 8 nodes, no regime path (labels absent), the residents' classes as the state."""
    cfg = TrainConfig(episodes=15, seed=3, nodes=8, horizon_s=900.0, jobs=120, features="extender+pods")
    model, curve = train(cfg, None, TRAIN_KINDS, lambda _msg: None)
    assert len(curve) == 15 and len(model.values) > 20
    greedy = [run_episode(model, None, cfg, TRAIN_KINDS, 77 + k, 0.0, learn=False) for k in range(3)]
    rand = [run_episode(model, None, cfg, TRAIN_KINDS, 77 + k, 1.0, learn=False) for k in range(3)]
    # measured: greedy -0.25, random -0.43 summed reward per placement (seed 3, arrival seeds 77-79)
    assert sum(g[0] for g in greedy) > sum(r[0] for r in rand) + 0.05
    assert sum(g[2] for g in greedy) < sum(r[2] for r in rand)  # fewer SLO-violation task-s too


def test_cli_trains_exports_and_arena_runs_learned(tmp_path: Path) -> None:
    out = tmp_path / "placement" / "v-test"
    code = train_placement(["--episodes", "1", "--nodes", "4", "--horizon-s", "200", "--seed", "2",
                            "-q", "--out", str(out)])
    assert code == 0
    card = orjson.loads((out / "model_card.json").read_bytes())
    assert card["heldout_kinds"] and not set(card["heldout_kinds"]) & set(card["train_kinds"])
    assert (out / "training_curve.png").stat().st_size > 0 and (out / "q_table.onnx").stat().st_size > 0
    assert (tmp_path / "placement" / "CURRENT").read_text().strip() == "v-test"
    arena = tmp_path / "arena"
    code = eval_arena(["--synthetic", "30", "--nodes", "5", "--horizon-s", "300", "--seed", "2", "-q",
                       "--policies", "random,learned", "--placement-model", str(tmp_path / "placement"),
                       "--out", str(arena)])
    assert code == 0
    doc = orjson.loads((arena / "results.json").read_bytes())
    by = {(r["case"], r["metric"]): r["value"] for r in doc["results"]}
    assert by[("learned", "placements")] > 10 and by[("learned", "slo_violation_task_s")] >= 0
    assert eval_arena(["--synthetic", "30", "--nodes", "5", "--horizon-s", "300", "-q", "--policies", "learned",
                       "--placement-model", str(tmp_path / "none"), "--out", str(arena)]) == 2


def test_borgctl_train_placement_missing_trace_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from borgctl.main import main as borgctl

    code = borgctl(["train", "placement", "--arrivals", "trace", "--task-events", str(tmp_path / "nope"),
                    "--out", str(tmp_path / "m" / "v")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "not found" in err[-1] and not (tmp_path / "m").exists()


@pytest.mark.shared_data
def test_trace_part_episodes_use_training_kinds_only(shared_data: Path) -> None:
    from training.placement.train import episode_arrivals, trace_parts

    (tasks,) = trace_parts(shared_data / "google2011" / "task_events", 2, 1)  # part 2: eval --quick reads 0-1
    assert len(tasks) > 1000
    cfg = TrainConfig(nodes=20, horizon_s=1800.0)
    arrivals = episode_arrivals(cfg, TRAIN_KINDS, 5, tasks)
    assert len(arrivals) > 100 and {a.kind for a in arrivals} <= set(TRAIN_KINDS)
    assert max(a.submit_s for a in arrivals) <= 1800.0 + 1e-6
