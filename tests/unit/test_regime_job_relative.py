"""training.regime.job_relative: a pod's deviation from its own job's reference (by hand), the reference window
(no later snapshot, old ones forgotten), the node input per variant, that a victim's deviations move with its
co-runner's pressure whatever its kind (the simulator's counter model), and the CLI end to end on tiny fleets
(the project's own simulator; no trace data); in ``--cluster`` mode, that the pods ride on ``borgctl eval regime``'s
own cluster without changing a node counter, and that its windows and labels are exactly that evaluation's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from featurelib.pod import EXTENDED_FEATURES
from simulator.cluster import EVENTS, SyntheticCluster, workload_rates
from simulator.workloads import KINDS
from training.pod_pressure import pod_counts
from training.regime import job_relative as jr
from training.regime.simwindows import simulate_windows

IPC, MISS = jr.FEATURE_INDEX["ipc"], jr.FEATURE_INDEX["miss_ratio"]


def _pod(ipc: float, miss: float, busy: float = 1.0) -> np.ndarray:
    row = np.full(len(jr.FEATURE_INDEX), 1.0)
    row[IPC], row[MISS], row[jr.FEATURE_INDEX["busy_cores"]] = ipc, miss, busy
    return row


_IDS = iter(range(1_000_000))


def _node(regime: int, pods: list[np.ndarray], jobs: list[tuple[str, int]], ids: list[int] | None = None
          ) -> jr.NodeWindow:
    """A node window; each pod a new one unless ``ids`` says otherwise."""
    return jr.NodeWindow(regime, np.asarray(pods), tuple(jobs), tuple(ids or [next(_IDS) for _ in pods]))


def test_deviation_is_the_log_ratio_to_the_jobs_undisturbed_pods_and_needs_enough_of_them() -> None:
    ref = jr.JobReference(history=2, ratios=(("ipc", 1.0, -1.0), ("miss_ratio", 0.0, 1.0)), min_pods=3)
    a = _node(0, [_pod(2.0, 0.1), _pod(1.0, 0.4)], [("kv", 0), ("kv", 0)])
    b = _node(0, [_pod(2.0, 0.2), _pod(3.0, 0.5)], [("kv", 0), ("web", 0)])
    ref.add([a, b])
    dev = ref.deviations(a)
    # job kv: IPC 2, 1, 2 → best 2; miss 0.1, 0.4, 0.2 → lowest 0.1
    assert dev[0] == pytest.approx([0.0, 0.0])
    assert dev[1] == pytest.approx([np.log(2.0), np.log(4.0)])  # half the IPC, four times the miss ratio
    assert np.isnan(ref.deviations(b)[1]).all()  # job web has one pod: no reference, no answer


def test_a_lone_replica_is_not_its_own_reference() -> None:
    ref = jr.JobReference(history=5, ratios=(("ipc", 1.0, -1.0),), min_pods=2)
    for ipc in (1.0, 1.1, 0.9):  # the same pod in three windows
        ref.add([_node(0, [_pod(ipc, 0.1)], [("kv", 0)], ids=[7])])
    assert np.isnan(ref.deviations(_node(0, [_pod(1.0, 0.1)], [("kv", 0)], ids=[7]))).all()
    ref.add([_node(0, [_pod(2.0, 0.1)], [("kv", 0)], ids=[8])])  # a second replica: now there is a reference
    assert ref.deviations(_node(0, [_pod(1.0, 0.1)], [("kv", 0)], ids=[7]))[0, 0] == pytest.approx(np.log(2.0))


def test_the_reference_reads_the_last_history_snapshots_only() -> None:
    ref = jr.JobReference(history=1, ratios=(("ipc", 1.0, -1.0),), min_pods=1)
    slow = _node(0, [_pod(1.0, 0.1)], [("kv", 0)])
    ref.add([_node(0, [_pod(4.0, 0.1)], [("kv", 0)])])
    assert ref.deviations(slow)[0, 0] == pytest.approx(np.log(4.0))
    ref.add([slow])  # the fast pod's snapshot drops out of a one-snapshot history
    assert ref.deviations(slow)[0, 0] == pytest.approx(0.0)


def test_node_inputs_per_variant_and_a_bad_variant_is_named() -> None:
    ref = jr.JobReference(history=1, ratios=jr.RATIOS, min_pods=1)
    w = _node(1, [_pod(2.0, 0.1, busy=2.0), _pod(1.0, 0.3, busy=1.0)], [("kv", 0), ("web", 0)])
    ref.add([w])
    dev = ref.deviations(w)
    victims = jr.node_vector(w, dev, "victims")
    assert len(jr.node_vector(w, dev, "victims_stalls")) == len(victims) + 2 * len(jr.STALL_RATIOS)
    assert victims[:2].tolist() == [2.0, 2.0]  # pods on the node, pods with a reference
    activity = jr.node_vector(w, dev, "victims_activity")
    assert len(activity) == len(victims) + 1 + len(jr.PROFILE)
    profile = jr.node_vector(w, dev, "profile")
    assert profile[0] == 2 and profile[1 + IPC] == 2.0 and profile[1 + len(EXTENDED_FEATURES) + IPC] == 1.0
    with pytest.raises(ValueError, match="unknown variant 'nodes'"):
        jr.node_vector(w, dev, "nodes")


def test_a_victims_deviation_follows_its_corunners_pressure_for_a_kind_never_named() -> None:
    """The evidence the screen relies on: beside an LLC aggressor a cache-sensitive pod's miss ratio rises and its
    IPC falls against the same kind beside a quiet pod — read only as a ratio to its own kind's pods."""
    spec = SyntheticCluster(nodes=1, seed=3).specs[0]
    rng = np.random.default_rng(0)

    def victim_features(names: list[str], aggressor_intensity: float) -> np.ndarray:
        inten = np.array([0.3, aggressor_intensity])
        pressures = np.array([KINDS[k].pressure for k in names]) * inten[:, None]
        rows = [jr.pod_row(pod_counts(workload_rates(spec, names, inten, pressures, rng)[0][0], rng))
                for _ in range(20)]
        return np.asarray(np.mean(rows, axis=0))

    pair = ["search_index", "graph_bfs"]
    quiet, loud = victim_features(pair, 0.2), victim_features(pair, 1.0)
    assert np.log(loud[MISS] / quiet[MISS]) > 0.3
    assert np.log(quiet[IPC] / loud[IPC]) > 0.3
    # a frontend hog raises its neighbour's frontend stalls, whatever the neighbour's class
    pair = ["video_encode", "php_app"]
    quiet, loud = victim_features(pair, 0.2), victim_features(pair, 1.0)
    stall = jr.FEATURE_INDEX["frontend_stall"]
    assert np.log(loud[stall] / quiet[stall]) > 0.2
    assert abs(np.log(loud[MISS] / quiet[MISS])) < 0.1


def test_cli_writes_every_variant_for_every_window_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "screen.json"
    assert jr.main(["--quick", "--windows", "1,2", "--out", str(out)]) == 0
    report = orjson.loads(out.read_bytes())
    assert set(report["settings"]) == {"windows_1", "windows_2"}
    for rows in report["settings"].values():
        assert set(rows) == set(jr.VARIANTS) - set(jr.NODE_VARIANTS)  # those read the node's features: --cluster
        for row in rows.values():
            assert set(row) == {*(f"heldout_seed{s}" for s in jr.EVAL_SEEDS), "train_kinds", "heldout_mean"}
            seeds = [row[f"heldout_seed{s}"]["accuracy"] for s in jr.EVAL_SEEDS]
            assert row["heldout_mean"]["accuracy"] == pytest.approx(np.mean(seeds))
            assert 0.0 <= row["heldout_mean"]["sel_at_060"] <= 1.0
    assert report["command"].startswith("python -m training.regime.job_relative --quick")
    assert "windows_2 victims_activity: held-out kinds accuracy" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "named"), [(["--windows", "1,x"], "--windows"), (["--history", "0"], "--history"),
                                             (["--variants", "victims,nodes"], "nodes"),
                                             (["--variants", "victims_node_lag"], "--cluster")])
def test_cli_names_a_bad_option(args: list[str], named: str, capsys: pytest.CaptureFixture[str],
                                tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        jr.main([*args, "--out", str(tmp_path / "f.json")])
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_the_pod_cluster_is_the_eval_clusters_node_side_bit_for_bit_and_its_pods_sum_to_the_node() -> None:
    kinds = ["search_index", "spmv", "video_encode", "web_frontend"]
    plain = SyntheticCluster(nodes=4, seed=7, workloads=kinds)
    pods = jr.PodCluster(nodes=4, seed=7, workloads=kinds, jobs_per_kind=3)
    for a, b in zip(plain.run(150), pods.run(150), strict=True):
        assert np.array_equal(a.values, b.values, equal_nan=True) and np.array_equal(a.regime, b.regime)
    for i in range(4):
        rates, node = pods.pod_rates[i], pods._rates[i]
        free = [c for c, name in enumerate(EVENTS) if name != "mem-bandwidth-bytes"]  # the node caps DRAM traffic
        assert rates.sum(axis=0)[free] == pytest.approx(node[free])
        epoch = pods._epochs[i]
        assert epoch is not None
        assert [job[0] for job in pods.pod_jobs[i]] == list(epoch.kinds)
        assert all(0 <= job[1] < 3 for job in pods.pod_jobs[i])


def test_cluster_windows_are_the_eval_regime_windows_with_their_labels() -> None:
    kinds = ["search_index", "spmv", "video_encode", "web_frontend"]
    windows = [w for tick in jr.cluster_windows(kinds, 8, nodes=4, ticks=120, jobs_per_kind=3, windows=2) for w in tick]
    expected = simulate_windows(kinds=kinds, nodes=4, ticks=120, seed=8)
    assert [w.regime for w in windows] == expected.regime.tolist()
    assert all(len(w.jobs) == len(w.pods) >= 1 and w.pods.shape[1] == len(jr.FEATURE_INDEX) for w in windows)
    # a pod's rates are scaled to a full window: busy cores stay those of its epoch, not of the ticks it was seen
    assert all(0.0 < w.pods[k, jr.FEATURE_INDEX["busy_cores"]] < 64 for w in windows for k in range(len(w.jobs)))


def test_cli_cluster_mode_judges_the_eval_clusters_windows(tmp_path: Path) -> None:
    out = tmp_path / "cluster.json"
    assert jr.main(["--cluster", "--quick", "--windows", "1", "--variants", "victims,victims_node_lag",
                    "--out", str(out)]) == 0
    report = orjson.loads(out.read_bytes())
    assert report["mode"] == "cluster"
    for variant in ("victims", "victims_node_lag"):
        row = report["settings"]["windows_1"][variant]
        # quick: 8 nodes × 60 s per held-out cluster = 48 windows, the eval cluster's panes
        assert all(row[f"heldout_seed{s}"]["windows"] == 48 for s in jr.EVAL_SEEDS)


def test_node_variants_add_the_nodes_features_and_its_previous_window() -> None:
    kinds = ["search_index", "spmv", "video_encode", "web_frontend"]
    data = jr.cluster_windows(kinds, 8, nodes=3, ticks=60, jobs_per_kind=3, windows=1)
    base, y = jr.vectors(data, "victims", 6)
    with_node, y2 = jr.vectors(data, "victims_node", 6)
    lagged, _ = jr.vectors(data, "victims_node_lag", 6)
    width = base.shape[1] + len(next(w for tick in data for w in tick).node_x)  # type: ignore[arg-type]
    assert np.array_equal(y, y2) and with_node.shape[1] == width and lagged.shape[1] == 2 * width
    np.testing.assert_array_equal(with_node[:, :base.shape[1]], base)
    nodes = [w.node for tick in data for w in tick]
    first = {n: nodes.index(n) for n in set(nodes)}
    for i, node in enumerate(nodes):
        if i == first[node]:
            assert np.isnan(lagged[i, width:]).all()
        else:
            before = max(j for j in range(i) if nodes[j] == node)
            np.testing.assert_array_equal(lagged[i, width:], with_node[before])
